"""Two methods' accuracies compared problem by problem (ets/app/paired.py), and where the
sweep reports it."""

import json
import math
from pathlib import Path

import pytest

from ets.app.paired import correct_by_problem, paired_difference

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"


def outcomes(rights: str, prefix: str = "p") -> dict[str, bool]:
    """'10T' -> {p0: True, p1: False, p2: True}."""
    return {f"{prefix}{i}": c in "1T" for i, c in enumerate(rights)}


def test_the_difference_counts_problems_each_method_got_and_the_other_did_not():
    a, b = outcomes("1100"), outcomes("1001")
    d = paired_difference(a, b)
    assert d.points == 0.0 and (d.a_better, d.b_better, d.problems) == (1, 1, 4)
    assert d.low < 0 < d.high and d.confidence == 0.95
    assert paired_difference(a, b) == d  # seeded: the same records give the same interval


def test_pairing_sees_a_difference_that_two_separate_accuracies_cannot():
    """200 problems, half of them right for both; A is also right on 12 problems B misses.
    Apart, each accuracy's 95% interval is about +-7 points, wider than the 6-point gap;
    paired, only the 12 problems differ, and the interval stays above zero."""
    both = "1" * 100 + "0" * 100
    a = outcomes(both[:100] + "1" * 12 + "0" * 88)
    b = outcomes(both)
    d = paired_difference(a, b)
    assert d.points == pytest.approx(6.0) and (d.a_better, d.b_better) == (12, 0)
    separate = 100 * 1.96 * math.sqrt(0.5 * 0.5 / 200)
    assert separate > d.points  # two intervals of one accuracy each would overlap
    assert 2.5 < d.low < d.points < d.high < 10.0


def test_only_problems_both_searched_are_compared():
    a = outcomes("1111")
    b = {"p0": False, "p1": True, "other": True}
    d = paired_difference(a, b)
    assert d.problems == 2 and d.points == 50.0
    assert paired_difference(a, {"other": True}) is None


def test_several_seeds_make_a_share_per_problem():
    # p0: right in one seed of two for A, always for B; p1: never for A, once of two for B
    a = [{"p0": True, "p1": False}, {"p0": False, "p1": False}]
    b = [{"p0": True, "p1": True}, {"p0": True, "p1": False}]
    d = paired_difference(a, b)
    assert d.points == pytest.approx(100 * (0.5 - 1 + 0 - 0.5) / 2) and (d.a_better, d.b_better) == (0, 2)
    # every problem differs alike, but each method's seeds differ: drawn again, they widen it
    # (each problem's share alone left nothing to resample, an interval of the point itself)
    assert d.low < d.points < d.high and d.high - d.low >= 50


def test_the_text_gives_points_interval_and_counts():
    d = paired_difference(outcomes("110"), outcomes("011"))
    assert d.text().startswith("+0.0 points (95% CI ")
    assert d.text().endswith("; better on 1 problem, worse on 1, of 3; sign test p = 1)")


def test_the_sign_test_counts_the_problems_that_differ():
    from ets.app.paired import p_text

    # seed 0 of a 200-problem demo run at W=64: REBASE right on 12 problems best-of-N
    # missed and wrong on 26 it got; 162 alike
    a = outcomes("1" * 12 + "0" * 26 + "1" * 100 + "0" * 62)
    b = outcomes("0" * 12 + "1" * 26 + "1" * 100 + "0" * 62)
    d = paired_difference(a, b)
    assert (d.a_better, d.b_better) == (12, 26) and d.p_value == pytest.approx(0.0336, abs=1e-4)
    assert d.text().endswith("of 200; sign test p = 0.034)")
    assert paired_difference(b, a).p_value == d.p_value                  # two-sided
    # over seeds, a problem is one trial (its seeds are not independent draws): three seeds
    # that all favour A on 5 problems are as sure as one seed that does
    three = paired_difference([outcomes("11111")] * 3, [outcomes("00000")] * 3)
    assert three.p_value == paired_difference(outcomes("11111"), outcomes("00000")).p_value == 0.0625
    assert [p_text(p) for p in (1.0, 0.19, 0.0342, 0.0012, 6.1e-8)] == ["1", "0.19", "0.034", "0.0012", "6e-8"]


