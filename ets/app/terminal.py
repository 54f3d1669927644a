"""What the commands print in a terminal: within WIDTH columns, numbers in compact form.

A sweep's full table (every column, exact numbers) is for files (table.md, table.csv) and
for `--wide`; in a terminal it wraps into an unreadable block. The narrow views here keep
what a researcher reads first: the method and width, the accuracy and its spread, the KV
size (the paper's metric) and the throughput, and the paper's two comparisons as a small
table; numbers in three significant digits (98.7k).
"""

from __future__ import annotations

import textwrap
from typing import Any, Sequence

from ets.config.checks import plural  # noqa: F401  (the commands' messages count with it)

WIDTH = 100  # columns every line of a command's default output fits in


def compact(value: float | None, digits: int = 3) -> str:
    """`digits` significant digits, thousands as k and millions as M: 98,656 -> 98.7k,
    152,528 -> 153k, 2,274,427 -> 2.27M, 0.05627 -> 0.0563, 885 -> 885; None -> n/a."""
    if value is None:
        return "n/a"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit * (1 - 0.5 * 10 ** -digits):  # 999,600 reads 1.00M, not 1000k
            return _sig(value / limit, digits) + suffix
    return _sig(value, digits)


def _sig(value: float, digits: int) -> str:
    """Significant digits without an exponent: 98.66 -> 98.7, 0.05627 -> 0.0563, 885.2 -> 885."""
    if value == 0:
        return "0"
    places = max(0, digits - 1 - _magnitude(value))
    text = f"{value:.{places}f}"
    if _magnitude(float(text)) > _magnitude(value):  # 99.96 rounds up to 100.0: one place fewer
        text = f"{value:.{max(0, places - 1)}f}"
    return text


def _magnitude(value: float) -> int:
    import math

    return math.floor(math.log10(abs(value))) if value else 0


def wrap(text: str, indent: str = "  ") -> list[str]:
    """`text` as lines of at most WIDTH columns, the later ones indented; a word longer
    than that (a long path) keeps its own line whole."""
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False) or [""]


def fitted(header: Sequence[str], rows: Sequence[Sequence[str]], left: int, kept: int) -> list[str]:
    """`aligned`, less its last columns (but never the first `kept`) while it is wider
    than WIDTH: the columns are in the order a reader needs them."""
    for n in range(len(header), kept - 1, -1):
        table = aligned(header[:n], [r[:n] for r in rows], left)
        if max(map(len, table)) <= WIDTH or n == kept:
            return table
    raise ValueError("kept must be at least 1")


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """A Markdown table padded into columns: the first `left` columns to the left, the
    others (numbers) to the right."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i < left else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    rule = "|" + "|".join(("-" * (w + 2)) if i < left else ("-" * (w + 1) + ":") for i, w in enumerate(widths)) + "|"
    return [line(header), rule, *(line(r) for r in rows)]


# The narrow table: (key, header, format), the last ones left out where the table would not fit.
NARROW_COLUMNS = (
    ("method", "method", "text"),
    ("width", "W", "text"),
    ("accuracy", "accuracy", "percent"),
    ("kv_size_per_problem", "KV/problem", "count"),
    ("problems_per_s", "problems/s", "count"),
    ("peak_kv_tokens", "peak KV", "count"),
    ("tokens_per_s", "tokens/s", "count"),
)
_KEPT = 5  # columns always shown: method to problems/s (peak KV and tokens/s where they fit)


def narrow_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A sweep's rows (ets/app/sweep.py `aggregate_seeds`) as an aligned table of the key
    columns, `mean ± sd` over seeds, and a note of what the columns are."""
    table = fitted([h for _, h, _ in NARROW_COLUMNS],
                   [[_cell(r, k, kind) for k, _, kind in NARROW_COLUMNS] for r in rows], 2, _KEPT)
    seeds = max((r.get("seeds", 1) for r in rows), default=1)
    note = "KV/problem: the paper's KV-size metric (prompt counted)"
    if "peak KV" in table[0]:
        note += "; peak KV: the engine's measured live tokens"
    if seeds > 1:
        note += f"; mean ± sd over {plural(seeds, 'seed')}, accuracy's ± in points"
    from ets.app.report import mark_notes

    extra = "".join(f" {n}" for n in mark_notes(rows))
    return table + wrap(note + ". Every column: --wide, table.md, table.csv." + extra, indent="")


def _cell(row: dict[str, Any], key: str, kind: str) -> str:
    from ets.app.report import marks

    value = row.get(key)
    if kind == "text":
        return "n/a" if value is None else str(value)
    if value is None:
        return "n/a"
    sd = row.get(f"{key}_sd") if row.get("seeds", 1) > 1 else None
    if kind == "percent":
        return f"{100 * value:.1f}%" + ("" if sd is None else f" ± {100 * sd:.1f}")
    return compact(value) + ("" if sd is None else f" ± {compact(sd, 2)}") + marks(row, key)  # (a spread: 2 digits)


