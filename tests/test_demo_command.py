"""`ets demo` end to end on the shipped checkpoints (few problems, small width: fast)."""

import csv

import pytest

from ets.app.cli import main


def test_demo_runs_every_method_and_writes_table_and_plot(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the output folder as a user names it: ./demo
    argv = ["demo", "--width", "4", "--problems", "3", "--seeds", "0", "--out", "demo", "--jobs", "1"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    printed, out = captured.out, tmp_path / "demo"
    methods = ["best_of_n", "beam", "dvts", "rebase", "ets"]
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert [r["method"] for r in rows] == methods
    for r in rows:
        assert int(r["problems"]) == 3 and 0 <= float(r["accuracy"]) <= 1
        assert float(r["kv_size_per_problem"]) > 0 and int(r["peak_kv_tokens"]) > 0
        assert float(r["tokens_per_s"]) > 0
        assert f"| {r['method']} " in printed
        assert (out / f"{r['method']}_w4.jsonl").read_text().count("\n") == 3
        # the accuracy's interval over the problems, kept for plots redrawn from the table
        assert float(r["accuracy_ci_low"]) <= float(r["accuracy"]) <= float(r["accuracy_ci_high"])
    assert (out / "methods.png").stat().st_size > 10_000 and (out / "methods.pdf").read_bytes()[:4] == b"%PDF"
    # In a terminal of 100 columns nothing wraps: the key columns, compact numbers, and the
    # paper's comparisons as a small table, paired over the 3 problems (ets/app/paired.py).
    lines = printed.splitlines()
    assert max(map(len, lines)) <= 100, [line for line in lines if len(line) > 100]
    header = next(line for line in lines if line.startswith("| method "))
    assert [c.strip() for c in header.strip("|").split("|")][:5] == ["method", "W", "accuracy", "KV/problem",
                                                                      "problems/s"]
    assert "vote (aggregation)" not in printed and "ETS code's metric" not in printed
    ets_row = next(line for line in lines if line.startswith("| ets "))
    kv = float(next(r for r in rows if r["method"] == "ets")["kv_size_per_problem"])
    assert f" {kv / 1000:.3g}k " in ets_row  # e.g. 4.98k, not 4,981
    assert any(line.startswith("| W=4: ETS vs REBASE ") for line in lines)
    assert any(line.startswith("| W=4: REBASE vs best-of-N ") for line in lines) and "95% CI" in printed
    assert "1 seed (0)" in printed and "3 problems" in printed
    # One progress bar per run: the models load without transformers' bars or warnings.
    assert "Loading weights" not in captured.err and "%|" in captured.err
    bars = {part.split(":")[0] for part in captured.err.replace("\r", "\n").splitlines() if "%|" in part}
    # (the first ETS run on a machine distils its embedder once, with its own bar, before its run's bar starts)
    assert bars - {"Encoding tokens"} == set(methods)
    # --wide: every column of table.md and the comparisons in full (a rerun: nothing is searched)
    assert main([*argv, "--quiet", "--wide"]) == 0
    wide = capsys.readouterr().out
    from ets.app.report import COLUMNS

    full = next(line for line in wide.splitlines() if line.startswith("| method "))
    assert full == "| " + " | ".join(h for _, h, _ in COLUMNS) + " |" and len(full) > 100
    assert "W=4: ETS vs REBASE: KV size " in wide and "W=4: REBASE vs best-of-N: KV size " in wide
    assert wide.count("% CI ") == 2 and wide.count(", of 3; sign test p = ") == 2


def test_demo_rejects_bad_options_before_work(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quiet", "--methods", "beam,mcts", "--out", str(out)]) == 2
    assert "mcts" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # an argument error: argparse's exit, as one line
        main(["demo", "--quiet", "--width", "0", "--out", str(out)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("ets: error: argument --width: give a whole number >= 1")
    assert not out.exists()


def test_demo_defaults_show_the_seed_spread():
    from ets.app.cli import build_parser

    args = build_parser().parse_args(["demo"])
    assert (args.width, args.problems, args.seeds) == (8, 10, "0,1,2")


def test_demo_config_matches_the_formats_the_models_were_trained_on():
    import ets.demo as demo
    from ets.app.demo import demo_config

    config = demo_config()
    assert config.policy.prompt_template == demo.PROMPT_TEMPLATE
    assert config.policy.step_delimiter == demo.STEP_DELIMITER
    assert config.policy.model == str(demo.POLICY_PATH) and config.reward.model == str(demo.PRM_PATH)
    assert config.data.path == str(demo.TEST_PATH)
    # the pool is the engine's; on the hf backend, which keeps none, the demo leaves it unset
    # (a user who sets it there is told it does nothing: tests/test_context.py)
    assert config.policy.kv_budget_tokens and demo_config(backend="hf").policy.kv_budget_tokens is None
    assert demo_config(backend="hf").policy.inert_keys_notes() == []
    assert demo_config(backend="vllm").policy.inert_keys_notes() == []


def test_demo_with_seeds_says_so_and_shows_the_spread(tmp_path, capsys):
    out = tmp_path / "demo"
    argv = ["demo", "--quiet", "--width", "2", "--problems", "2", "--methods", "best_of_n,rebase", "--out", str(out)]
    assert main([*argv, "--seeds", "0,1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(printed) if line.startswith("| method"))
    from ets.app.demo import demo_jobs

    jobs = demo_jobs()   # the default: one run per core (at most 4), said above the table
    title = ["ets demo: 2 problems, width 2, 2 seeds (0, 1): mean ± sd over seeds"
             + (f"; {jobs} runs at a time" if jobs > 1 else "")]
    assert printed[header - len(title):header] == title
    if jobs > 1:  # the throughput timed on a shared machine: marked, and said under the table
        row = next(line for line in printed if line.startswith("| rebase "))
        assert row.rstrip(" |").endswith("†") and f"† timed with up to {jobs} runs at a time" in " ".join(printed)
    assert "KV/problem" in printed[header]
    for m in ("best_of_n", "rebase"):
        row = next(line for line in printed if line.startswith(f"| {m} ") and "| 2 " in line)
        assert "% ± " in row
        for s in (0, 1):
            assert (out / f"{m}_w2_s{s}.jsonl").read_text().count("\n") == 2
    notes = " ".join(printed)  # the notes under the tables, wrapped within 100 columns
    assert "mean ± sd over 2 seeds" in notes
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert [(r["method"], r["seeds"]) for r in rows] == [("best_of_n", "2"), ("rebase", "2")]
    assert len(list(csv.DictReader((out / "table_runs.csv").open()))) == 4
    # each problem's outcome averaged over the seeds, then paired
    assert any(line.startswith("| W=2: REBASE vs best-of-N |") for line in printed)
    assert "(a problem: its share right over the 2 seeds)" in notes
    # One seed runs under the old file names.
    assert main([*argv, "--seeds", "0"]) == 0
    assert "width 2, 1 seed (0)" in capsys.readouterr().out and (out / "rebase_w2.jsonl").exists()


def test_more_problems_than_the_demo_task_has_is_said(tmp_path, caplog, monkeypatch):
    import logging

    import ets.app.sweep
    from ets.app.demo import run_demo

    monkeypatch.setattr(ets.app.sweep, "run_sweep", lambda *args, **kwargs: [])  # (the runs themselves: minutes)
    with caplog.at_level(logging.WARNING):
        run_demo(problems=500, methods=["rebase"], out=tmp_path / "demo", show_progress=False)
    assert "the demo task has 200 test problems: --problems 500 searches all 200" in caplog.text