def test_the_sweep_line_is_paired_when_rows_know_their_problems():
    from ets.app.sweep import relative_to_rebase

    rows = [dict(method=m, width=4, kv_size_per_problem=kv, tokens_per_s=1.0, problems_per_s=1.0, accuracy=acc,
                 correct_by_problem=outcomes(rights))
            for m, kv, acc, rights in (("best_of_n", 300, 0.5, "1100"), ("rebase", 100, 0.75, "1110"),
                                       ("ets", 50, 0.5, "0110"))]
    ets_line, rebase_line = relative_to_rebase(rows)
    assert ets_line.startswith("W=4: ETS vs REBASE: KV size 2.00x smaller")
    assert ets_line.endswith("accuracy -25.0 points (95% CI -75.0 to +0.0; better on 0 problems, worse on 1, of 4; "
                             "sign test p = 1)")
    assert rebase_line.startswith("W=4: REBASE vs best-of-N: KV size 3.00x smaller, throughput 1.00x problems/s")
    assert ", accuracy +25.0 points (95% CI " in rebase_line


def test_a_run_summary_keeps_every_problems_outcome_and_a_sweep_prints_the_paired_lines(tmp_path, capsys):
    from ets.app.cli import main
    from ets.app.output import summary_path

    out = tmp_path / "sw"
    argv = ["sweep", "--quiet", "--config", str(TINY), "--methods", "best_of_n,rebase", "--widths", "2",
            "--out", str(out), "data.limit=3"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for method in ("best_of_n", "rebase"):
        output = out / f"{method}_w2.jsonl"
        records = [json.loads(line) for line in output.read_text().splitlines()]
        summary = json.loads(summary_path(output).read_text())
        assert summary["correct_by_problem"] == correct_by_problem(records) and len(records) == 3
    # the comparisons' table, paired: with the interval and the sign test
    assert "| W=2: REBASE vs best-of-N |" in printed and "95% CI" in printed and "sign test p" in printed
    # A summary written before it held the outcomes: a rerun (nothing new) reads them from the records.
    stored = summary_path(out / "rebase_w2.jsonl")
    old = json.loads(stored.read_text())
    del old["correct_by_problem"]
    stored.write_text(json.dumps(old))
    assert main([*argv, "--wide"]) == 0
    assert "W=2: REBASE vs best-of-N: KV size " in (printed := capsys.readouterr().out)
    assert "of 3; sign test p = " in printed


def write_run(path, rights: str, kv: int, prefix: str = "p", kv_ref: int | None = None):
    """A results file as `ets run` writes it, reduced to what `ets compare` reads (and
    the ETS code's KV metric, `kv_ref`, where given)."""
    ref = {} if kv_ref is None else {"kv_size_ref": kv_ref}
    lines = [json.dumps({"id": f"{prefix}{i}", "question": "q", "ground_truth": "1", "trajectories": [],
                         "correct": c == "1", "kv_size": kv, **ref}) for i, c in enumerate(rights)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_ets_compare_prints_each_run_against_the_base(tmp_path, capsys):
    from ets.app.cli import main

    base = write_run(tmp_path / "rebase.jsonl", "1100", 200)
    ets = write_run(tmp_path / "ets.jsonl", "1000", 100)
    bon = write_run(tmp_path / "bon.jsonl", "11", 300)   # only the first two problems
    assert main(["compare", "--wide", base, ets, bon]) == 0
    ets_line, bon_line = capsys.readouterr().out.splitlines()
    assert ets_line == (f"{ets} vs {base}: accuracy 25.0% vs 50.0%, -25.0 points (95% CI -75.0 to +0.0; better on 0 "
                        "problems, worse on 1, of 4; sign test p = 1); KV size/problem 100 vs 200: 2.00x smaller")
    # on the problems both searched: the base's accuracy there is 100%
    assert bon_line.startswith(f"{bon} vs {base}: accuracy 100.0% vs 100.0%, +0.0 points (95% CI +0.0 to +0.0;")
    assert bon_line.endswith("of 2; sign test p = 1); KV size/problem 300 vs 200: 1.50x larger")
    # by default: by file name, three short lines each
    assert main(["compare", base, ets, bon]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "ets vs rebase, on the 4 problems both searched:",
        "  accuracy 25.0% vs 50.0%: -25.0 points (95% CI -75.0 to +0.0), sign test p = 1",
        "  KV/problem 100 vs 200: 2.00x smaller",
        "bon vs rebase, on the 2 problems both searched:",
        "  accuracy 100.0% vs 100.0%: +0.0 points (95% CI +0.0 to +0.0), sign test p = 1",
        "  KV/problem 300 vs 200: 1.50x larger"]


def test_ets_compare_pools_a_sweeps_seed_files_given_the_run_without_its_seed(tmp_path, capsys):
    from ets.app.cli import main

    # seeds 0, 1 and 10 (numeric order, not text order); a stray file the pattern must not take
    for seed, rights, kv in ((10, "1100", 100), (0, "1000", 300), (1, "1110", 200)):
        write_run(tmp_path / f"rebase_w4_s{seed}.jsonl", rights, kv)
    write_run(tmp_path / "rebase_w4_s1.jsonl.bak", "0000", 999)
    write_run(tmp_path / "ets_w4_s0.jsonl", "0000", 50)
    write_run(tmp_path / "ets_w4_s1.jsonl", "1000", 150)
    base, ets = str(tmp_path / "rebase_w4"), str(tmp_path / "ets_w4")
    assert main(["compare", "--wide", base, ets]) == 0
    line = capsys.readouterr().out.splitlines()[0]   # (then a note: the seeds differ)
    # per problem, REBASE's shares 1, 2/3, 1/3, 0 (mean 50%), ETS's 1/2, 0, 0, 0 (12.5%)
    assert line.startswith(f"{ets} (seeds 0,1) vs {base} (seeds 0,1,10): accuracy 12.5% vs 50.0%, -37.5 points")
    assert "better on 0 problems, worse on 3, of 4; sign test p = 0.25)" in line
    assert line.endswith("KV size/problem 100 vs 200: 2.00x smaller")
    # one seed file against another run's pool; a name that is neither a file nor a run: exit 2
    assert main(["compare", "--wide", str(tmp_path / "ets_w4_s0.jsonl"), base]) == 0
    assert capsys.readouterr().out.startswith(f"{base} (seeds 0,1,10) vs {tmp_path / 'ets_w4_s0.jsonl'}: accuracy 50.0% vs 0.0%")
    # a seed that has searched fewer problems (still running) is named with its count
    write_run(tmp_path / "ets_w4_s2.jsonl", "1", 50)
    assert main(["compare", "--wide", base, ets]) == 0
    assert capsys.readouterr().out.startswith(f"{ets} (seeds 0,1,2: 4/4/1 problems) vs {base} (seeds 0,1,10): ")
    assert main(["compare", base, ets]) == 0   # by default by file name, with the seeds
    out = capsys.readouterr().out
    assert out.startswith("ets_w4 (seeds 0,1,2: 4/4/1 problems) vs rebase_w4 (seeds 0,1,10), on ")
    # seeds that differ are said: the pairing is of each problem's share over its own run's seeds
    assert out.splitlines()[-1].startswith("note: ets_w4 (seeds 0,1,2: 4/4/1 problems) and rebase_w4 (seeds 0,1,10) "
                                           "ran with different seeds")
    assert main(["compare", base, str(tmp_path / "dvts_w4")]) == 2
    err = capsys.readouterr().err
    assert "neither a results file nor a sweep's run" in err and len(err.strip().splitlines()) == 1


def test_ets_compare_gives_the_kv_ratio_on_the_ets_codes_metric_too(tmp_path, capsys):
    from ets.app.cli import main

    base = write_run(tmp_path / "rebase.jsonl", "1100", 200, kv_ref=180)
    ets = write_run(tmp_path / "ets.jsonl", "1000", 100, kv_ref=60)
    older = write_run(tmp_path / "older.jsonl", "1000", 100)   # records without the metric
    assert main(["compare", base, ets, older]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "  KV/problem 100 vs 200: 2.00x smaller (3.00x on the ETS code's metric)"
    assert out[5] == "  KV/problem 100 vs 200: 2.00x smaller"
    assert main(["compare", "--wide", base, ets]) == 0
    assert capsys.readouterr().out.strip().endswith("KV size/problem 100 vs 200: 2.00x smaller (3.00x on the ETS "
                                                    "code's metric)")


def test_a_sweeps_run_of_one_seed_is_named_as_runs_of_several_are(tmp_path, capsys):
    """A one-seed sweep writes runs/s/rebase_w4.jsonl: `runs/s/rebase_w4` names it for
    eval, compare and diagnose, as it names a run's seed files."""
    from ets.app.cli import main

    base, other = write_run(tmp_path / "rebase_w4.jsonl", "1100", 200), write_run(tmp_path / "ets_w4.jsonl", "1000", 100)
    for argv in (["compare", base.removesuffix(".jsonl"), other.removesuffix(".jsonl")],
                 ["diagnose", other.removesuffix(".jsonl")]):
        assert main(argv) == 0
    assert "ets_w4 vs rebase_w4, on the 4 problems both searched" in capsys.readouterr().out
    assert main(["eval", other.removesuffix(".jsonl")]) == 0   # (its records hold no trajectory to grade)
    assert capsys.readouterr().out.startswith("accuracy 0.0% (0/4)")


def test_ets_compare_refuses_runs_it_cannot_pair_in_one_line(tmp_path, capsys):
    from ets.app.cli import main

    base = write_run(tmp_path / "a.jsonl", "10", 10)
    other = write_run(tmp_path / "b.jsonl", "10", 10, prefix="q")
    answers = tmp_path / "answers.json"
    answers.write_text("[]")
    # the same ids over another dataset: its questions differ
    renumbered = tmp_path / "c.jsonl"
    renumbered.write_text(Path(base).read_text().replace('"question": "q"', '"question": "another q"'))
    for argv, words in (([base, other], "share no problem"), ([base, str(answers)], "ets eval"),
                        ([base, str(renumbered)], "hold different problems under id 'p0' (their question differs)"),
                        ([base, str(tmp_path / "none.jsonl")], "does not exist")):
        assert main(["compare", *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1


def test_one_runs_accuracy_interval_is_over_its_problems():
    from ets.app.paired import accuracy_interval

    low, high = accuracy_interval(outcomes("10" * 100))    # 200 problems, half right
    assert 0.42 < low < 0.5 < high < 0.58                   # about +-1.96 * sqrt(0.25 / 200)
    # a few problems all right or all wrong: Wilson's interval, wide, never of zero width
    assert accuracy_interval(outcomes("111"))[0] < 0.5 and accuracy_interval(outcomes("111"))[1] == 1.0
    low, high = accuracy_interval(outcomes("0000"))
    assert low == 0.0 and 0.45 < high < 0.5
    # over seeds, the problems and each problem's seeds are drawn: seeds of 2 and 5 of 6
    # right span both (each problem's share alone, 0.5 or so, gave 0.5 to 0.75)
    low, high = accuracy_interval([outcomes("110000"), outcomes("011111")])
    assert low <= 2 / 6 and high >= 5 / 6
    # every problem right in two of three seeds: the seeds' spread alone makes it wide
    low, high = accuracy_interval([outcomes("10" * 50), outcomes("01" * 50), outcomes("11" * 50)])
    assert low < 0.62 and high > 0.71


def test_plots_show_the_accuracys_interval_over_problems(tmp_path):
    from ets.app.report import error_bars, error_bars_text, plot_methods, plot_title
    from ets.config import load_config

    rows = [dict(method=m, width=64, seed=0, problems=200, accuracy=rights.count("1") / 200, kv_size_per_problem=kv,
                 correct_by_problem=outcomes(rights))
            for m, rights, kv in (("rebase", "10" * 100, 100), ("ets", "1000" * 50, 60))]
    below, above = error_bars(rows, "accuracy", 100.0)
    assert all(2 < b < 10 for b in below + above)            # points, each side of the accuracy
    assert below[1] < below[0]                               # 25% right varies less than 50%
    assert error_bars(rows, "kv_size_per_problem") is None   # one seed: no spread to show there
    title = plot_title(load_config(TINY), rows)
    assert error_bars_text(rows, ("width", "accuracy")) == "error bars: accuracy's 95% interval over the problems (Wilson)"
    assert error_bars_text(rows, ("width", "kv_size_per_problem")) == ""   # that figure has none
    assert [p.name for p in plot_methods(rows, tmp_path / "m.png", title)] == ["m.png", "m.pdf"]
    assert (tmp_path / "m.png").stat().st_size > 10_000 and (tmp_path / "m.pdf").read_bytes()[:4] == b"%PDF"
    # several seeds that know their problems: still the interval over the problems (each
    # problem its share right over the seeds); the other figures' bars are their sd over seeds
    seeded = [dict(r, seeds=3, seed_list="0,1,2", accuracy_sd=0.05, kv_size_per_problem_sd=4.0) for r in rows]
    assert error_bars(seeded, "accuracy", 100.0) == [below, above]
    assert error_bars(seeded, "kv_size_per_problem") == [[4.0, 4.0], [4.0, 4.0]]
    assert error_bars_text(seeded, ("kv_size_per_problem", "accuracy")).endswith(
        "over the problems and seeds; others ± 1 sd over seeds")
    assert "others" not in error_bars_text(seeded, ("width", "accuracy"))
    assert error_bars_text(seeded, ("width", "kv_size_per_problem")) == "error bars: ± 1 sd over seeds"
    # means over seeds read back from a table (no outcomes): one sd over seeds
    plain = [{k: v for k, v in r.items() if k != "correct_by_problem"} for r in seeded]
    assert error_bars(plain, "accuracy", 100.0) == [[5.0, 5.0], [5.0, 5.0]]
    assert error_bars_text(plain) == "error bars: ± 1 sd over seeds"


def test_the_png_carries_the_title_and_the_pdf_leaves_it_to_the_caption(tmp_path):
    from ets.app.report import pyplot, save_figure

    fig, ax = pyplot().subplots()
    ax.plot([1, 2], [3, 4])
    fig.tight_layout()
    saved = []
    savefig = fig.savefig
    fig.savefig = lambda path, **kw: saved.append((Path(path).suffix, fig.get_suptitle())) or savefig(path, **kw)
    assert [p.name for p in save_figure(fig, tmp_path / "f.png", "the run\nerror bars: none")] == ["f.png", "f.pdf"]
    assert sorted(saved) == [(".pdf", ""), (".png", "the run\nerror bars: none")]

def test_equal_sizes_read_as_the_same():
    from ets.app.paired import size_change

    assert size_change(1000, 1001) == "1.00x (the same)"
    assert size_change(1000, 500) == "2.00x smaller" and size_change(500, 1000) == "2.00x larger"


@pytest.mark.parametrize("command", ["eval", "compare", "diagnose"])
def test_a_name_that_is_neither_a_file_nor_a_sweeps_run_is_refused_saying_what_was_looked_for(tmp_path, capsys,
                                                                                                command):
    from ets.app.cli import main

    base = write_run(tmp_path / "rebase_w4.jsonl", "1100", 200)
    missing = str(tmp_path / "rebase_w8")
    argv = [command, missing] if command != "compare" else [command, base, missing]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ets: error: {missing!r} is neither a results file nor a sweep's run with seed files "
                   f"{missing}_s<seed>.jsonl; pass the output of `ets run` or `ets sweep --seeds`"]
