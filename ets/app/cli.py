"""The `ets` command.

    ets demo [--width 8 --problems 10 --seeds 0,1,2 --out DIR]
                                                    every method on the embedded default
    ets run --config FILE [key=value ...]           search a dataset, one JSON line per problem
    ets run --config FILE --check [key=value ...]   validate; print the resolved settings, run nothing
    ets eval FILE --agg last --vote weighted        accuracy of a results file
    ets eval FILE [FILE ...] --at-n [--plot PATH]   accuracy at n = 1, 2, 4 ... trajectories per
                                                    problem (several files: slices of one run)
    ets rescore --from FILE --config FILE --output PATH [key=value ...]
                                                    a best-of-N run's samples scored by another reward
    ets sweep --config FILE --methods a,b --widths 16,64 [--seeds 0,1,2] [key=value ...]
                                                    methods x widths (x seeds) -> table + plots
    ets presets [NAME]                              presets by model name, and the ETS code's model types
    ets --version

Every command takes `--quiet` (no progress bars, only errors logged) and `--log-level
DEBUG|INFO|WARNING|ERROR`; loading models draws no bars and logs no warnings of
transformers' or the hub's (they would cut through the run's one bar) unless DEBUG. What
`demo`, `sweep` and `compare` print fits 100 columns (the key figures, numbers as 98.7k);
`--wide` prints every column and the comparisons in full. `run`, `sweep` and `demo` resume their
output when rerun with the same config, refuse an output made by another config (naming
the keys that differ), and take `--overwrite` to start it afresh.

Every error a user can cause (bad arguments, config, data, model path, reward, output) ends
as one line `ets: error: ...` and exit code 2; nothing already written is lost or corrupted.
Only the project's own error types are caught: anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from typing import NoReturn, Sequence

# Before torch loads: idle OpenMP threads sleep instead of spinning. On a CPU shared with
# other work, spinning threads make every op wait on a descheduled one: two processes of 2
# threads at once on 2 cores ran 4.4x slower spinning than sleeping (docs/results.md,
# "Engine speed on the CPU"). Sleeping costs a wake-up per parallel op, so on a machine of one's own a short
# spin is faster (GOMP_SPINCOUNT=10000: a W=64 search 1.4x faster on 2 threads); it is the
# user's call, as only they know what else runs (libgomp's GOMP_SPINCOUNT overrides this).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ets import __version__
from ets.config import AGGREGATIONS, VOTES, ConfigError

log = logging.getLogger(__name__)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
AT_N_DRAWS = 5  # `ets eval --at-n`: draws of each n unless --at-n-seeds says


def _num(value, fmt: str) -> str:
    """A summary figure, or n/a when it is unknown (None)."""
    return "n/a" if value is None else format(value, fmt)


def _run(args: argparse.Namespace) -> int:
    from ets.config import load_config
    from ets.app.embedding_cost import embedding_line
    from ets.app.run import run

    config = load_config(args.config, list(args.overrides))
    _not_both(args.overrides, {"output": ("--output", args.output)})
    if args.output:
        config = dataclasses.replace(config, output=args.output)
    if args.check:
        from ets.app.run import check_config

        print(check_config(config, args.overwrite), end="")
        return 0
    from ets.app.memory_notes import plan_line
    from ets.app.terminal import plural, wrap

    summary = run(config, show_progress=not args.quiet, overwrite=args.overwrite, workers=args.workers,
                  ray_address=args.ray_address)
    print(f"wrote {config.output} ({plural(summary['problems'], 'problem')}, {summary['new_problems']} new)")
    print(
        f"accuracy {summary['accuracy']:.1%} | KV size/problem {summary['kv_size_per_problem']:,.0f} "
        f"(ETS code's metric {_num(summary.get('kv_size_ref_per_problem'), ',.0f')}) | "
        f"{_num(summary.get('tokens_per_s'), ',.0f')} tokens/s | wall {_num(summary.get('wall_time'), '.1f')} s"
    )
    if summary.get("expand_seconds"):
        print(_phases_line(summary))
    if (line := embedding_line(summary)) is not None:
        print(line)
    for report in summary.get("kv_memory", ()):
        print("\n".join(wrap(plan_line(report))))
    if (line := _full_pool_line(summary)) is not None:
        print("\n".join(wrap(line)))
    for line in _compile_lines(summary):
        print(line)
    return _workers_lines(summary)


def _phases_line(summary: dict) -> str:
    """Where the rounds' time went: policy, reward, selection (its share of the policy's)."""
    expand, score, select = (summary.get(k, 0.0) for k in ("expand_seconds", "score_seconds", "select_seconds"))
    return (f"rounds: policy {expand:.1f} s | reward {score:.1f} s | selection {select:.1f} s "
            f"({select / expand:.1%} of the policy's)")


def _full_pool_line(summary: dict) -> str | None:
    """When the policy's KV pool ran full (sequences preempted or locks spilled), what it
    cost and the fix: the run is right but slower, and nothing else would say why. None
    otherwise, and for a policy without the engine's counters."""
    stats, memory = summary.get("policy_stats") or {}, summary.get("policy_memory") or {}
    preempted, spilled = stats.get("preempted", 0), stats.get("spilled_handles", 0)
    if not (preempted or spilled) or not stats.get("generated_tokens"):
        return None
    peak = summary.get("mean_search_peak_kv")
    peaks = f"a search peaked at {peak:,.0f} tokens on average" if peak else ""
    workers = (summary.get("workers") or {}).get("count", 1)  # on Ray the pools are summed
    capacity = memory.get("capacity_tokens")  # vLLM may not say its size
    pool = "" if capacity is None else (f"the pool holds {capacity // workers:,}"
                                        + (" in each worker" if workers > 1 else ""))
    figures = "; ".join(x for x in (pool, peaks) if x)
    return (f"KV pool full: {preempted:,} sequences preempted, {spilled:,} locks spilled, "
            f"{stats['computed_tokens'] / stats['generated_tokens']:.2f} tokens computed a token generated"
            f"{f' ({figures})' if figures else ''}: a larger policy.kv_budget_tokens runs faster, with the same results")


