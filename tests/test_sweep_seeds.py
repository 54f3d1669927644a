"""`ets sweep --seeds` / `ets demo --seeds`: one run per (method, width, seed), its own
resumable file, and one table row per pair with the mean and spread over the seeds."""

import csv
import json
import math
from pathlib import Path

import pytest

from ets.app.cli import main
from tests.helpers import TINY, one_line_error


def run_row(method, width, seed, **figures):
    return {"method": method, "width": width, "seed": seed, "aggregation": "last", "vote": "weighted",
            "vote_rule": "weighted (last)", "problems": 4, **figures}


def test_aggregate_seeds_gives_mean_sd_min_max_per_pair_in_order():
    from ets.app.sweep import aggregate_seeds

    runs = [run_row("ets", 4, s, accuracy=a, kv_size_per_problem=kv, kv_size_ref_per_problem=ref, peak_kv_tokens=None,
                    tokens_per_s=tp, strategy_metrics={"lp_solves": s})
            for s, a, kv, ref, tp in ((0, 0.5, 100, 80, 10.0), (1, 0.6, 110, 90, None), (2, 0.7, 120, 70, 14.0))]
    runs.insert(1, run_row("rebase", 4, 0, accuracy=0.25, kv_size_per_problem=200))
    runs.append(run_row("rebase", 4, 1, accuracy=0.75, kv_size_per_problem=300))
    ets, reb = aggregate_seeds(runs)
    assert (ets["method"], reb["method"]) == ("ets", "rebase") and ets["width"] == 4
    assert (ets["seeds"], ets["seed_list"], reb["seeds"], reb["seed_list"]) == (3, "0,1,2", 2, "0,1")
    assert "seed" not in ets
    assert ets["accuracy"] == pytest.approx(0.6) and ets["accuracy_sd"] == pytest.approx(0.1)  # sample sd (n - 1)
    assert (ets["accuracy_min"], ets["accuracy_max"]) == (0.5, 0.7)
    assert ets["kv_size_per_problem"] == 110 and ets["kv_size_per_problem_sd"] == pytest.approx(10.0)
    assert ets["kv_size_ref_per_problem"] == 80 and ets["kv_size_ref_per_problem_sd"] == pytest.approx(10.0)
    assert (ets["kv_size_ref_per_problem_min"], ets["kv_size_ref_per_problem_max"]) == (70, 90)
    # Unknown in one seed: the mean of the seeds that know it; unknown in all: None, no spread.
    assert ets["tokens_per_s"] == 12.0 and ets["tokens_per_s_sd"] == pytest.approx(math.sqrt(8))
    assert ets["peak_kv_tokens"] is None and "peak_kv_tokens_sd" not in ets
    # Counts the seeds agree on stay whole numbers, with no spread; names are kept; mappings per seed.
    assert ets["problems"] == 4 and isinstance(ets["problems"], int)
    assert not {"problems_sd", "problems_min", "problems_max"} & set(ets)
    assert ets["vote_rule"] == "weighted (last)"
    assert ets["strategy_metrics"] == [{"lp_solves": 0}, {"lp_solves": 1}, {"lp_solves": 2}]
    assert reb["accuracy"] == 0.5 and reb["accuracy_sd"] == pytest.approx(math.sqrt(0.125))


def test_a_count_one_rows_seeds_share_has_no_spread_where_anothers_differ():
    """`rounds` the same in every seed of one row, not of another's: the first has a spread
    of 0, so that table.csv has a value in every row's rounds_sd, _min and _max."""
    from ets.app.sweep import aggregate_seeds

    runs = [run_row("beam", 4, s, rounds=19) for s in (0, 1)] + [run_row("best_of_n", 4, s, rounds=r)
                                                                  for s, r in ((0, 19), (1, 20))]
    beam, bon = aggregate_seeds(runs)
    assert (beam["rounds"], beam["rounds_sd"], beam["rounds_min"], beam["rounds_max"]) == (19, 0.0, 19, 19)
    assert bon["rounds"] == 19.5 and (bon["rounds_min"], bon["rounds_max"]) == (19, 20)
    # a count every row's seeds share keeps none
    assert not {"problems_sd", "problems_min", "problems_max"} & (set(beam) | set(bon))


def test_one_seed_leaves_the_rows_as_they_are():
    from ets.app.report import markdown_table
    from ets.app.sweep import aggregate_seeds

    runs = [run_row("beam", 2, 0, accuracy=0.5, kv_size_per_problem=10.0),
            run_row("beam", 4, 0, accuracy=0.25, kv_size_per_problem=20.0)]
    assert aggregate_seeds(runs) == runs
    table = markdown_table(aggregate_seeds(runs))
    assert "±" not in table and "| beam | 2 | 50.0% |" in table and len(table.splitlines()) == 4


