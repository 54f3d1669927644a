"""Tables and plots of run summaries: one row per (method, width).

Rows are the dicts `ets.app.run.run` returns, plus `method` and `width`. Both KV-size
metrics are columns: the project's (prompt counted) and the ETS code's (prompt as 2 tokens,
its selection steps only), which is the one the paper's ratios are on. The Markdown
table is what `ets demo` prints and `docs/results.md` shows; the CSV has every column;
the plots are for people who would rather look than read. Rows that are means over seeds
(ets/app/sweep.py `aggregate_seeds`: `seeds` > 1, `<key>_sd` beside each mean) print as
`mean ± sd` and plot with error bars of one sd.
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
    """The value as the column formats it; over several seeds `mean ± sd` (the sd of a
    percentage in points, e.g. `66.0% ± 3.1`)."""
    value = row.get(key)
    if value is None:
        return "n/a"
    sd = row.get(f"{key}_sd") if row.get("seeds", 1) > 1 else None
    text = _format(value, fmt)
    if sd is None:
        return text
    return f"{text} ± {100 * sd:.1f}" if fmt.endswith("%}") else f"{text} ± {_format(sd, fmt)}"


def _format(value: Any, fmt: str) -> str:
    if fmt == "{:,}" and isinstance(value, float):
        fmt = "{:,.0f}"  # a mean of counts
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], caption: bool = True) -> str:
    """One line per row. Rows aggregated over seeds (ets/app/sweep.py `aggregate_seeds`)
    show `mean ± sd` and, with `caption`, a line under the table saying so."""
    header = "| " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(_cell(r, k, f) for k, _, f in COLUMNS) + " |" for r in rows]
    lines = [header, rule, *body]
    seeds = _seeds(rows)
    if caption and len(seeds) > 1:
        lines += ["", f"Each cell: mean ± sample standard deviation over {len(seeds)} seeds ({', '.join(seeds)}); "
                      "accuracy's ± in points. Min and max per column in table.csv, per-seed rows in table_runs.csv."]
    return "\n".join(lines)


def _seeds(rows: Sequence[dict[str, Any]], default: int | None = None) -> list[str]:
    """The seeds the rows were run with, as text, e.g. ["0", "1", "2"]."""
    seeds: list[str] = []
    for r in rows:
        given = str(r["seed_list"]).split(",") if r.get("seed_list") else [str(r.get("seed", default))]
        seeds += [s for s in given if s not in seeds and s != "None"]
    return seeds


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys and not isinstance(r[k], (dict, list))]
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def model_label(name: str | None) -> str:
    """A model as a title names it: a hub id or a built-in as given; a local path relative
    to the project (or the working folder), else its last two parts."""
    if not name:
        return "none"
    path = Path(name)
    if not (path.is_absolute() or path.exists()):
        return name
    path = path.resolve()
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        try:
            return str(path.relative_to(root))
        except ValueError:
            continue
    return "/".join(path.parts[-2:])


def plot_title(config, rows: Sequence[dict[str, Any]], prefix: str = "ets sweep") -> str:
    """Two lines: what was run (problems, seeds) and with which models, e.g.
    `ets demo, W=16: 50 problems, 3 seeds (0, 1, 2)` / `policy ..., PRM step_tag (...)`."""
    counts = sorted({r["problems"] for r in rows if r.get("problems") is not None})
    problems = "?" if not counts else str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    seeds = _seeds(rows, config.search.seed)
    seed_text = f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} ({', '.join(seeds)})"
    if len(seeds) > 1:
        seed_text += ", mean and error bars of ± 1 sd over seeds"
    elif _intervals_known(rows):
        seed_text += "; accuracy's error bars: 95% interval over the problems (bootstrap)"
    return f"{prefix}: {problems} problems, {seed_text}\n" + models_line(config.policy.model, config.reward.name,
                                                                       config.reward.model)


def models_line(policy_model: str | None, reward_name: str | None, reward_model: str | None) -> str:
    """`policy <model>, PRM <name> (<model>)`: the models a title names."""
    prm = f"{reward_name} ({model_label(reward_model)})" if reward_model else f"{reward_name} (the policy's model)"
    return f"policy {model_label(policy_model)}, PRM {prm}"


def _spread(rows: Sequence[dict[str, Any]], key: str, scale: float = 1.0):
    """Error bars: each row's sd over seeds (scaled); for the accuracy of rows of one seed
    that know each problem's outcome, its 95% interval over the problems (`[below, above]`,
    ets/app/paired.py); None when neither."""
    if any(r.get("seeds", 1) > 1 for r in rows):
        return [(r.get(f"{key}_sd") or 0.0) * scale if r.get("seeds", 1) > 1 else 0.0 for r in rows]
    if key == "accuracy" and _intervals_known(rows):
        from ets.app.paired import accuracy_interval

        bounds = [accuracy_interval(r["correct_by_problem"]) for r in rows]
        return [[(r["accuracy"] - low) * scale for r, (low, _) in zip(rows, bounds)],
                [(high - r["accuracy"]) * scale for r, (_, high) in zip(rows, bounds)]]
    return None


def _intervals_known(rows: Sequence[dict[str, Any]]) -> bool:
    """Rows of one seed each, every one knowing its problems' outcomes."""
    return bool(rows) and all(r.get("seeds", 1) == 1 and r.get("correct_by_problem") for r in rows)