def _compile_lines(summary: dict) -> list[str]:
    """For each engine whose forward was compiled (policy.compile), what compiling cost:
    its graphs and the seconds of the forwards that compiled them, and on CUDA whether any
    ran without CUDA graphs; or that a compiled forward failed and it ran eagerly. No line
    for an eager engine."""
    from ets.app.terminal import plural
    from ets.engine.compiled import CompiledModel

    lines = []
    for name in ("policy", "reward"):
        stats = summary.get(f"{name}_stats") or {}
        if stats.get("compile_failed"):
            lines.append(f"{name} forward: compiled, it failed and ran eagerly (the warning above says why)")
        elif stats.get("compiled_graphs"):
            skips = stats.get("cudagraph_skips", 0)
            lines.append(f"{name} forward compiled: {plural(stats['compiled_graphs'], 'graph')} over "
                         f"{stats.get('steps', 0):,} forwards, {stats['compile_seconds']:.1f} s in the forwards "
                         "that compiled them" + (f"; {CompiledModel.skips_note(skips)}" if skips else ""))
    return lines


def _workers_lines(summary: dict) -> int:
    """After a run on Ray workers: one line of their figures, one per problem that failed
    on several workers (not written: a rerun searches it again); exit status 1 if any."""
    w = summary.get("workers")
    if not w:
        return 0
    total = w["memory_total"]
    print(f"workers {w['count']} | restarts {w['restarts']} | retries {w['retries']} | "
          f"peak KV {_num(total.get('peak_live_tokens'), ',.0f')} tokens, RSS {total['peak_rss_mib']:,.0f} MiB in all")
    for pid, why in w["failed"].items():
        print(f"ets: problem {pid!r} not written: {why}", file=sys.stderr)
    return 1 if w["failed"] else 0


def _compare(args: argparse.Namespace) -> int:
    from ets.app.evaluate import EvalError
    from ets.app.paired import compare_lines, compare_runs
    from ets.app.result_runs import load_runs, seed_files
    from ets.app.terminal import comparison_blocks, short_names

    loaded = load_runs("compare", (args.base, *args.others), "whose records say whether each answer was right")
    names = ([path + seeds for path, seeds, _ in loaded] if args.wide
             else short_names([path for path, _, _ in loaded], [seeds for _, seeds, _ in loaded]))
    try:
        comparisons = compare_runs((names[0], loaded[0][2]), [(n, r) for n, (_, _, r) in zip(names[1:], loaded[1:])])
    except ValueError as exc:
        raise EvalError(str(exc)) from None
    for line in compare_lines(comparisons) if args.wide else comparison_blocks(comparisons):
        print(line)
    base_seeds = list(seed_files(args.base))
    for given, name in zip(args.others, names[1:]):
        if list(seed_files(given)) != base_seeds:  # each problem counts as its share right over its own seeds
            print(f"note: {name} and {names[0]} ran with different seeds; each problem is paired by its share "
                  f"right over each run's own seeds")
    return 0


