"""Two methods' accuracies compared on the problems both searched: the difference, paired.

Every method of a sweep searches the same problems, so their accuracies are paired: a
problem that is easy is easy for both. On the demo's 24 problems the seeds moved one
method's accuracy by up to 17 points, more than the methods differed, and two means with
their own ± cannot say whether REBASE is 5 points above best-of-N or ETS within 1 point of
REBASE (issue 18's targets). The difference per problem can: its mean over the problems is
the accuracy difference, and resampling the problems (a percentile bootstrap, seeded, so
the same records give the same interval) gives its confidence interval.

With several seeds a problem's outcome is its share of right answers over the seeds that
searched it, so the interval is over problems (the unit drawn from the test set), not runs.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000


class PairedDifference(NamedTuple):
    points: float      # accuracy of A minus accuracy of B, in points, over the shared problems
    low: float         # the confidence interval of `points`
    high: float
    problems: int      # problems both searched
    a_better: int      # problems where A was right more often than B
    b_better: int
    confidence: float

    def text(self) -> str:
        """e.g. `+4.5 points (95% CI -1.0 to +10.0; better on 21 problems, worse on 12, of 200)`."""
        return (f"{self.points:+.1f} points ({self.confidence:.0%} CI {self.low:+.1f} to {self.high:+.1f}; "
                f"better on {self.a_better} problem{'' if self.a_better == 1 else 's'}, "
                f"worse on {self.b_better}, of {self.problems})")


def correct_by_problem(records: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
    """Each record's problem id -> whether its answer was right."""
    return {str(r["id"]): bool(r["correct"]) for r in records}


def paired_difference(a, b, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                      seed: int = 0) -> PairedDifference | None:
    """A's accuracy minus B's on the problems both have, with its bootstrap interval.

    `a`, `b`: `correct_by_problem` mappings, one per seed (a list of them) or a single one.
    None when they share no problem."""
    per_a, per_b = _shares(a), _shares(b)
    shared = sorted(per_a.keys() & per_b.keys())
    if not shared:
        return None
    diff = np.array([per_a[p] - per_b[p] for p in shared])
    low, high = _interval(diff, confidence, resamples, seed)
    return PairedDifference(100 * float(diff.mean()), 100 * low, 100 * high, len(shared), int((diff > 0).sum()),
                            int((diff < 0).sum()), confidence)


def accuracy_interval(outcomes, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                      seed: int = 0) -> tuple[float, float]:
    """The bootstrap interval of one run's accuracy (a fraction) over its problems, each
    problem its share of right answers over the seeds (`outcomes` as `paired_difference`
    takes them): how far another draw of as many problems could move it."""
    return _interval(np.array(list(_shares(outcomes).values())), confidence, resamples, seed)


def _interval(values: np.ndarray, confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (one per problem)."""
    if np.all(values == values[0]):  # nothing to resample: every problem alike
        return float(values[0]), float(values[0])
    from scipy.stats import bootstrap

    ci = bootstrap((values,), np.mean, confidence_level=confidence, n_resamples=resamples, method="percentile",
                   rng=np.random.default_rng(seed)).confidence_interval
    return float(ci.low), float(ci.high)


def _shares(runs) -> dict[str, float]:
    """problem id -> share of the runs (seeds) that searched it and got it right."""
    runs = [runs] if isinstance(runs, Mapping) else list(runs)
    right: dict[str, list[bool]] = {}
    for run in runs:
        for problem, ok in run.items():
            right.setdefault(problem, []).append(bool(ok))
    return {p: sum(oks) / len(oks) for p, oks in right.items()}


def compare_lines(base: tuple[str, Sequence[Mapping[str, Any]]],
                  others: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> list[str]:
    """`ets compare`: per other run, its accuracy and KV size against the base run's on the
    problems both searched, as one line each (name, records pairs; records as `ets run`
    writes them). Raises ValueError naming the runs when two share no problem."""
    base_name, base_records = base
    base_by = {str(r["id"]): r for r in base_records}
    lines = []
    for name, records in others:
        by = {str(r["id"]): r for r in records}
        shared = sorted(base_by.keys() & by.keys())
        if not shared:
            raise ValueError(f"{name} and {base_name} share no problem: compare runs over the same dataset")
        d = paired_difference(correct_by_problem([by[p] for p in shared]),
                              correct_by_problem([base_by[p] for p in shared]))
        acc = sum(by[p]["correct"] for p in shared) / len(shared)
        base_acc = sum(base_by[p]["correct"] for p in shared) / len(shared)
        kv = sum(by[p]["kv_size"] for p in shared)
        base_kv = sum(base_by[p]["kv_size"] for p in shared)
        ratio = size_change(base_kv, kv)
        lines.append(f"{name} vs {base_name}: accuracy {acc:.1%} vs {base_acc:.1%}, {d.text()}; "
                     f"KV size/problem {kv / len(shared):,.0f} vs {base_kv / len(shared):,.0f} ({ratio})")
    return lines


def size_change(base: float | None, other: float | None) -> str:
    """`other` against `base` as "1.52x smaller" or "1.14x larger" ("n/a" when either is
    unknown or 0): a ratio below 1 read as "0.88x smaller" says the opposite of what it means."""
    if not base or not other:
        return "n/a"
    return f"{base / other:.2f}x smaller" if base >= other else f"{other / base:.2f}x larger"
