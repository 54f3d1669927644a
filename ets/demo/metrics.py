"""Quality measures of the demo models (used by scripts/demo_quality.py and training).
The weighted vote is `ets.answers.aggregate.choose_answer`, the one the search uses."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
from scipy.stats import rankdata


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float:
    """ROC AUC by ranks (the Mann-Whitney U statistic; ties get their mean rank)."""
    y, s = np.asarray(labels, dtype=bool), np.asarray(scores, dtype=float)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def mean_auc_within(groups: Iterable[tuple[Sequence[bool], Sequence[float]]]) -> tuple[float | None, int]:
    """The mean `roc_auc` over groups (e.g. one problem's trajectories: right?, score) that
    hold both classes, and how many did: (None, 0) if none did. A group of one class has
    nothing to rank."""
    aucs = [roc_auc(labels, scores) for labels, scores in groups if 0 < sum(map(bool, labels)) < len(labels)]
    return (float(np.mean(aucs)) if aucs else None), len(aucs)


def miss_persistence(labels: Sequence[Sequence[bool]], scores: Sequence[Sequence[float]],
                     following: int = 3) -> float:
    """Whether a PRM's misses persist along a path: over the trajectories whose first wrong
    step is followed by more wrong steps, the Pearson correlation between that step's score
    and the mean score of the wrong steps among the next `following`. Near 0, each wrong
    step is judged afresh, and a search that kept an overrated one drops it a step later; near
    1, a path the PRM misses once it keeps missing, and a search follows it to the end. NaN
    with fewer than 3 such trajectories."""
    first, after = [], []
    for labs, sc in zip(labels, scores):
        k = next((i for i, ok in enumerate(labs) if not ok), None)
        if k is None:
            continue
        later = [s for s, ok in zip(sc[k + 1:k + 1 + following], labs[k + 1:k + 1 + following]) if not ok]
        if later:
            first.append(sc[k])
            after.append(sum(later) / len(later))
    if len(first) < 3 or np.std(first) == 0 or np.std(after) == 0:
        return float("nan")
    return float(np.corrcoef(first, after)[0, 1])


def distinct_prefixes(trajectories: Sequence[Sequence[str]], labels: Sequence[Sequence[bool]],
                      scores: Sequence[Sequence[float]]) -> dict[tuple[str, ...], tuple[bool, bool, float]]:
    """One problem's samples as their distinct partial paths: prefix (the steps up to and
    including its newest) -> (newest step right?, no wrong step yet?, newest step's score).
    A prefix met in several samples counts once: a search meets it once."""
    out: dict[tuple[str, ...], tuple[bool, bool, float]] = {}
    for steps, per_l, per_s in zip(trajectories, labels, scores):
        clean = True
        for k, (ok, x) in enumerate(zip(per_l, per_s)):
            clean = clean and bool(ok)
            out[tuple(steps[:k + 1])] = (bool(ok), clean, float(x))
    return out


def computation_consistency(trajectories: Sequence[Sequence[Sequence[str]]], labels: Sequence[Sequence[Sequence[bool]]],
                            scores: Sequence[Sequence[Sequence[float]]]) -> float:
    """How far a PRM's verdict on a computation is the same wherever it meets it. Per
    problem (trajectories, their steps' labels and scores), each wrong computation (e.g.
    `2960 + 64 = 2024`, `ets.demo.checker.computation`) met in different prefixes is one
    group of scores, one per distinct prefix; the result is the share of the scores'
    variance, on the probit scale, that the group fixes (1 - pooled within-group variance
    / total variance). Near 0, each path is judged afresh and a search's many paths through
    a computation average its mistakes out; near 1, one verdict is repeated, and a search
    that gives width to what scores well piles it on an overrated wrong computation.
    NaN with fewer than 2 groups of 2 or more."""
    from statistics import NormalDist

    from ets.demo.checker import computation

    groups: dict = {}
    for i, problem in enumerate(zip(trajectories, labels, scores)):
        for prefix, (ok, _, x) in distinct_prefixes(*problem).items():
            if not ok:
                groups.setdefault((i, computation(prefix[-1])), []).append(x)
    probit = NormalDist().inv_cdf
    kept = [np.array([probit(min(max(x, 1e-4), 1 - 1e-4)) for x in g]) for g in groups.values() if len(g) >= 2]
    if len(kept) < 2:
        return float("nan")
    values = np.concatenate(kept)
    total = values.var(ddof=1)
    if total == 0:
        return float("nan")
    within = sum(((g - g.mean()) ** 2).sum() for g in kept) / (len(values) - len(kept))
    return float(1 - within / total)


def computation_auc(trajectories: Sequence[Sequence[Sequence[str]]], labels: Sequence[Sequence[Sequence[bool]]],
                    scores: Sequence[Sequence[Sequence[float]]]) -> tuple[float | None, int]:
    """How often a PRM is wrong about a *computation*, not a step: per problem, each
    distinct computation (`ets.demo.checker.computation`) with its label is scored by the
    mean of its scores over the distinct prefixes it was met in, and the result is the mean
    within-problem ROC AUC of the right computations against the wrong ones (with the count
    of problems that had both), as `mean_auc_within`. A step AUC counts a computation once
    per path that makes it; a search that gives width to what scores well meets each of its
    computations once per path too, but is misled once per computation the PRM overrates,
    so this is the AUC that says how far it can be trusted."""
    from ets.demo.checker import computation

    groups = []
    for problem in zip(trajectories, labels, scores):
        met: dict = {}
        for prefix, (ok, _, x) in distinct_prefixes(*problem).items():
            met.setdefault((computation(prefix[-1]), ok), []).append(x)
        groups.append(([ok for _, ok in met], [float(np.mean(xs)) for xs in met.values()]))
    return mean_auc_within(groups)


def rebase_steering(trajectories: Sequence[Sequence[Sequence[str]]], labels: Sequence[Sequence[Sequence[bool]]],
                    scores: Sequence[Sequence[Sequence[float]]], temperature: float = 0.2) -> tuple[float, float, int]:
    """How far a PRM steers REBASE toward right partial paths, in REBASE's own terms. Per
    problem and depth, the distinct partial paths of the samples are weighed as REBASE
    weighs its nodes (softmax of the newest step's score / `temperature`, 0.2 by default
    as in the config); the result is the mean weight on the paths with no wrong step yet,
    the mean plain share of those paths, and the count of (problem, depth) groups that
    had both. A rank AUC does not see this: a PRM that tells 0.1 from 0.3 well but puts
    overrated wrong paths at 0.97 among right ones at 0.97 ranks well and steers little."""
    weighted, plain = [], []
    for problem in zip(trajectories, labels, scores):
        by_depth: dict = {}
        for prefix, (_, clean, x) in distinct_prefixes(*problem).items():
            by_depth.setdefault(len(prefix), []).append((clean, x))
        for paths in by_depth.values():
            right = np.array([c for c, _ in paths])
            if right.all() or not right.any():
                continue
            s = np.array([x for _, x in paths])
            w = np.exp((s - s.max()) / temperature)
            weighted.append(w[right].sum() / w.sum())
            plain.append(right.mean())
    if not plain:
        return float("nan"), float("nan"), 0
    return float(np.mean(weighted)), float(np.mean(plain)), len(plain)