def _diagnose(args: argparse.Namespace) -> int:
    from ets.app.diagnose import diagnose, diagnose_table
    from ets.app.evaluate import EvalError
    from ets.app.result_runs import load_runs

    if args.prefix_steps < 1:
        raise EvalError(f"--prefix-steps {args.prefix_steps}: give a number of steps >= 1")
    if len(set(args.files)) < len(args.files):
        raise EvalError(f"{' '.join(args.files)}: a file is named twice; list each once")
    from ets.app.terminal import short_names

    loaded = load_runs("diagnose", args.files, "whose trajectories keep their steps and finish reasons")
    # columns by file name (with its seeds), else by path where two files share a name
    names = short_names([path for path, _, _ in loaded], [seeds for _, seeds, _ in loaded])
    runs = []
    for name, (_, _, per_seed) in zip(names, loaded):
        # over seeds, each (problem, seed) search counts as one of the column's problems
        figures = diagnose([r for records in per_seed for r in records], args.prefix_steps)
        runs.append((name, {**figures, "seeds": len(per_seed)}))
    if args.json:
        print(json.dumps(dict(runs)))
    else:
        for line in diagnose_table(runs):
            print(line)
    return 0


def _presets(args: argparse.Namespace) -> int:
    from ets.config import model_preset_keys, model_preset_table, preset_lines

    if args.name:
        for line in model_preset_keys(args.name):
            print(line)
        return 0
    print("Presets by model name: a policy.model or reward.model whose name matches a row gets these")
    print("settings (explicit keys win; `ets presets NAME` prints a row's keys in full).\n")
    for line in model_preset_table():
        print(line)
    print("\nThe ETS code's model types, which its recipes name as policy_model_type and reward_model_type")
    print("(explicit policy.* and reward.* keys win; docs/FIDELITY.md has more):\n")
    for line in preset_lines():
        print(line)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ets.app.evaluate import EvalError, evaluate
    from ets.app.merge import load_merged
    from ets.app.result_runs import named_file, seed_files

    if not args.at_n and (args.plot is not None or args.at_n_seeds is not None):
        flag = "--plot" if args.plot is not None else "--at-n-seeds"
        raise EvalError(f"{flag} is an option of --at-n; add --at-n (or drop {flag})")
    if args.at_n and args.vote is not None:
        raise EvalError("--vote is not an option of --at-n, which shows all three votes; drop --vote")
    if args.at_n and args.by is not None:
        raise EvalError("--by is not an option of --at-n; run `ets eval --by` on its own")
    if len(args.files) == 1 and (seeds := seed_files(args.files[0])):
        return _eval_seeds(args, seeds)
    args.files = [named_file(f) for f in args.files]
    run = load_merged(args.files)
    _recorded_choice(args, run.records)
    if args.at_n:
        return _at_n(args, run)
    result = evaluate(run.records, args.agg, args.vote, float_rounding=args.float_rounding, by=args.by)
    files = f", {len(run.files)} files" if len(run.files) > 1 else ""
    if len(run.files) > 1:
        result["files"] = run.files
    if args.json:
        print(json.dumps(result))
    else:
        ungraded = f"; {result['ungraded']} without a ground truth not counted" if result.get("ungraded") else ""
        print(f"accuracy {result['accuracy']:.1%} ({result['correct']}/{result['problems']}) agg={args.agg} "
              f"vote={args.vote}{files}{ungraded}")
        if args.by is not None:
            from ets.app.by_field import by_table

            print("\n".join(by_table(args.by, result["by"][args.by])))
    return 0


