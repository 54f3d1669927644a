"""Accuracy difference against KV saved, each run paired with its base on the same problems.

Each `--pair LABEL=RUN@BASE` is one point: RUN against BASE as `ets compare BASE RUN`
computes it (RUN and BASE are results files of `ets run`, or a sweep's run named without
its seed, `runs/s/ets_w64`, standing for its seed files). x: how many times less KV (per
problem, the paper's metric) RUN kept than BASE; y: RUN's accuracy minus BASE's in points,
paired problem by problem, with its 95% bootstrap interval over the problems (and their
seeds, where there are several) as the error bar. The bases lie at (1x, 0), one star (`--base-label` names it). A label ending in
`W=<n>` places the point on the line of the label without it, with a marker per width, so
one setting's points at several widths are joined. `--target POINTS,TIMES` shades where a
run is at most POINTS below its base with at least TIMES less KV (e.g. `1,1.8`: within a
point at 1.8x less). Written as PNG (titled) and PDF (untitled, for a caption).

    python scripts/plot_paired.py --out runs/embedders.png --target 1,1.8 --base-label REBASE \\
        --pair "ETS static W=64=runs/t64/ets_w64@runs/t64/rebase_w64" \\
        --pair "ETS prm W=64=runs/t64_prm/ets_w64@runs/t64/rebase_w64"
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project's own code, run from anywhere

WIDTH = re.compile(r"\s*W=(\d+)$")


def fail(message: str) -> None:
    """Bad input: one line naming the problem and the fix, exit code 2, nothing written."""
    print(f"plot_paired: {message}", file=sys.stderr)
    raise SystemExit(2)


@functools.lru_cache(maxsize=None)
def records(path: str) -> list[list[dict]]:
    """A results file's or sweep run's records per seed, read once however many pairs name
    it (a base usually serves several)."""
    from ets.app.result_runs import load_runs

    return load_runs("compare", (path,), "whose records say whether each answer was right")[0][2]


def read_pair(spec: str) -> dict:
    """`LABEL=RUN@BASE` -> its paired comparison (ets/app/paired.py), label and seeds."""
    from ets.app.evaluate import EvalError
    from ets.app.paired import compare_runs

    label, sep, where = spec.rpartition("=")  # the last "=": a label may hold one (W=64)
    run, at, base = where.rpartition("@")
    if not sep or not label or not at or not run or not base:
        fail(f"--pair {spec!r}: write it as LABEL=RUN@BASE, e.g. 'ETS W=64=runs/s/ets_w64@runs/s/rebase_w64'")
    try:
        base_runs, runs = records(base), records(run)
        found = compare_runs((base, base_runs), [(run, runs)])[0]
    except (EvalError, ValueError) as exc:
        fail(f"--pair {spec!r}: {exc}")
    return {"label": label, "comparison": found, "seeds": len(runs), "base_seeds": len(base_runs)}


def title(config, pairs: list[dict], prefix: str) -> str:
    """What was compared (task, problems, seeds), with which models, and what the bars are."""
    from ets.app.report import models_line, task_label
    from ets.app.terminal import plural

    counts = sorted({p["comparison"].difference.problems for p in pairs})
    problems = plural(counts[0], "problem") if len(counts) == 1 else f"{counts[0]}-{counts[-1]} problems"
    seeds = sorted({p["seeds"] for p in pairs} | {p["base_seeds"] for p in pairs})
    seeds_text = plural(seeds[0], "seed") if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]} seeds"
    task = task_label(config.data.path, config.data.hf_name, config.data.hf_split if config.data.hf_name else None)
    over = "the problems and their seeds" if seeds[-1] > 1 else "the problems"
    return "\n".join([f"{prefix}: {task}, {problems} paired, {seeds_text} each",
                      models_line(config.policy.model, config.reward.name, config.reward.model),
                      f"error bars: the paired difference's 95% interval over {over} (bootstrap)"])


def parse_target(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        points, times = (float(v) for v in text.split(","))
    except ValueError:
        fail(f"--target {text!r}: write it as POINTS,TIMES, e.g. 1,1.8 (at most 1 point below, at least 1.8x less KV)")
    if points < 0 or times <= 0:
        fail(f"--target {text!r}: POINTS is how far below the base a run may be (0 or more), TIMES how many "
             "times less KV it must keep (above 0)")
    return points, times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", action="append", required=True, help="LABEL=RUN@BASE, repeatable")
    ap.add_argument("--out", required=True, help="the plot to write: PATH.png and PATH.pdf")
    ap.add_argument("--target", default=None, help="POINTS,TIMES: shade where a run is at most POINTS below its "
                    "base with at least TIMES less KV, e.g. 1,1.8")
    ap.add_argument("--base-label", default="the base", help="the legend's name for the bases, drawn at (1x, 0)")
    ap.add_argument("--title", default="paired against the base", help="what the plot shows, first in the title")
    ap.add_argument("--config", default=str(ROOT / "ets" / "demo" / "demo.yaml"),
                    help="the config the runs ran: names the task and the models in the title (default: the demo's)")
    args = ap.parse_args()
    target = parse_target(args.target)
    pairs = [read_pair(p) for p in args.pair]

    from ets.app.report import finish_plot, pyplot
    from ets.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except (ConfigError, FileNotFoundError) as exc:
        fail(f"--config {args.config}: {exc}")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 5))
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.axvline(1, color="grey", linewidth=0.8)
    ax.plot([1], [0], marker="*", markersize=11, color="black", linestyle="none", label=args.base_label)
    names = list(dict.fromkeys(WIDTH.sub("", p["label"]) for p in pairs))  # a line each
    widths = sorted({int(m.group(1)) for p in pairs if (m := WIDTH.search(p["label"]))})
    markers = {w: "osD^vPX*<>"[i % 10] for i, w in enumerate(widths)}
    labels = []
    for i, name in enumerate(names):
        colour = f"C{i % 10}"
        mine = [p for p in pairs if WIDTH.sub("", p["label"]) == name]
        mine.sort(key=lambda p: int(m.group(1)) if (m := WIDTH.search(p["label"])) else 0)
        xs = [p["comparison"].base_kv_size / p["comparison"].kv_size for p in mine]
        ys = [p["comparison"].difference.points for p in mine]
        if len(mine) > 1:
            ax.plot(xs, ys, color=colour, alpha=0.35, linewidth=1)
        for p, x, y in zip(mine, xs, ys):
            d = p["comparison"].difference
            width = WIDTH.search(p["label"])
            ax.errorbar([x], [y], yerr=[[y - d.low], [d.high - y]], marker=markers[int(width.group(1))] if width else "o",
                        color=colour, capsize=3, label=name if p is mine[0] else None)
            if width and len(widths) > 1:
                labels.append((x, y, f"W={width.group(1)}", colour))
    if target is not None:
        points, times = target
        ax.autoscale_view()
        right = max(ax.get_xlim()[1], times * 1.05)
        top = max(ax.get_ylim()[1], 1 - points)
        ax.fill_between([times, right], -points, top, color="green", alpha=0.1, linewidth=0,
                        label=f"target: at most {points:g} point{'' if points == 1 else 's'} below, "
                              f"{times:g}x less KV or more")
        ax.set_xlim(right=right)
        ax.set_ylim(top=top)
    ax.set_xlabel("KV size per problem: how many times less than the base (paper metric)")
    ax.set_ylabel("accuracy minus the base's (points, paired)")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}x"))
    written = finish_plot(fig, ax, labels, args.out, title(config, pairs, args.title))
    print(f"wrote {written[0]} and {written[1].name}: " + "; ".join(
        f"{p['label']} {p['comparison'].difference.points:+.1f} points "
        f"({p['comparison'].difference.low:+.1f} to {p['comparison'].difference.high:+.1f}) at "
        f"{p['comparison'].base_kv_size / p['comparison'].kv_size:.2f}x less KV" for p in pairs))


if __name__ == "__main__":
    sys.exit(main())