def test_the_table_shows_mean_and_sd_and_says_so():
    from ets.app.report import markdown_table
    from ets.app.sweep import aggregate_seeds, relative_to_rebase

    runs = [run_row(m, 4, s, accuracy=a, kv_size_sum=kv * 4, kv_size_per_problem=kv, kv_size_ref_per_problem=kv - 10,
                    problems_per_s=pp, tokens_per_s=pp * 100, wall_time=4 / pp)
            for s in (0, 1, 2)
            for m, a, kv, pp in (("rebase", (0.5, 0.6, 0.7)[s], 200 + s, 1.0), ("ets", (0.6, 0.6, 0.6)[s], 100 + s, 2.0))]
    rows = aggregate_seeds(runs)
    table = markdown_table(rows)
    assert [r["method"] for r in rows] == ["rebase", "ets"]
    assert "| rebase | 4 | 60.0% ± 10.0 | weighted (last) | 804 ± 4 | 201 ± 1 | 191 ± 1 |" in table
    assert "| ets | 4 | 60.0% ± 0.0 |" in table and "2.000 ± 0.000" in table
    assert "over 3 seeds (0, 1, 2)" in table.splitlines()[-1]
    assert markdown_table(rows, caption=False).splitlines()[-1].startswith("| ets |")
    assert relative_to_rebase(rows) == [
        "W=4 (means over 3 seeds): ETS vs REBASE: KV size 1.99x smaller (2.10x on the ETS code's metric), "
        "throughput 2.00x problems/s (2.00x tokens/s), accuracy +0.0 points"]


def test_file_names_carry_the_seed_unless_it_is_the_configs_own_alone():
    from ets.app.sweep import sweep_configs
    from ets.config import load_config

    base = load_config(TINY)  # seed 0
    assert base.search.seed == 0

    def names(seeds, config=base):
        return [(Path(c.output).name, c.search.seed, c.search.method, c.search.width)
                for c in sweep_configs(config, ["beam", "rebase"], [2], Path("o"), seeds)]

    old = [("beam_w2.jsonl", 0, "beam", 2), ("rebase_w2.jsonl", 0, "rebase", 2)]
    assert names(None) == old and names([0]) == old
    assert names([3]) == [("beam_w2_s3.jsonl", 3, "beam", 2), ("rebase_w2_s3.jsonl", 3, "rebase", 2)]
    assert names([0, 1]) == [("beam_w2_s0.jsonl", 0, "beam", 2), ("rebase_w2_s0.jsonl", 0, "rebase", 2),
                             ("beam_w2_s1.jsonl", 1, "beam", 2), ("rebase_w2_s1.jsonl", 1, "rebase", 2)]
    seven = load_config(TINY, ["seed=7"])
    assert names(None, seven)[0] == ("beam_w2.jsonl", 7, "beam", 2) and names([7], seven)[0][0] == "beam_w2.jsonl"
    assert names([0], seven)[0] == ("beam_w2_s0.jsonl", 0, "beam", 2)


@pytest.mark.parametrize("value, words", [
    ("0,x", "--seeds '0,x': give whole numbers >= 0"),
    (",", "--seeds ',': give whole numbers >= 0"),
    ("0,-1", "seed -1 is out of range"),
    (str(2**63), "out of range"),
    ("1,2,1", "--seeds names 1 twice"),
])
@pytest.mark.parametrize("command", ["sweep", "demo"])
def test_bad_seeds_fail_in_one_line_before_any_work(tmp_path, capsys, command, value, words):
    out = tmp_path / "sw"
    base = ["sweep", "--config", str(TINY), "--methods", "beam", "--widths", "2"] if command == "sweep" else ["demo"]
    msg = one_line_error(capsys, main([*base, "--quiet", "--out", str(out), "--seeds", value]))
    assert words in msg
    assert not out.exists()