def plot_methods(rows: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> None:
    """Bars per method: accuracy, both KV-size metrics, measured peak KV, throughput; error
    bars are the sd over seeds where rows are means over several (`aggregate_seeds`), and
    for one seed the accuracy's interval over the problems (`_spread`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("accuracy", "accuracy", "accuracy (%)", 100.0),
        ("kv_size_per_problem", "KV size per problem (paper metric, prompt counted)", "tokens", 1.0),
        ("kv_size_ref_per_problem", "KV size per problem (ETS code's metric)", "tokens", 1.0),
        ("peak_kv_tokens", "peak live KV (engine measured)", "tokens", 1.0),
        ("problems_per_s", "throughput (problems/s)", "problems/s", 1.0),
        ("tokens_per_s", "throughput (tokens/s)", "generated tokens/s", 1.0),
    )
    labels = [f"{r['method']}\nW={r['width']}" for r in rows]
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    for ax, (key, name, unit, scale) in zip(axes.flat, panels):
        values = [(r.get(key) or 0) * scale for r in rows]
        bars = ax.bar(labels, values, yerr=_spread(rows, key, scale), capsize=4,
                      color=[f"C{i}" for i in range(len(rows))])
        fmt = "%.1f" if scale == 100.0 else "%.3f" if key == "problems_per_s" else "%.0f"
        ax.bar_label(bars, fmt=fmt, fontsize=8, label_type="center")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(unit)
        if key == "accuracy":
            ax.set_ylim(0, 100)
        ax.tick_params(axis="x", labelsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(rows: Sequence[dict[str, Any]], out: str | Path, title: str = "") -> list[Path]:
    """One PNG each: accuracy, KV size (both metrics) and throughput vs width; accuracy vs
    KV size. Error bars: the sd over seeds where rows are means over several; for one seed,
    the accuracy's interval over the problems (`_spread`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width_label = "search width W (log scale)"
    kv_label = "KV size per problem (tokens, paper metric)"
    figures = (
        ("accuracy_vs_width.png", "accuracy vs width", "width", ("accuracy",), "accuracy (%)", width_label),
        ("kv_size_vs_width.png", "KV size vs width (dashed: the ETS code's metric)", "width",
         ("kv_size_per_problem", "kv_size_ref_per_problem"), "KV size per problem (tokens)", width_label),
        ("throughput_vs_width.png", "throughput vs width", "width", ("problems_per_s",), "throughput (problems/s)",
         width_label),
        ("accuracy_vs_kv_size.png", "accuracy vs KV size", "kv_size_per_problem", ("accuracy",), "accuracy (%)",
         kv_label),
    )
    scale = {"accuracy": 100.0}
    paths = []
    for name, what, xkey, ykeys, ylabel, xlabel in figures:
        fig, ax = plt.subplots(figsize=(7, 4.8))
        for i, m in enumerate(methods):
            for ykey, style in zip(ykeys, ("-", "--")):
                ms = sorted((r for r in rows
                             if r["method"] == m and r.get(xkey) is not None and r.get(ykey) is not None),
                            key=lambda r: r[xkey])
                if not ms:
                    continue
                ys = [r[ykey] * scale.get(ykey, 1.0) for r in ms]
                yerr = _spread(ms, ykey, scale.get(ykey, 1.0))
                xerr = _spread(ms, xkey) if xkey != "width" else None
                label = m if style == "-" else f"{m} (ETS code's metric)"
                ax.errorbar([r[xkey] for r in ms], ys, yerr=yerr, xerr=xerr, marker="o", linestyle=style,
                            color=f"C{i}", capsize=3, label=label)
        if xkey == "width":
            ax.set_xscale("log", base=2)
            widths = sorted({r["width"] for r in rows})
            ax.set_xticks(widths, [str(w) for w in widths])
            ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(what, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        if title:
            fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)
    return paths
