"""ets/app/terminal.py: what the commands print fits 100 columns, numbers in compact form."""

import pytest

from ets.app.terminal import WIDTH, comparison_table, compact, narrow_table, plural, wrap


def test_compact_numbers_keep_three_significant_digits():
    assert [compact(v) for v in (98_656, 152_528, 2_274_427, 999_600, 885.2, 0.05627, 0.424, 12.0, 0, None)] == [
        "98.7k", "153k", "2.27M", "1.00M", "885", "0.0563", "0.424", "12.0", "0", "n/a"]
    assert compact(99.96) == "100" and compact(-41_805) == "-41.8k" and compact(1_942, 2) == "1.9k"


def test_plurals():
    assert (plural(1, "problem"), plural(0, "problem"), plural(2, "seed")) == ("1 problem", "0 problems", "2 seeds")
    assert plural(3, "child", "children") == "3 children"


def test_wrap_keeps_within_the_width_and_a_long_path_whole():
    text = "KV pool full: " + "word " * 40 + "/a/" + "x" * 120
    lines = wrap(text)
    assert all(len(line) <= WIDTH for line in lines[:-1]) and lines[-1] == "  /a/" + "x" * 120
    assert " ".join(line.strip() for line in lines) == text.strip()


def row(method, width=64, **figures):
    base = dict(method=method, width=width, accuracy=0.5, kv_size_per_problem=98_656.0, problems_per_s=0.0563,
                peak_kv_tokens=162_684, tokens_per_s=1_253.3)
    return {**base, **figures}


def test_the_narrow_table_drops_its_optional_columns_only_where_it_would_not_fit():
    rows = [row("best_of_n", seeds=3, accuracy_sd=0.087, kv_size_per_problem_sd=259.0, problems_per_s_sd=0.0071,
                peak_kv_tokens_sd=6_512.0, tokens_per_s_sd=120.0), row("ets", seeds=3)]
    lines = narrow_table(rows)
    assert all(len(line) <= WIDTH for line in lines)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["method", "W", "accuracy", "KV/problem", "problems/s", "peak KV", "tokens/s"]
    assert "| 50.0% ± 8.7 | 98.7k ± 259 | 0.0563 ± 0.0071 | 163k ± 6.5k | 1.25k ± 120 |" in lines[2]
    assert "mean ± sd over 3 seeds" in " ".join(lines)
    # a plug-in's long name: peak KV and tokens/s go, the key columns stay
    long = narrow_table([row("my_very_long_plugin_strategy_name_for_trees", seeds=3, accuracy_sd=0.1,
                             kv_size_per_problem_sd=1.0, problems_per_s_sd=0.01, peak_kv_tokens_sd=1.0,
                             tokens_per_s_sd=1.0)])
    assert all(len(line) <= WIDTH for line in long) and "peak KV" not in long[0] and "problems/s" in long[0]


def test_the_comparisons_pair_where_the_rows_know_their_problems():
    outcomes = {"best_of_n": "1100", "rebase": "1110", "ets": "0110"}
    rows = [row(m, accuracy=r.count("1") / 4, kv_size_per_problem=kv, problems_per_s=1.0,
                correct_by_problem={f"p{i}": c == "1" for i, c in enumerate(r)})
            for (m, r), kv in zip(outcomes.items(), (300, 100, 50))]
    lines = comparison_table(rows)
    assert lines[0].split("|")[2].strip() == "accuracy (95% CI)" and "sign test p" in lines[0]
    assert lines[2].startswith("| W=64: ETS vs REBASE ") and "-25.0 (-75.0 to +0.0)" in lines[2]
    assert "2.00x smaller" in lines[2] and "3.00x smaller" in lines[3] and lines[2].rstrip().endswith("1 |")
    # rows read back from a table: the difference of the accuracies, no interval
    plain = comparison_table([{k: v for k, v in r.items() if k != "correct_by_problem"} for r in rows])
    assert "95% CI" not in plain[0] and "sign test" not in plain[0] and "-25.0" in plain[2]
    assert comparison_table([row("beam")]) == []


@pytest.mark.parametrize("wide", [False, True])
def test_sweep_lines_narrow_or_wide(wide):
    from ets.app.report import COLUMNS
    from ets.app.terminal import sweep_lines

    lines = sweep_lines([row("rebase"), row("ets")], wide)
    assert (lines[0] == "| " + " | ".join(h for _, h, _ in COLUMNS) + " |") == wide
    assert all(len(line) <= WIDTH for line in lines) != wide
