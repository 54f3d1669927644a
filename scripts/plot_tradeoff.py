"""Accuracy against KV size, one point per setting, from several sweeps' tables.

Each `--point LABEL=PATH[@METHOD]` is one row of a sweep's `table.csv` (the mean over its
seeds): PATH is the sweep's output folder or its table.csv, METHOD picks the row when the
table holds several (default: its only row). Each point is labelled with its width W
where the points' widths differ (else the title says it), and with its LABEL where they
are few (else a legend beside the axes names them). Error bars: the
accuracy's 95% interval over the problems where the table has it, else one sd over seeds,
never below 0 nor above 100%; the KV size's sd over seeds. The title names the task, the
problem count, the seeds and the models (from --config, default the demo's). Written as
PNG and PDF (--out with either suffix, or none).

    python scripts/plot_tradeoff.py --out runs/ets_tradeoff.png \\
        --point "REBASE=docs/results/ets_steer_prm_200@rebase" --point "ETS lambda_c 1.0=docs/results/ets_steer_prm_200@ets" \\
        --point "ETS lambda_c 0.75=docs/results/lambda_c_0.75_test" --point "ETS lambda_c 1.25=docs/results/lambda_c_1.25_test"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project's own code, run from anywhere


def fail(message: str) -> None:
    """Bad input: one line naming the problem and the fix, exit code 2, nothing written."""
    print(f"plot_tradeoff: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_point(spec: str) -> dict:
    """`LABEL=PATH[@METHOD]` -> that table row, with its label."""
    from ets.app.report import read_table

    label, sep, where = spec.rpartition("=")  # the last "=": a label may hold one (W=64)
    if not sep or not label or not where:
        fail(f"--point {spec!r}: write it as LABEL=PATH[@METHOD], e.g. 'REBASE=runs/sweep@rebase'")
    path, _, method = where.partition("@")
    table = Path(path) / "table.csv" if Path(path).is_dir() else Path(path)
    if not table.is_file():
        fail(f"--point {spec!r}: no sweep table at {table} (run `ets sweep --out {path}` first)")
    rows = [r for r in read_table(table) if not method or r["method"] == method]
    if len(rows) != 1:
        which = f"method {method!r}" if method else "a single row (name the method with @METHOD)"
        fail(f"--point {spec!r}: {table} has {len(rows)} rows for {which}")
    return {"label": label, **rows[0]}


def number(row: dict, key: str) -> float:
    value = row.get(key)
    return float(value) if value is not None else 0.0


def line_colours(names: list[str], points: list[dict], method_colours) -> dict[str, str]:
    """A colour per line: its method's own (as in every figure) for the first line of each
    method, the next unused ones for further lines of a method (ETS with two embedders)."""
    import re

    method_of = {name: next(p["method"] for p in points if re.sub(r"\s*W=\d+$", "", p["label"]) == name)
                 for name in names}
    own = method_colours(list(dict.fromkeys(method_of.values())))
    spare = (f"C{i}" for i in range(10) if f"C{i}" not in own.values())
    colours, taken = {}, set()
    for name in names:
        method = method_of[name]
        colours[name] = own[method] if method not in taken else next(spare, "black")
        taken.add(method)
    return colours


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--point", action="append", required=True, help="LABEL=PATH[@METHOD], repeatable")
    ap.add_argument("--out", required=True, help="the plot to write: PATH.png and PATH.pdf")
    ap.add_argument("--title", default="accuracy vs KV size", help="what the plot shows, first in the title")
    ap.add_argument("--config", default=str(ROOT / "ets" / "demo" / "demo.yaml"),
                    help="the config the sweeps ran: names the task and the models in the title (default: the demo's)")
    args = ap.parse_args()
    points = [read_point(p) for p in args.point]

    from ets.app.report import count_formatter, error_bars, figure_title, finish_plot, method_colours, plot_title, pyplot
    from ets.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except (ConfigError, FileNotFoundError) as exc:
        fail(f"--config {args.config}: {exc}")
    plt = pyplot()
    # One colour per method, one marker per width; a method's points at several widths are
    # joined, so its path as the width grows reads at a glance. Labels name the width where
    # the points differ in it (else the title says it).
    import re

    fig, ax = plt.subplots(figsize=(8.5, 5))
    names = list(dict.fromkeys(re.sub(r"\s*W=\d+$", "", p["label"]) for p in points))  # a line each
    widths = sorted({int(p["width"]) for p in points})
    colours = line_colours(names, points, method_colours)
    markers = {w: "osD^vPX*<>"[i % 10] for i, w in enumerate(widths)}
    labels = []
    for name in names:
        mine = sorted((p for p in points if re.sub(r"\s*W=\d+$", "", p["label"]) == name), key=lambda p: int(p["width"]))
        xs = [number(p, "kv_size_per_problem") for p in mine]
        ys = [100 * number(p, "accuracy") for p in mine]
        if len(mine) > 1:
            ax.plot(xs, ys, color=colours[name], alpha=0.35, linewidth=1)
        for p, x, y in zip(mine, xs, ys):
            ax.errorbar([x], [y], xerr=error_bars([p], "kv_size_per_problem"),
                        yerr=error_bars([p], "accuracy", 100.0), marker=markers[int(p["width"])],
                        color=colours[name], capsize=3, label=name if p is mine[0] else None)
            if len(widths) > 1:
                labels.append((x, y, f"W={p['width']}", colours[name]))
    ax.set_xlabel("KV size per problem (tokens, paper metric, prompt counted)")
    ax.set_ylabel("accuracy (%)")
    ax.xaxis.set_major_formatter(count_formatter())
    title = figure_title(plot_title(config, points, prefix=args.title), points, ("kv_size_per_problem", "accuracy"))
    written = finish_plot(fig, ax, labels, args.out, title)
    print(f"wrote {written[0]} and {written[1].name}: " + "; ".join(
        f"{p['label']} {100 * number(p, 'accuracy'):.1f}% at {number(p, 'kv_size_per_problem'):,.0f}" for p in points))


if __name__ == "__main__":
    sys.exit(main())