def texts(path):
    """Each problem's trajectories' step texts: what the sampler drew."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return {r["id"]: [t["steps"] for t in r["trajectories"]] for r in records}


def test_sweep_with_two_seeds_end_to_end(tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", "--quiet", "--config", str(TINY), "--methods", "beam,rebase", "--widths", "2", "data.limit=2"]
    assert main([*argv, "--seeds", "0,1", "--out", str(out), "--wide"]) == 0   # --wide: table.md's table
    printed = capsys.readouterr().out
    for m in ("beam", "rebase"):
        for s in (0, 1):
            assert (out / f"{m}_w2_s{s}.jsonl").read_text().count("\n") == 2
            assert json.loads((out / f"{m}_w2_s{s}.config.json").read_text())  # its own provenance
        assert not (out / f"{m}_w2.jsonl").exists()
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert [(r["method"], r["width"], r["seeds"], r["seed_list"]) for r in rows] == [
        ("beam", "2", "2", "0,1"), ("rebase", "2", "2", "0,1")]
    for r in rows:
        assert {"accuracy_sd", "kv_size_ref_per_problem_min", "tokens_per_s_max", "wall_time_sd"} <= set(r)
    runs = list(csv.DictReader((out / "table_runs.csv").open()))
    assert [(r["method"], r["seed"]) for r in runs] == [("beam", "0"), ("rebase", "0"), ("beam", "1"), ("rebase", "1")]
    table = (out / "table.md").read_text()
    assert table == printed[printed.index("| method"):printed.index("table.md,")].strip() + "\n"
    for m in ("beam", "rebase"):
        line = next(l for l in table.splitlines() if l.startswith(f"| {m} | 2 |"))
        assert "% ± " in line
    assert (out / "methods.png").stat().st_size > 10_000

    # Another seed draws other samples, somewhere; the same seed the same ones (here from
    # a one-seed sweep of the config's own seed: the old file names).
    assert any(texts(out / f"{m}_w2_s0.jsonl") != texts(out / f"{m}_w2_s1.jsonl") for m in ("beam", "rebase"))
    again = tmp_path / "again"
    assert main([*argv, "--seeds", "0", "--out", str(again)]) == 0
    for m in ("beam", "rebase"):
        assert texts(again / f"{m}_w2.jsonl") == texts(out / f"{m}_w2_s0.jsonl")
    assert not (again / "table_runs.csv").exists() and "±" not in (again / "table.md").read_text()

    # Interrupted in seed 1: the rerun searches only its missing problem, nothing else.
    pair = out / "rebase_w2_s1.jsonl"
    kept = pair.read_text().splitlines()[0]
    pair.write_text(kept + "\n")
    untouched = {p.name: p.read_text() for p in out.glob("*.jsonl") if p != pair}
    assert main([*argv, "--seeds", "0,1", "--out", str(out)]) == 0
    assert pair.read_text().startswith(kept) and pair.read_text().count("\n") == 2
    assert {p.name: p.read_text() for p in out.glob("*.jsonl") if p != pair} == untouched
    assert len(list(csv.DictReader((out / "table.csv").open()))) == 2


def test_plot_titles_name_task_problems_seeds_and_models():
    from ets.app.demo import demo_config
    from ets.app.report import figure_title, plot_title
    from ets.config import load_config

    config = load_config(TINY)
    rows = [{"problems": 200, "seeds": 3, "seed_list": "0,1,2"}]
    title = plot_title(config, rows, "ets sweep")
    assert title.splitlines() == ["ets sweep: tiny, 200 problems, 3 seeds (0, 1, 2)",
                                  "policy tiny:llama, PRM step_tag (tiny:llama)"]
    # each figure says what its own error bars are
    assert figure_title(title, rows, ("width", "problems_per_s")).splitlines()[2:] == ["error bars: ± 1 sd over seeds"]
    assert plot_title(config, [{"problems": 1, "seed": 0, "width": 4}]).startswith(
        "ets sweep: tiny, 1 problem, W=4, 1 seed (0)\n")
    # the bundled models and task by name, not by their checkpoint paths
    demo = plot_title(demo_config(), [{"problems": 5, "seed": 0, "width": 8}], "ets demo, W=8")
    assert demo.splitlines() == ["ets demo, W=8: demo task, 5 problems, 1 seed (0)",
                                 "policy demo policy, PRM step_tag (demo PRM)"]


def test_model_and_task_labels_are_short_names(tmp_path):
    from ets.app.report import model_label, task_label

    run = tmp_path / "runs" / "prm-v2"
    (run / "checkpoint-500").mkdir(parents=True)
    assert model_label(str(run)) == "prm-v2" and model_label(str(run / "checkpoint-500")) == "prm-v2/checkpoint-500"
    assert model_label("Qwen/Qwen2.5-Math-1.5B-Instruct") == "Qwen/Qwen2.5-Math-1.5B-Instruct"
    assert (model_label("tiny:llama"), model_label(None)) == ("tiny:llama", "none")
    assert task_label(str(tmp_path / "math500.jsonl")) == "math500"
    assert task_label(str(tmp_path / "gsm8k" / "test.jsonl")) == "gsm8k/test"
    assert task_label(hf_name="HuggingFaceH4/MATH-500", hf_split="test") == "HuggingFaceH4/MATH-500 (test)"