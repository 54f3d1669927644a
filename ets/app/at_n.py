"""Accuracy at n: what a run would have scored with fewer trajectories per problem.

`ets eval FILE --at-n` reads one run (typically best-of-N with W trajectories per problem)
and, for n = 1, 2, 4, ... below W and W itself, draws n of each problem's trajectories
without replacement and chooses an answer from them three ways
(ets/answers/aggregate.py `choose_answer`, scores aggregated by `--agg`):

    naive     the answer of the single highest-scored trajectory (vote `best`)
    weighted  the answer with the largest summed score (vote `weighted`)
    majority  the most frequent answer (vote `majority`)

Each n is drawn `--at-n-seeds K` times (draw k of n uses numpy's `default_rng([k, n])`, so
a figure does not depend on which other n were asked for); the figures are the mean
accuracy over the K draws and its sample standard deviation (ddof 1; 0 for one draw), with
the lowest and highest in the JSON. The drawn trajectories keep their order in the record,
so ties go to the earlier one as in the run itself; a problem with n or fewer trajectories
keeps them all, which makes the figures at n = W the run's own accuracy under each vote.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ets.answers.accuracy import nothing_to_grade
from ets.answers.aggregate import choose_answer
from ets.answers.grading import is_equivalent
from ets.app.terminal import plural

# selection -> the vote of choose_answer that makes it
SELECTIONS = {"naive": "best", "weighted": "weighted", "majority": "majority"}
SELECTION_LABELS = {"naive": "naive (best score)", "weighted": "weighted vote", "majority": "majority vote"}


def n_values(width: int) -> list[int]:
    """1, 2, 4, ... below `width`, then `width` itself."""
    ns, n = [], 1
    while n < width:
        ns.append(n)
        n *= 2
    return ns + [width]


def accuracy_at_n(records: Sequence[dict[str, Any]], aggregation: str = "last", draws: int = 5, *,
                  float_rounding: int | None = None) -> dict[str, Any]:
    """The figures of the module's doc for `records` (each with `ground_truth` and
    `trajectories` holding `answer` and `step_scores`), over the problems with a ground
    truth (those without one are counted as `ungraded`, when there are any)."""
    if draws < 1:
        raise ValueError(f"draws: {draws} must be >= 1")
    ungraded = sum(r["ground_truth"] is None for r in records)
    records = [r for r in records if r["ground_truth"] is not None]
    if ungraded and not records:
        raise ValueError(nothing_to_grade(ungraded))
    width = max((len(r["trajectories"]) for r in records), default=0)
    if width == 0:
        raise ValueError("no problem has a trajectory: there is nothing to draw from")
    ns = n_values(width)
    right = {name: np.zeros((len(ns), draws)) for name in SELECTIONS}
    rngs = [[np.random.default_rng([k, n]) for k in range(draws)] for n in ns]
    for r in records:
        trajs = r["trajectories"]
        for i, n in enumerate(ns):
            if n >= len(trajs):  # every draw keeps them all: one choice stands for all
                for name, hit in _choices(trajs, r["ground_truth"], aggregation, float_rounding).items():
                    right[name][i, :] += hit
                continue
            for k, rng in enumerate(rngs[i]):
                drawn = [trajs[j] for j in sorted(rng.choice(len(trajs), n, replace=False))]
                for name, hit in _choices(drawn, r["ground_truth"], aggregation, float_rounding).items():
                    right[name][i, k] += hit
    problems = len(records)
    return {
        "problems": problems,
        **({"ungraded": ungraded} if ungraded else {}),
        "width": width,
        "aggregation": aggregation,
        "draws": draws,
        "n": ns,
        **{name: _summary(right[name] / problems) for name in SELECTIONS},
    }


def _choices(trajs: Sequence[dict[str, Any]], truth: str | None, aggregation: str,
             float_rounding: int | None) -> dict[str, bool]:
    """Whether each selection's answer from `trajs` is right."""
    answers, scores = [t["answer"] for t in trajs], [t["step_scores"] for t in trajs]
    out = {}
    for name, vote in SELECTIONS.items():
        chosen = choose_answer(answers, scores, aggregation, vote)
        out[name] = chosen is not None and truth is not None and is_equivalent(chosen, truth,
                                                                                float_rounding=float_rounding)
    return out


def _summary(accuracy: np.ndarray) -> dict[str, list[float]]:
    """Per n (rows), over the draws (columns): mean, sample sd, lowest, highest."""
    sd = accuracy.std(axis=1, ddof=1) if accuracy.shape[1] > 1 else np.zeros(accuracy.shape[0])
    return {"mean": accuracy.mean(axis=1).tolist(), "sd": sd.tolist(),
            "min": accuracy.min(axis=1).tolist(), "max": accuracy.max(axis=1).tolist()}


def at_n_table(figures: dict[str, Any]) -> list[str]:
    """Markdown, under 80 columns: a row per n, a column per selection, `mean ± sd` in %."""
    lines = [
        f"Accuracy (%) at n of each problem's trajectories (up to {figures['width']}),"
        f" {plural(figures['problems'], 'problem')},"
        + (f" {figures['ungraded']} without a ground truth not counted," if figures.get("ungraded") else ""),
        f"agg={figures['aggregation']}: mean ± sample sd over {figures['draws']} "
        f"draw{'s' if figures['draws'] != 1 else ''} of n.",
        "",
        "| n | " + " | ".join(SELECTION_LABELS[name] for name in SELECTIONS) + " |",
        "|---:|" + "---:|" * len(SELECTIONS),
    ]
    for i, n in enumerate(figures["n"]):
        cells = [f"{100 * figures[name]['mean'][i]:.1f} ± {100 * figures[name]['sd'][i]:.1f}" for name in SELECTIONS]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines
