"""Choosing a search's answer from its completed trajectories (docs/algorithms.md, "Choosing the answer").

Two independent choices, kept apart as in search-and-learn:

    aggregation  one score per trajectory from its step scores
                 last | min | mean | prod
    vote         one answer from (answer, score) pairs
                 best      the answer of the highest-scoring trajectory
                 majority  the most frequent answer
                 weighted  the answer with the largest sum of trajectory scores
                           (the papers' default, with `last`)

Answers are grouped by mathematical equivalence (`ets.answers.grading.answers_match`), so
"\\frac{1}{2}" and "0.5" pool their votes. Trajectories without an answer do not vote.
Ties (up to float rounding) go to the earliest trajectory / the group seen first, so the
choice is deterministic.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from ets.config import AGGREGATIONS, VOTES
from ets.answers.grading import answers_match


def _last(scores: Sequence[float]) -> float:
    return scores[-1]


def _mean(scores: Sequence[float]) -> float:
    return sum(scores) / len(scores)


_AGGREGATORS: dict[str, Callable[[Sequence[float]], float]] = {
    "last": _last,
    "min": min,
    "mean": _mean,
    "prod": math.prod,
}
assert tuple(_AGGREGATORS) == AGGREGATIONS  # one list of names, shared with the config


def aggregate(step_scores: Sequence[float], aggregation: str = "last") -> float:
    """One trajectory's score. A trajectory with no scored steps scores 0."""
    if aggregation not in _AGGREGATORS:
        raise ValueError(f"unknown aggregation {aggregation!r}; choose one of: {', '.join(AGGREGATIONS)}")
    if len(step_scores) == 0:
        return 0.0
    return float(_AGGREGATORS[aggregation](step_scores))


def group_answers(answers: Sequence[str | None]) -> list[list[int]]:
    """Indices of the answers, grouped by equivalence; None answers are left out.

    Each answer joins the first group whose first member it matches, so a group is
    represented by its earliest answer (equivalence as math-verify judges it need not be
    transitive; this keeps the grouping deterministic).
    """
    groups: list[list[int]] = []
    group_of: dict[str, list[int]] = {}     # identical strings join without a comparison
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        if answer in group_of:
            group_of[answer].append(i)
            continue
        for group in groups:
            if answers_match(answers[group[0]], answer):
                group.append(i)
                group_of[answer] = group
                break
        else:
            groups.append([i])
            group_of[answer] = groups[-1]
    return groups


def choose_answer(
    answers: Sequence[str | None],
    step_scores: Sequence[Sequence[float]],
    aggregation: str = "last",
    vote: str = "weighted",
) -> str | None:
    """The answer a search returns, or None when no trajectory has one.

    answers[t] is trajectory t's extracted answer (None if it has none) and
    step_scores[t] its per-step PRM scores. The chosen answer is returned as written by
    the first trajectory of the winning group.
    """
    if len(answers) != len(step_scores):
        raise ValueError(f"{len(answers)} answers but {len(step_scores)} score lists; give one per trajectory")
    if aggregation not in _AGGREGATORS:
        raise ValueError(f"unknown aggregation {aggregation!r}; choose one of: {', '.join(AGGREGATIONS)}")
    if vote not in VOTES:
        raise ValueError(f"unknown vote {vote!r}; choose one of: {', '.join(VOTES)}")
    scores = [aggregate(s, aggregation) for s in step_scores]
    groups = group_answers(answers)
    if not groups:
        return None
    if vote == "best":
        members = sorted(i for group in groups for i in group)
        return answers[_first_max(members, scores)]
    if vote == "majority":
        weight = {g: float(len(group)) for g, group in enumerate(groups)}
    else:  # weighted
        weight = {g: sum(scores[i] for i in group) for g, group in enumerate(groups)}
    return answers[groups[_first_max(range(len(groups)), weight)][0]]


def _first_max(keys, value) -> int:
    """The first key whose value is the maximum, up to float rounding (sums of the same
    scores added in another order differ in the last bit; that must not decide a vote)."""
    keys = list(keys)
    top = max(value[k] for k in keys)
    return next(k for k in keys if value[k] >= top - 1e-9 * max(1.0, abs(top)))