def _eval_seeds(args: argparse.Namespace, seeds: dict[str, str]) -> int:
    """`ets eval` of a sweep's run named without its seed: each seed's accuracy, and their
    mean and sample sd."""
    import statistics

    from ets.app.evaluate import EvalError, evaluate, load_results
    from ets.app.terminal import plural

    if args.at_n:
        raise EvalError(f"--at-n reads one run: pass one seed's file, e.g. {next(iter(seeds.values()))}")
    records = {seed: load_results(path) for seed, path in seeds.items()}
    _recorded_choice(args, [r for rs in records.values() for r in rs])
    results = {seed: evaluate(rs, args.agg, args.vote, float_rounding=args.float_rounding, by=args.by)
               for seed, rs in records.items()}
    accuracies = [r["accuracy"] for r in results.values()]
    mean = statistics.fmean(accuracies)
    sd = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
    if args.json:
        print(json.dumps({"seeds": results, "accuracy_mean": mean, "accuracy_sd": sd}))
        return 0
    for seed, r in results.items():
        print(f"seed {seed}: accuracy {r['accuracy']:.1%} ({r['correct']}/{r['problems']})")
    print(f"accuracy {mean:.1%} ± {100 * sd:.1f} points (mean ± sd over {plural(len(results), 'seed')}) "
          f"agg={args.agg} vote={args.vote}")
    if args.by is not None:
        from ets.app.by_field import seeds_table

        print("\n".join(seeds_table(args.by, {seed: r["by"][args.by] for seed, r in results.items()})))
    return 0


def _recorded_choice(args: argparse.Namespace, records: list[dict]) -> None:
    """`--agg` and `--vote` not given: the run's own (its records', where they agree), so
    that `ets eval` reads what the run's summary and tables read; else `last` / `weighted`
    (the ETS code's answers.json records neither)."""
    for key, flag, default in (("aggregation", "agg", "last"), ("vote", "vote", "weighted")):
        if getattr(args, flag) is None:
            recorded = {r.get(key) for r in records}
            setattr(args, flag, recorded.pop() if len(recorded) == 1 and None not in recorded else default)


def _at_n(args: argparse.Namespace, run) -> int:
    from ets.app.at_n import accuracy_at_n, at_n_table
    from ets.app.at_n_plot import at_n_title, plot_at_n, plot_paths
    from ets.app.evaluate import EvalError

    if args.float_rounding is not None and args.float_rounding < 0:
        raise EvalError(f"--float-rounding {args.float_rounding}: give a number of decimal places >= 0")
    try:
        figures = accuracy_at_n(run.records, args.agg, args.at_n_seeds or AT_N_DRAWS,
                                float_rounding=args.float_rounding)
    except ValueError as exc:
        raise EvalError(f"{' '.join(run.files)}: {exc}") from None
    if methods := sorted({r["method"] for r in run.records if r.get("method") not in (None, "best_of_n")}):
        log.warning("--at-n reads each problem's trajectories as independent samples, which best-of-N's are; "
                    "these are %s's, grown from each other, so a subset of n is no search of width n",
                    "/".join(methods))
    paths = plot_paths(args.plot, run.files[0])
    plot_at_n(figures, paths, at_n_title(figures, run.made, run.records, len(run.files)))
    if len(run.files) > 1:
        figures["files"] = run.files
    figures["plot"] = [str(p) for p in paths]
    if args.json:
        print(json.dumps(figures))
    else:
        for line in at_n_table(figures):
            print(line)
        print(f"\nplot: {paths[0]} and {paths[1].name}")
    return 0


def _rescore(args: argparse.Namespace) -> int:
    from ets.config import load_config
    from ets.app.rescore import rescore
    from ets.app.terminal import plural

    _not_both(args.overrides, {"output": ("--output", args.output)})
    config = dataclasses.replace(load_config(args.config, list(args.overrides)), output=args.output)
    summary = rescore(args.source, config, show_progress=not args.quiet, overwrite=args.overwrite)
    print(f"wrote {config.output} ({plural(summary['problems'], 'problem')}, {summary['new_problems']} new; "
          f"{_num(summary.get('rescore_seconds'), '.1f')} s of scoring)")
    print(f"accuracy {summary['accuracy']:.1%} | KV size/problem {summary['kv_size_per_problem']:,.0f} "
          f"(the sampling run's)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    import time

    from ets.app.demo import demo_jobs, demo_title, run_demo
    from ets.app.sweep import parse_methods, parse_seeds
    from ets.app.terminal import sweep_lines

    methods = _distinct(parse_methods(args.methods), "--methods")
    seeds = _distinct(parse_seeds(args.seeds), "--seeds") if args.seeds is not None else None
    jobs = args.jobs or (1 if args.workers > 1 or args.ray_address else demo_jobs())
    start = time.perf_counter()
    rows = run_demo(args.width, args.problems, args.out, methods, args.backend, show_progress=not args.quiet,
                    overwrite=args.overwrite, workers=args.workers, ray_address=args.ray_address, seeds=seeds,
                    jobs=jobs)
    print()
    runs = len(methods) * len(seeds or [None])  # fewer runs than jobs: that many ran at once
    print(demo_title(rows, args.width, seeds, min(jobs, runs)))
    print("\n".join(sweep_lines(rows, args.wide)))
    print(f"\nresults, table.md/.csv and methods.png/.pdf in {args.out}/ ({time.perf_counter() - start:.0f} s)")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ets.config import load_config
    from ets.data import load_problems
    from ets.app.output import check_outputs
    from ets.app.sweep import parse_methods, parse_seeds, parse_widths, run_sweep, sweep_configs
    from ets.app.terminal import sweep_lines

    config = load_config(args.config, list(args.overrides))
    _not_both(args.overrides, {"method": ("--methods", args.methods), "width": ("--widths", args.widths),
                               "seed": ("--seeds", args.seeds), "output": ("--out", args.out)})
    # Everything is validated before any work starts.
    methods = _distinct(parse_methods(args.methods or config.search.method), "--methods")
    widths = _distinct(parse_widths(args.widths or str(config.search.width)), "--widths")
    seeds = _distinct(parse_seeds(args.seeds), "--seeds") if args.seeds is not None else None
    out = Path(args.out or Path(config.output).parent / "sweep")
    check_outputs(sweep_configs(config, methods, widths, out, seeds), load_problems(config.data),
                  overwrite=args.overwrite, way_out="pass another --out folder, or --overwrite to start it afresh")
    rows = run_sweep(config, methods, widths, out, show_progress=not args.quiet, workers=args.workers,
                     ray_address=args.ray_address, seeds=seeds, jobs=args.jobs, overwrite=args.overwrite)
    print()
    print("\n".join(sweep_lines(rows, args.wide)))
    print(f"\ntable.md, table.csv and plots (PNG and PDF) in {out}/")
    return 0


def _not_both(overrides: Sequence[str], flags: dict[str, tuple[str, Any]]) -> None:
    """A key set both by its flag ({key: (flag, its value or None)}) and by a key=value
    override is refused: one of the two would be dropped without a word."""
    from ets.config import ETS_KEY_ALIASES, ConfigError

    for item in overrides:
        key = item.partition("=")[0].strip()
        name = key.removeprefix("search.")
        name = ETS_KEY_ALIASES.get(name, name)
        flag, value = flags.get(name, (None, None))
        if value is not None:
            raise ConfigError(f"{item!r} and {flag} both set the {name}; keep one")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"give a whole number >= 1, not {text!r}")
    return value


def _distinct(values: Sequence, flag: str) -> list:
    """Each method (width, seed) once: a repeated one would run twice into one output."""
    seen = set()
    for v in values:
        if v in seen:
            raise ConfigError(f"{flag} names {v!r} twice; list each once")
        seen.add(v)
    return list(values)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors (a missing --config, an unknown flag, a bad number)
    are the project's one line, without argparse's usage block; its subcommands' parsers
    are of this class too."""

    def error(self, message: str) -> NoReturn:
        usage_error(self.prog, message)


def usage_error(prog: str, message: str) -> NoReturn:
    """`ets: error: MESSAGE (see PROG --help)` and exit code 2, as argparse exits (SystemExit)."""
    print(f"ets: error: {' '.join(message.split())} (see {prog} --help)", file=sys.stderr)
    raise SystemExit(2)


def _common(quiet_help: str) -> argparse.ArgumentParser:
    """--quiet and --log-level, accepted before or after the command name."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS, help=quiet_help)
    p.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper, default=argparse.SUPPRESS,
                   help="Python logging level (default WARNING; ERROR with --quiet)")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ets", parents=[_common("no progress bars, only errors logged")],
                                     description="Tree-search test-time compute (best-of-N, beam, DVTS, REBASE, ETS).")
    parser.add_argument("--version", action="version", version=f"ets {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    common = _common("no progress bars (transformers' included), only errors logged")
    overwrite = argparse.ArgumentParser(add_help=False)
    wide = argparse.ArgumentParser(add_help=False)
    wide.add_argument("--wide", action="store_true",
                      help="print every column and the comparisons in full (default: the key figures, within 100 "
                           "columns; every column is in table.md and table.csv either way)")
    overwrite.add_argument("--overwrite", action="store_true",
                           help="start the output afresh: its old results are removed once the new run writes "
                                "its first result (default: resume it)")
    distributed = argparse.ArgumentParser(add_help=False)
    distributed.add_argument("--workers", type=_positive, default=1, metavar="N",
                             help="shard the problems over N Ray workers, each with its own models (one GPU each "
                                  "when policy.device is cuda); default 1: this process alone, no Ray")
    distributed.add_argument("--ray-address", metavar="ADDR",
                             help="join this Ray cluster (e.g. auto, or HOST:6379 from `ray start --head`); "
                                  "default with --workers: a local Ray, started and stopped with the run")

    jobs_help = ("runs at a time, each in its own process with its own models, the cores shared out as torch "
                 "threads and a GPU's KV memory as shares of policy.memory_fraction; records do not depend on "
                 "it, wall times do (runs share the machine)")
    p = sub.add_parser("demo", parents=[common, overwrite, distributed, wide],
                       help="every method on the bundled demo models and task; prints one table")
    # docs/results.md has W=64 on more problems.
    p.add_argument("--width", type=_positive, default=8, help="search width W (default 8)")
    p.add_argument("--problems", type=_positive, default=10, help="demo test problems to search (default 10)")
    p.add_argument("--out", default="ets-demo",
                   help="output folder (default ./ets-demo); rerun with the same options to resume")
    p.add_argument("--methods", default="best_of_n,beam,dvts,rebase,ets", help="comma-separated methods")
    p.add_argument("--backend", default="engine", choices=("engine", "hf"), help="policy backend (default engine)")
    p.add_argument("--seeds", metavar="S,S,...", default="0,1,2",
                   help="comma-separated search seeds: every method runs once per seed (files "
                        "<method>_w<width>_s<seed>.jsonl) and the table shows mean ± sd over them (default 0,1,2; "
                        "one seed, e.g. --seeds 0, writes <method>_w<width>.jsonl)")
    p.add_argument("--jobs", type=_positive, default=None, metavar="N",
                   help=jobs_help + " (default: one per core, at most 4; --jobs 1 for timings of runs alone)")
    p.set_defaults(func=_demo)

    p = sub.add_parser("run", parents=[common, overwrite, distributed], help="search every problem of a dataset; resumable JSONL output")
    p.add_argument("--config", required=True, help="YAML config (see configs/)")
    p.add_argument("--output", help="results JSONL (overrides the config's `output`)")
    p.add_argument("--check", action="store_true",
                   help="validate the config (and the data, the reward, the model paths, every prompt against the "
                        "model's context) and print the resolved settings as YAML; no model is loaded, nothing run")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. width=32 method=ets policy.backend=hf")
    p.set_defaults(func=_run)

    p = sub.add_parser("sweep", parents=[common, overwrite, distributed, wide],
                       help="methods x widths on one dataset: CSV, Markdown table, PNG plots; resumable")
    p.add_argument("--config", required=True, help="YAML config (dataset, models, search settings)")
    p.add_argument("--methods", help="comma-separated, e.g. best_of_n,beam,dvts,rebase,ets (default: the config's)")
    p.add_argument("--widths", help="comma-separated, e.g. 16,64,256 (default: the config's)")
    p.add_argument("--seeds", metavar="S,S,...",
                   help="comma-separated search seeds, e.g. 0,1,2: every (method, width) pair runs once per seed (files "
                        "<method>_w<width>_s<seed>.jsonl) and the table shows mean ± sd over them; default: the config's "
                        "seed alone (files <method>_w<width>.jsonl)")
    p.add_argument("--out", help="output folder (default: <config output folder>/sweep)")
    p.add_argument("--jobs", type=_positive, default=1, metavar="N", help=jobs_help + " (default 1: runs alone)")
    p.add_argument("overrides", nargs="*", help="key=value overrides")
    p.set_defaults(func=_sweep)

    p = sub.add_parser("eval", parents=[common], help="accuracy of a results file (ours or the ETS code's answers.json), "
                                                      "of the slices of one run in several files, or of a sweep's "
                                                      "run over its seeds")
    p.add_argument("files", nargs="+", metavar="file",
                   help="results file; several: the slices of one dataset searched apart (e.g. a Slurm array), "
                        "merged (a problem in two files, or twice in one, and files of different configs are refused); "
                        "a sweep's run named without its seed (runs/s/rebase_w64): each seed's accuracy, and their "
                        "mean and sd (a run of one seed: its one file, runs/s/rebase_w64.jsonl)")
    p.add_argument("--agg", default=None, choices=AGGREGATIONS, help="step-score aggregation (default: the "
                                                                     "run's own, else last)")
    p.add_argument("--vote", default=None, choices=VOTES, help="how the answer is chosen (default: the run's own, "
                                                              "else weighted; not with --at-n, which shows all three)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--by", default=None, metavar="NAME",
                   help="also the accuracy of each group of problems sharing a value of their data field NAME "
                        "(the records' fields: MATH500's level or subject)")
    p.add_argument("--at-n", action="store_true",
                   help="accuracy with n = 1, 2, 4, ... of each problem's W trajectories (and W), drawn without "
                        "replacement: the naive (best-scored), weighted and majority choices; a table and a plot")
    p.add_argument("--at-n-seeds", type=_positive, default=None, metavar="K",
                   help=f"with --at-n: draws of each n; the figures are their mean and sample sd "
                        f"(default {AT_N_DRAWS})")
    p.add_argument("--plot", metavar="PATH",
                   help="with --at-n: the plot's path, written as PATH.png and PATH.pdf (default beside the first "
                        "results file: <name>.at_n.png and .pdf)")
    p.add_argument("--float-rounding", type=int, default=None, metavar="N",
                   help="let a decimal match an exact value when both agree to N decimal places "
                        "(default: decimals are exact, so 4.666667 is not 14/3)")
    p.set_defaults(func=_eval)

    p = sub.add_parser("rescore", parents=[common, overwrite],
                       help="a best-of-N run's samples scored by another reward and voted again, without sampling "
                            "again: the records `ets run` with that reward would write; resumable")
    p.add_argument("--from", dest="source", required=True, metavar="FILE",
                   help="results file (JSONL) of a best-of-N `ets run`, its config.json beside it")
    p.add_argument("--config", required=True,
                   help="YAML config: the source run's but for the reward and the vote (others are refused)")
    p.add_argument("--output", required=True, help="results JSONL to write (resumed if it exists)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. reward.model=PATH")
    p.set_defaults(func=_rescore)

    p = sub.add_parser("compare", parents=[common],
                       help="runs against a base run on the problems both searched: accuracy difference, paired, "
                            "with its 95%% bootstrap interval, and KV size")
    runs_help = ("; a sweep's run named without its seed (runs/s/rebase_w64) stands for its seed files "
                 "(runs/s/rebase_w64_s<seed>.jsonl), each problem counted as its share right over them (a run of "
                 "one seed: its one file, runs/s/rebase_w64.jsonl)")
    p.add_argument("base", help="results file (JSONL of `ets run`) the others are compared against" + runs_help)
    p.add_argument("others", nargs="+", metavar="other", help="results files to compare with the base, or sweep runs")
    p.add_argument("--wide", action="store_true",
                   help="one line per run, in full: paths as given, the problems each method did better on")
    p.set_defaults(func=_compare)

    p = sub.add_parser("diagnose", parents=[common],
                       help="where a run's votes went: problems with a right trajectory, the right and the leading "
                            "wrong answer's shares, distinct answers and prefixes, trajectories cut at the depth cap")
    p.add_argument("files", nargs="+", metavar="file",
                   help="results files (JSONL of `ets run`), one column each; a sweep's run named without its seed "
                        "(runs/s/rebase_w64) is one column over its seed files, each (problem, seed) search counted once (a run "
                        "of one seed: its one file)")
    p.add_argument("--prefix-steps", type=int, default=3, metavar="K",
                   help="count the distinct first K steps of a problem's trajectories (default 3)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON, by file name")
    p.set_defaults(func=_diagnose)

    p = sub.add_parser("presets", parents=[common],
                       help="the presets by model name, and the ETS code's model types (policy_model_type / "
                            "reward_model_type)")
    p.add_argument("name", nargs="?", help="a preset's glob or a model name: print every key it sets")
    p.set_defaults(func=_presets)
    return parser


class _StderrHandler(logging.StreamHandler):
    """Writes to the current sys.stderr (which tests and notebooks replace)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def configure_logging(level: str | None, quiet: bool, models: bool) -> None:
    """The root logger at `level` (default WARNING; ERROR when quiet) with one stderr
    handler. With `models`, loading them is quiet unless `level` is DEBUG: transformers'
    weight-loading bars and warnings, and the hub's bars, would cut through the run's one
    progress bar (`quiet_model_loading`)."""
    name = level or ("ERROR" if quiet else "WARNING")
    root = logging.getLogger()
    root.setLevel(name)
    handler = next((h for h in root.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("ets: %(levelname)s: %(name)s: %(message)s"))
        root.addHandler(handler)
    # at the handler too: a library's logger set to a level of its own (the hub's WARNING)
    # passes its records to the root's handlers whatever the root's level
    handler.setLevel(name)
    if models:
        from ets.models.quiet import quiet_model_loading

        quiet_model_loading(name != "DEBUG")


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input, reported as one line rather than a traceback.
    Only the project's own types (and a missing file): a KeyError or any other exception
    from inside is a bug, and its traceback is what finds it."""
    from ets.config import ConfigError
    from ets.data import DataError
    from ets.app.evaluate import EvalError
    from ets.app.jsonl import ResultsFileError
    from ets.models.load import ModelLoadError
    from ets.plugins import PluginError
    from ets.rewards.base import RewardError

    return (ConfigError, DataError, EvalError, ResultsFileError, ModelLoadError, RewardError, PluginError,
            FileNotFoundError)


def lost_process() -> type[BaseException]:
    """A sweep's run whose process was killed (ets/app/sweep.py)."""
    from ets.app.sweep import RunProcessLost

    return RunProcessLost


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if isinstance(getattr(args, "overrides", None), list):
        # key=value overrides after a flag (`... width=8 --check data.limit=2`): argparse
        # takes the positionals before it only
        extra = [item for item in unknown if "=" in item and not item.startswith("-")]
        args.overrides += extra
        unknown = [item for item in unknown if item not in extra]
    if unknown:  # named with the command they were given to
        usage_error(f"ets {args.command}", f"unrecognized arguments: {' '.join(unknown)}")
    # an option given as "" (a shell variable that was never set) would fall back to the
    # config's value unsaid; every option that takes a value defaults to None, not ""
    empty = [name for name, value in vars(args).items() if value == ""]
    if empty:  # named as given: --from's value is args.source, compare's base a positional
        name = {"source": "--from", "base": "base"}.get(empty[0], "--" + empty[0].replace("_", "-"))
        usage_error(f"ets {args.command}", f"{name} is empty; give it a value or leave it out")
    args.quiet = getattr(args, "quiet", False)
    from ets.app.stopping import EXIT_CODE, Terminated, stop_on_sigterm, terminated

    stop_on_sigterm()
    try:
        # (in the try: a Ctrl-C in its imports of torch and transformers is one line too)
        configure_logging(getattr(args, "log_level", None), args.quiet,
                          models=args.command not in ("eval", "compare", "diagnose", "presets"))
        return args.func(args)
    except KeyboardInterrupt as stop:
        # before `user_errors()`, whose imports an interrupted import can leave half done
        print("ets: interrupted; finished problems are saved, rerun the same command to resume", file=sys.stderr)
        return EXIT_CODE if isinstance(stop, Terminated) or terminated() else 130
    except user_errors() as exc:
        print(f"ets: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except lost_process() as exc:  # not bad input: exit code 1, in one line all the same
        print(f"ets: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `ets presets | head`: the reader has what it wanted
        # stdout to /dev/null, so that Python's flush at exit finds no pipe to fail on again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE


def _one_line(exc: BaseException) -> str:
    text = str(exc) if not isinstance(exc, FileNotFoundError) or not exc.filename else f"{exc.filename}: {exc.strerror}"
    return " ".join(text.split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
