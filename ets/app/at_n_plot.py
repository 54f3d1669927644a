"""The plot of `ets eval --at-n` (ets/app/at_n.py): accuracy against n on a log2 axis, one
line per selection with a band of ± 1 sd over the draws, written as PNG (titled with the
run) and PDF (untitled, for a paper's caption to describe)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ets.app.at_n import SELECTION_LABELS, SELECTIONS
from ets.app.evaluate import EvalError
from ets.app.report import method_label, models_line, save_figure, task_label
from ets.app.terminal import plural


def plot_paths(plot: str | None, first_file: str) -> tuple[Path, Path]:
    """Where the PNG and PDF go: `plot` with either suffix (or none), else beside the
    first results file as `<name>.at_n.png` / `.pdf`."""
    if plot:
        base = Path(plot)
        if base.suffix.lower() in (".png", ".pdf"):
            base = base.with_suffix("")
    else:
        first = Path(first_file)
        base = first.with_name(first.name.removesuffix(first.suffix) + ".at_n")
    return base.with_name(base.name + ".png"), base.with_name(base.name + ".pdf")


def at_n_title(figures: dict[str, Any], made: dict[str, Any] | None, records: Sequence[dict[str, Any]],
               files: int = 1) -> str:
    """What was run: the method and width, the task (where the run's config record names
    it), problems (and files), draws; the models where the config record names them."""
    compared, recorded = (made or {}).get("compared", {}), (made or {}).get("recorded", {})
    method = compared.get("search.method") or next((r["method"] for r in records if r.get("method")), None)
    width = compared.get("search.width") or next((r["width"] for r in records if r.get("width")), None)
    run = ", ".join(x for x in (method_label(method) if method else None, f"W={width}" if width else None) if x) \
        or "results"
    task = recorded.get("data.path") or recorded.get("data.hf_name")
    task_text = f", {task_label(recorded.get('data.path'), recorded.get('data.hf_name'))}" if task else ""
    files_text = f" in {files} files" if files > 1 else ""
    head = (f"{run}{task_text}: {plural(figures['problems'], 'problem')}{files_text}, agg={figures['aggregation']}, "
            f"{plural(figures['draws'], 'draw')} of n")
    if not made:
        return head
    policy = recorded.get("policy.model") or compared.get("policy.model")
    reward_model = recorded.get("reward.model")
    return head + "\n" + models_line(policy, compared.get("reward.name"), reward_model)


def plot_at_n(figures: dict[str, Any], paths: Sequence[Path], title: str = "") -> None:
    """Accuracy (%) vs n, a line and a ± 1 sd band (kept within 0-100%) per selection."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    ns = figures["n"]
    fig, ax = plt.subplots(figsize=(7, 4.8))
    # at n = 1 the three choices are one: markers and dashes keep each line visible
    for i, (name, marker, style) in enumerate(zip(SELECTIONS, "os^", ("-", "--", ":"))):
        mean, sd = 100 * np.array(figures[name]["mean"]), 100 * np.array(figures[name]["sd"])
        ax.plot(ns, mean, marker=marker, linestyle=style, color=f"C{i}", label=SELECTION_LABELS[name])
        ax.fill_between(ns, np.clip(mean - sd, 0, 100), np.clip(mean + sd, 0, 100), color=f"C{i}", alpha=0.2,
                        linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.minorticks_off()
    ax.set_ylim(0, 100)
    ax.set_xlabel(f"n: trajectories drawn per problem (of up to {figures['width']}; log scale)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"accuracy at n: mean and ± 1 sd over {plural(figures['draws'], 'draw')}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        paths[0].parent.mkdir(parents=True, exist_ok=True)
        save_figure(fig, paths[0], title)   # the PNG with `title` over it, the PDF without
    except OSError as exc:
        path = Path(exc.filename or paths[0])
        raise EvalError(f"--plot {path}: cannot write there ({exc.strerror or exc}); pass another --plot PATH") from None
    finally:
        plt.close(fig)
