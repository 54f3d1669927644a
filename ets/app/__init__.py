"""The commands: what a user runs (`ets demo|run|sweep|eval`) and the files they write.

    cli.py          argument parsing; every user error as one line and exit code 2
    run.py          `ets run`: problems -> the search loop -> a resumable JSONL + summary
    sweep.py        `ets sweep`: methods x widths (x seeds), one run each, then table and plots
    demo.py         `ets demo`: a one-width sweep on the embedded demo models and task
    samples.py      whole solutions sampled on the engine (demo training data, quality bars)
    evaluate.py     `ets eval`: accuracy of a results file under an aggregation and vote
    merge.py        `ets eval a.jsonl b.jsonl`: the slices of one run as one (overlaps, configs checked)
    at_n.py         `ets eval --at-n`: accuracy with n of each problem's trajectories, three choices
    at_n_plot.py    its plot (PNG and PDF)
    report.py       Markdown / CSV tables and the plots
    jsonl.py        reading results files (torn last line, corrupt lines named)
    writer.py       the resumable results file: one synced line per problem, kept in place
    records.py      what eval, compare, diagnose and rescore need of each record
    output.py       opening an output: path checks, resume or refuse, --overwrite, atomic writes
    provenance.py   the resolved config beside the results (<name>.config.json), compared on rerun
    lock.py         one writer per output (flock on the results file itself)
    distributed.py  `--workers N`: the driver that shards problems over Ray actors
    worker.py       one such actor: its own policy, reward model and strategy
    ets_results.py  reading the ETS public code's answers.json files into our records

This is the top layer: it may import everything below it; nothing imports it.
"""
