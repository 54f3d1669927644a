"""Tables and plots of run summaries: one row per (method, width).

Rows are the dicts `ets.app.run.run` returns, plus `method` and `width`. Both KV-size
metrics are columns: the project's (prompt counted) and the ETS code's (prompt as 2 tokens,
its selection steps only), which is the one the paper's ratios are on. The Markdown
table is what `ets demo` prints and `docs/RESULTS.md` holds; the CSV has every column;
the plots are for people who would rather look than read.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence

# (key, header, format) of the printed table, in order.
COLUMNS = (
    ("method", "method", "{}"),
    ("width", "W", "{}"),
    ("accuracy", "accuracy", "{:.1%}"),
    ("answer_rule", "vote (aggregation)", "{}"),
    ("kv_size_sum", "KV size, sum (paper metric)", "{:,}"),
    ("kv_size_per_problem", "KV size/problem", "{:,.0f}"),
    ("kv_size_ref_per_problem", "KV size/problem (ETS code's metric)", "{:,.0f}"),
    ("peak_kv_tokens", "peak live KV (engine)", "{:,}"),
    ("mean_kv_tokens", "mean live KV (engine)", "{:,.0f}"),
    ("generated_tokens", "tokens generated", "{:,}"),
    ("wall_time", "wall s", "{:.1f}"),
    ("problems_per_s", "problems/s", "{:.3f}"),
    ("tokens_per_s", "tokens/s", "{:,.0f}"),
    ("mean_active", "in flight (mean)", "{:.1f}"),
)


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    if value is None:
        return "n/a"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    header = "| " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(_cell(r, k, f) for k, _, f in COLUMNS) + " |" for r in rows]
    return "\n".join([header, rule, *body])


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys and not isinstance(r[k], (dict, list))]
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def plot_methods(rows: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> None:
    """Bars per method: accuracy, the paper's KV size, measured peak KV, throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("accuracy", "accuracy", 100.0),
        ("kv_size_per_problem", "KV size per problem (tokens, paper metric)", 1.0),
        ("peak_kv_tokens", "peak live KV (tokens, engine measured)", 1.0),
        ("tokens_per_s", "throughput (tokens/s)", 1.0),
    )
    labels = [f"{r['method']}\nW={r['width']}" for r in rows]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, (key, name, scale) in zip(axes.flat, panels):
        values = [(r.get(key) or 0) * scale for r in rows]
        bars = ax.bar(labels, values, color=[f"C{i}" for i in range(len(rows))])
        ax.bar_label(bars, fmt="%.0f" if scale == 1.0 else "%.1f", fontsize=8)
        ax.set_title(name + (" (%)" if scale == 100.0 else ""), fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(rows: Sequence[dict[str, Any]], out: str | Path) -> list[Path]:
    """One PNG each: accuracy, KV size and throughput vs width; accuracy vs KV size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    figures = (
        ("accuracy_vs_width.png", "width", "accuracy", "accuracy"),
        ("kv_size_vs_width.png", "width", "kv_size_per_problem", "KV size per problem (tokens, paper metric)"),
        ("throughput_vs_width.png", "width", "problems_per_s", "throughput (problems/s)"),
        ("accuracy_vs_kv_size.png", "kv_size_per_problem", "accuracy", "accuracy"),
    )
    paths = []
    for name, xkey, ykey, ylabel in figures:
        fig, ax = plt.subplots(figsize=(6, 4))
        for m in methods:
            pts = sorted((r[xkey], r[ykey]) for r in rows if r["method"] == m and r.get(xkey) is not None)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=m)
        if xkey == "width":
            ax.set_xscale("log", base=2)
        ax.set_xlabel("width" if xkey == "width" else "KV size per problem (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)
    return paths
