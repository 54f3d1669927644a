"""Two methods' accuracies compared on the problems both searched: the difference, paired.

Every method of a sweep searches the same problems, so their accuracies are paired: a
problem that is easy is easy for both. On the demo's 24 problems the seeds moved one
method's accuracy by up to 17 points, more than the methods differed, and two means with
their own ± cannot say whether REBASE is 5 points above best-of-N or ETS within 1 point of
REBASE (the paper's claims). The difference per problem can: its mean over the problems is
the accuracy difference, and resampling the problems (a percentile bootstrap, seeded, so
the same records give the same interval) gives its confidence interval.

With several seeds a problem's outcome is its share of right answers over the seeds that
searched it, so the interval is over problems (the unit drawn from the test set), not runs.
For the same reason the sign test beside it counts problems, not (problem, seed) pairs: the
seeds of one problem are not independent draws (an easy problem is easy in every seed).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ets.app.terminal import plural

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
    # Exact two-sided sign test over the problems where the two differ: how often a
    # difference of at least this many problems arises when neither method is better.
    p_value: float

    def text(self) -> str:
        """e.g. `+4.5 points (95% CI -1.0 to +10.0; better on 21 problems, worse on 12, of 200; sign test p = 0.16)`."""
        return (f"{self.points:+.1f} points ({self.confidence:.0%} CI {self.low:+.1f} to {self.high:+.1f}; "
                f"better on {self.a_better} problem{'' if self.a_better == 1 else 's'}, "
                f"worse on {self.b_better}, of {self.problems}; sign test p = {p_text(self.p_value)})")


def p_text(p: float) -> str:
    """A p-value in two significant digits, small ones as powers of ten: 0.034, 0.19, 1, 6e-8."""
    if p >= 1e-3:
        return f"{p:.2g}"
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def correct_by_problem(records: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
    """Each record's problem id -> whether its answer was right; a problem without a ground
    truth (`correct: null`) is left out: it is neither."""
    return {str(r["id"]): bool(r["correct"]) for r in records if r["correct"] is not None}


def paired_difference(a, b, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                      seed: int = 0) -> PairedDifference | None:
    """A's accuracy minus B's on the problems both have, with its bootstrap interval.

    `a`, `b`: `correct_by_problem` mappings, one per seed (a list of them) or a single one.
    None when they share no problem."""
    by_a, by_b = _by_problem(a), _by_problem(b)
    shared = sorted(by_a.keys() & by_b.keys())
    if not shared:
        return None
    diff = np.array([np.mean(by_a[p]) - np.mean(by_b[p]) for p in shared])
    if max(len(by_a[p]) for p in shared) == max(len(by_b[p]) for p in shared) == 1:
        low, high = _interval(diff, confidence, resamples, seed)
    else:  # the problems drawn, and within each, each method's seeds (as `accuracy_interval`)
        rng, picks = np.random.default_rng(seed), None
        means = []
        for outcomes in ([by_a[p] for p in shared], [by_b[p] for p in shared]):
            picks, drawn = _seed_resampled(outcomes, resamples, rng, picks)
            means.append(drawn)
        low, high = _percentiles(means[0] - means[1], confidence)
    a_better, b_better = int((diff > 0).sum()), int((diff < 0).sum())
    return PairedDifference(100 * float(diff.mean()), 100 * low, 100 * high, len(shared), a_better, b_better,
                            confidence, _sign_test(a_better, b_better))


def accuracy_interval(outcomes, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                      seed: int = 0) -> tuple[float, float]:
    """The interval of one run's accuracy (a fraction; `outcomes` as `paired_difference`
    takes them): how far another draw of as many problems, and of its seeds, could move it.

    One seed: Wilson's score interval of the count right, which a handful of problems all
    right or all wrong leaves wide (0 of 4: 0 to 49%), not of zero width as a bootstrap
    would. Several: a percentile bootstrap that draws the problems and, within each
    problem, its seeds, so that the seeds' spread widens it too (a bootstrap of each
    problem's share over the seeds alone leaves that out); Wilson's over the problems
    where every outcome is alike."""
    per_problem = _by_problem(outcomes)
    shares = np.array([np.mean(oks) for oks in per_problem.values()])
    seeds = max(len(oks) for oks in per_problem.values())
    if seeds == 1 or np.all(shares == shares[0]) and shares[0] in (0.0, 1.0):
        return _wilson(float(shares.sum()), len(shares), confidence)
    _, means = _seed_resampled(list(per_problem.values()), resamples, np.random.default_rng(seed))
    return _percentiles(means, confidence)


def _percentiles(means: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of bootstrap resamples' `means`."""
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def _seed_resampled(outcomes: list[list[bool]], resamples: int, rng: np.random.Generator,
                    picks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the problems drawn [resamples, problems], and each resample's accuracy): the
    problems drawn with replacement (`picks`, when given: another method's, for a paired
    difference), and within each problem as many seeds as it has, drawn among its own."""
    counts = np.array([len(oks) for oks in outcomes])
    table = np.zeros((len(counts), counts.max()))
    for i, oks in enumerate(outcomes):
        table[i, :len(oks)] = oks
    if picks is None:
        picks = rng.integers(0, len(counts), size=(resamples, len(counts)))
    means = np.empty(resamples)
    for start in range(0, resamples, 1000):  # in blocks: resamples x problems x seeds draws
        block = picks[start:start + 1000]
        draws = (rng.random((*block.shape, counts.max())) * counts[block][..., None]).astype(np.int64)
        means[start:start + len(block)] = table[block[..., None], draws].mean(axis=(1, 2))
    return picks, means


def _wilson(right: float, n: int, confidence: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion right / n."""
    from scipy.stats import norm

    z = float(norm.ppf(1 - (1 - confidence) / 2))
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # (at 0 or n right, a bound is 0 or 1 exactly: its formula leaves rounding there)
    low = 0.0 if right <= 0 else max(0.0, float(centre - half))
    return low, 1.0 if right >= n else min(1.0, float(centre + half))


def _interval(values: np.ndarray, confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (one per problem)."""
    if np.all(values == values[0]):  # nothing to resample: every problem alike
        return float(values[0]), float(values[0])
    from scipy.stats import bootstrap

    ci = bootstrap((values,), np.mean, confidence_level=confidence, n_resamples=resamples, method="percentile",
                   rng=np.random.default_rng(seed)).confidence_interval
    return float(ci.low), float(ci.high)


def _sign_test(a_better: int, b_better: int) -> float:
    """Two-sided exact binomial test of a_better against b_better at even odds (1 if no problem differs)."""
    if a_better + b_better == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(a_better, a_better + b_better).pvalue)


def _shares(runs) -> dict[str, float]:
    """problem id -> share of the runs (seeds) that searched it and got it right."""
    return {p: sum(oks) / len(oks) for p, oks in _by_problem(runs).items()}


def _by_problem(runs) -> dict[str, list[bool]]:
    """problem id -> its outcome in each run (seed) that searched it."""
    runs = [runs] if isinstance(runs, Mapping) else list(runs)
    right: dict[str, list[bool]] = {}
    for run in runs:
        for problem, ok in run.items():
            right.setdefault(problem, []).append(bool(ok))
    return right


class Comparison(NamedTuple):
    """One run against the base run of `ets compare`, on the problems both searched."""
    name: str
    base_name: str
    accuracy: float          # fractions, over the shared problems
    base_accuracy: float
    difference: PairedDifference
    kv_size: float           # KV size per problem (mean over the shared problems)
    base_kv_size: float
    ungraded: int = 0        # problems both searched that have no ground truth, left out
    # the same on the ETS code's metric (`kv_size_ref`); None where a record lacks it
    kv_size_ref: float | None = None
    base_kv_size_ref: float | None = None


def compare_runs(base: tuple[str, Sequence[Sequence[Mapping[str, Any]]]],
                 others: Sequence[tuple[str, Sequence[Sequence[Mapping[str, Any]]]]]) -> list[Comparison]:
    """`ets compare`: each other run's accuracy and KV size against the base run's on the
    problems both searched. A run is (name, its records per seed: one list of records as
    `ets run` writes them for each seed it ran with); over several seeds a problem counts
    as its share right and its mean KV size. Problems without a ground truth
    (`correct: null`) are left out and counted. Raises ValueError naming the runs when two
    share no problem with a ground truth."""
    base_name, base_runs = base
    base_right, base_kv = [correct_by_problem(r) for r in base_runs], _mean_by_problem(base_runs, "kv_size")
    base_share = _shares(base_right)
    found = []
    for name, runs in others:
        right, kv = [correct_by_problem(r) for r in runs], _mean_by_problem(runs, "kv_size")
        share = _shares(right)
        shared = sorted(base_share.keys() & share.keys())
        ungraded = len(base_kv.keys() & kv.keys()) - len(shared)  # searched by both, without a ground truth
        if not shared:
            what = "problem with a ground truth" if ungraded else "problem"
            raise ValueError(f"{name} and {base_name} share no {what}: compare runs over the same dataset")
        _check_same_problems(name, runs, base_name, base_runs, shared)
        d = paired_difference(_only(right, shared), _only(base_right, shared))
        acc, base_acc = (sum(sh[p] for p in shared) / len(shared) for sh in (share, base_share))
        kv_mean, base_kv_mean = (sum(k[p] for p in shared) / len(shared) for k in (kv, base_kv))
        refs = [_mean_by_problem(r, "kv_size_ref") for r in (runs, base_runs)]
        ref, base_ref = (None if ref is None else sum(ref[p] for p in shared) / len(shared) for ref in refs)
        found.append(Comparison(name, base_name, acc, base_acc, d, kv_mean, base_kv_mean, ungraded, ref, base_ref))
    return found


def _check_same_problems(name: str, runs, base_name: str, base_runs, ids: Sequence[str]) -> None:
    """A ValueError where an id of both runs holds another question or ground truth in each:
    two datasets that number their problems alike would otherwise pair unlike problems."""
    def problems(seeds) -> dict[str, tuple]:
        return {str(r["id"]): (r.get("question"), r.get("ground_truth")) for records in seeds for r in records}

    mine, base = problems(runs), problems(base_runs)
    for pid in ids:
        if mine[pid] != base[pid]:
            field = "question" if mine[pid][0] != base[pid][0] else "ground truth"
            raise ValueError(f"{name} and {base_name} hold different problems under id {pid!r} (their {field} "
                             f"differs): compare runs over the same dataset")


def compare_lines(comparisons: Sequence[Comparison]) -> list[str]:
    """The comparisons of `compare_runs` in full, one line each."""
    return [f"{c.name} vs {c.base_name}: accuracy {c.accuracy:.1%} vs {c.base_accuracy:.1%}, {c.difference.text()}; "
            f"KV size/problem {c.kv_size:,.0f} vs {c.base_kv_size:,.0f}: "
            f"{kv_change(c.base_kv_size, c.kv_size, c.base_kv_size_ref, c.kv_size_ref)}"
            + (f"; {plural(c.ungraded, 'shared problem')} without a ground truth left out" if c.ungraded else "")
            for c in comparisons]


def _only(runs: list[dict[str, bool]], problems: Sequence[str]) -> list[dict[str, bool]]:
    keep = set(problems)
    return [{p: ok for p, ok in run.items() if p in keep} for run in runs]


def _mean_by_problem(runs: Sequence[Sequence[Mapping[str, Any]]], key: str) -> dict[str, float] | None:
    """problem id -> the mean of `key` over the seeds' records of it; None where a record
    has no number under `key`."""
    values: dict[str, list[float]] = {}
    for records in runs:
        for r in records:
            value = r.get(key)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return None
            values.setdefault(str(r["id"]), []).append(float(value))
    return {p: sum(v) / len(v) for p, v in values.items()}


def kv_change(base: float | None, other: float | None, base_ref: float | None = None,
              other_ref: float | None = None) -> str:
    """`size_change` of the KV sizes, with the same on the ETS code's metric where both are
    known (the paper's ratios are on that metric): "1.65x smaller (1.72x on the ETS code's
    metric)", the direction said once where both metrics agree on it."""
    text = size_change(base, other)
    if base_ref is None or other_ref is None:
        return text
    ref = size_change(base_ref, other_ref)
    if base and other and (base_ref >= other_ref) == (base >= other):
        ref = ref.split(" ")[0]
    return f"{text} ({ref} on the ETS code's metric)"


def size_change(base: float | None, other: float | None) -> str:
    """`other` against `base` as "1.52x smaller" or "1.14x larger" ("n/a" when either is
    unknown or 0): a ratio below 1 read as "0.88x smaller" says the opposite of what it means."""
    if not base or not other:
        return "n/a"
    if f"{max(base, other) / min(base, other):.2f}" == "1.00":
        return "1.00x (the same)"
    return f"{base / other:.2f}x smaller" if base >= other else f"{other / base:.2f}x larger"