# The paper's comparisons, per width: (the method, against which, as the line names them).
COMPARISONS = (("ets", "rebase", "ETS vs REBASE"), ("rebase", "best_of_n", "REBASE vs best-of-N"))


def comparison_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per width, ETS against REBASE and REBASE against best-of-N (the paper's two
    comparisons), where the rows have both: the accuracy difference (paired over the
    problems, with its 95% interval and sign test, where the rows know each problem's
    outcome: ets/app/paired.py), the KV size and the throughput as ratios. No lines when
    no width has a pair."""
    from ets.app.paired import p_text, paired_difference, size_change
    from ets.app.report import SHARED_MARK, most_sharing

    by = {(r["method"], r["width"]): r for r in rows}
    body, seeds = [], 1
    for width in sorted({r["width"] for r in rows}):
        for method, base, name in COMPARISONS:
            a, b = by.get((method, width)), by.get((base, width))
            if not (a and b):
                continue
            seeds = max(seeds, min(a.get("seeds", 1), b.get("seeds", 1)))
            d = None
            if a.get("correct_by_problem") and b.get("correct_by_problem"):
                d = paired_difference(a["correct_by_problem"], b["correct_by_problem"])
            accuracy = (f"{100 * (a['accuracy'] - b['accuracy']):+.1f}", None) if d is None else \
                (f"{d.points:+.1f} ({d.low:+.1f} to {d.high:+.1f})", p_text(d.p_value))
            speed = a.get("problems_per_s"), b.get("problems_per_s")
            body.append([f"W={width}: {name}", accuracy[0],
                         size_change(b.get("kv_size_per_problem"), a.get("kv_size_per_problem")),
                         f"{speed[0] / speed[1]:.2f}x" + (SHARED_MARK if most_sharing((a, b)) > 1 else "")
                         if None not in speed and speed[1] else "n/a", accuracy[1]])
    if not body:
        return []
    paired = any(line[-1] is not None for line in body)
    header = ["comparison", "accuracy (95% CI)" if paired else "accuracy", "KV/problem", "problems/s", "sign test p"]
    if not paired:  # no outcomes per problem (rows read back from a table): no interval nor test
        header, body = header[:-1], [r[:-1] for r in body]
    body = [[c or "n/a" for c in r] for r in body]
    note = ("accuracy: the difference in points, paired over the problems both searched"
            + (f" (a problem: its share right over the {plural(seeds, 'seed')})" if seeds > 1 else "")
            if paired else "accuracy: the difference of the two accuracies in points")
    if seeds > 1:
        note += "; KV and throughput: ratios of the means"
    return fitted(header, body, 1, 2) + wrap(note + ". In full: --wide.", indent="")


def comparison_blocks(comparisons) -> list[str]:
    """`ets compare`'s comparisons (ets/app/paired.py `compare_runs`), three short lines
    each: which runs over how many problems, the accuracy difference with its 95% interval
    and sign test, the KV size per problem (on both metrics)."""
    from ets.app.paired import kv_change, p_text

    lines = []
    for c in comparisons:
        d = c.difference
        unknown = f" ({c.ungraded} without a ground truth left out)" if c.ungraded else ""
        lines += wrap(f"{c.name} vs {c.base_name}, on the {plural(d.problems, 'problem')} both searched{unknown}:")
        lines += wrap(f"  accuracy {c.accuracy:.1%} vs {c.base_accuracy:.1%}: {d.points:+.1f} points "
                      f"({d.confidence:.0%} CI {d.low:+.1f} to {d.high:+.1f}), sign test p = {p_text(d.p_value)}",
                      indent="    ")
        lines += wrap(f"  KV/problem {compact(c.kv_size)} vs {compact(c.base_kv_size)}: "
                      f"{kv_change(c.base_kv_size, c.kv_size, c.base_kv_size_ref, c.kv_size_ref)}", indent="    ")
    return lines


def short_names(paths: Sequence[str], suffixes: Sequence[str]) -> list[str]:
    """Runs named by file name (with what `suffixes` add, e.g. their seeds), or by the
    paths given where two share a file name."""
    import os

    short = [os.path.basename(path.removesuffix(".jsonl")) + extra for path, extra in zip(paths, suffixes)]
    return short if len(set(short)) == len(short) else [path + extra for path, extra in zip(paths, suffixes)]


def sweep_lines(rows: Sequence[dict[str, Any]], wide: bool = False) -> list[str]:
    """What `ets sweep` and `ets demo` print under their progress: the key columns and the
    paper's comparisons in a table each; with `wide`, every column (the table.md table)
    and the comparisons in full."""
    from ets.app.report import markdown_table
    from ets.app.sweep import relative_to_rebase

    if wide:
        return markdown_table(rows).splitlines() + relative_to_rebase(rows)
    comparisons = comparison_table(rows)
    return narrow_table(rows) + ([""] + comparisons if comparisons else [])
