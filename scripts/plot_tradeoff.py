"""Accuracy against KV size, one point per setting, from several sweeps' tables.

Each `--point LABEL=PATH[@METHOD]` is one row of a sweep's `table.csv` (the mean over its
seeds): PATH is the sweep's output folder or its table.csv, METHOD picks the row when the
table holds several (default: its only row). Error bars are the sd over seeds on both
axes; the title says the problem count, the seeds and the width.

    python scripts/plot_tradeoff.py --out runs/ets_tradeoff.png \\
        --point "REBASE=docs/results/ets_steer_prm_200@rebase" --point "ETS lambda_c 1.0=docs/results/ets_steer_prm_200@ets" \\
        --point "ETS lambda_c 0.75=docs/results/lambda_c_0.75_test" --point "ETS lambda_c 1.25=docs/results/lambda_c_1.25_test"
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def fail(message: str) -> None:
    """Bad input: one line naming the problem and the fix, exit code 2, nothing written."""
    print(f"plot_tradeoff: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_point(spec: str) -> dict:
    """`LABEL=PATH[@METHOD]` -> that table row, with its label."""
    label, sep, where = spec.rpartition("=")  # the last "=": a label may hold one (W=64)
    if not sep or not label or not where:
        fail(f"--point {spec!r}: write it as LABEL=PATH[@METHOD], e.g. 'REBASE=runs/sweep@rebase'")
    path, _, method = where.partition("@")
    table = Path(path) / "table.csv" if Path(path).is_dir() else Path(path)
    if not table.is_file():
        fail(f"--point {spec!r}: no sweep table at {table} (run `ets sweep --out {path}` first)")
    with open(table, newline="") as f:
        rows = [r for r in csv.DictReader(f) if not method or r["method"] == method]
    if len(rows) != 1:
        which = f"method {method!r}" if method else "a single row (name the method with @METHOD)"
        fail(f"--point {spec!r}: {table} has {len(rows)} rows for {which}")
    return {"label": label, **rows[0]}


def number(row: dict, key: str) -> float:
    value = row.get(key)
    return float(value) if value not in (None, "") else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--point", action="append", required=True, help="LABEL=PATH[@METHOD], repeatable")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--title", default="accuracy vs KV size", help="first line of the title")
    ap.add_argument("--models", default="policy and step-tag PRM: the bundled demo models (ets/demo/checkpoints)",
                    help="the title's line naming the models the sweeps ran")
    args = ap.parse_args()
    points = [read_point(p) for p in args.point]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    many = len(points) > 5  # then a legend beside the axes names them (labels would overlap)
    fig, ax = plt.subplots(figsize=(9.5 if many else 7, 4.8))
    markers = "osD^vPX*<>"
    # every point its own colour: the default cycle repeats after ten
    colours = [f"C{i}" for i in range(10)] if len(points) <= 10 else list(plt.get_cmap("tab20").colors)
    for i, p in enumerate(points):
        x, y = number(p, "kv_size_per_problem"), 100 * number(p, "accuracy")
        ax.errorbar([x], [y], xerr=[number(p, "kv_size_per_problem_sd")], yerr=[100 * number(p, "accuracy_sd")],
                    marker=markers[i % len(markers)], color=colours[i % len(colours)], capsize=3, label=p["label"])
        if not many:
            ax.annotate(p["label"], (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8)
    problems = sorted({p["problems"] for p in points})
    seeds = sorted({p.get("seed_list", "") for p in points})
    widths = sorted({p["width"] for p in points})
    detail = (f"{'/'.join(problems)} problems, seeds {' | '.join(seeds)}, W={'/'.join(widths)}; "
              "mean and error bars of ± 1 sd over seeds")
    ax.set_title(f"{args.title}\n{detail}\n{args.models}", fontsize=9)
    ax.set_xlabel("KV size per problem (tokens, paper metric, prompt counted)")
    ax.set_ylabel("accuracy (%)")
    ax.grid(alpha=0.3)
    if many:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        ax.legend(fontsize=8)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    print(f"wrote {args.out}: " + "; ".join(
        f"{p['label']} {100 * number(p, 'accuracy'):.1f}% at {number(p, 'kv_size_per_problem'):,.0f}" for p in points))


if __name__ == "__main__":
    sys.exit(main())
