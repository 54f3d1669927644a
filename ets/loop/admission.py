"""Admission of problems under the policy's KV capacity: many searches on one pool.

The capacity is the policy backend's own figure (`policy.memory().capacity_tokens`: the
engine's pool; None for a backend that keeps nothing between calls, which admits up to
the loop's concurrency). It is not ETS's `SearchConfig.kv_budget`, a cap on the tokens one
search keeps.

The throughput of a search method at a fixed KV capacity is decided here: a method that
keeps a smaller tree leaves room for more problems in flight, so more work shares every
batched forward. What a search locks in the pool during one round is

    footprint = KV of the paths it keeps (the paper's metric over its allocation)
                + children it generates this round x mean step length

(the children stay locked until its strategy has selected among them). A footprint grows
as the search goes deeper, so admission reserves for each search its *peak*, not its
footprint today: the larger of its current footprint and its expected peak. Before any
search has finished, that is the worst case: the prompt plus W paths of max_tokens each (a
best-of-N search does reach that); then the peak that PEAK_QUANTILE of the n finished
searches stayed within, weighed n to 1 against the worst case (`expected_peak`). A new
problem is admitted only while the reservations of the active searches plus its own fit
the capacity.

(Reserving only the current footprint let a wave of young searches in together: on the
demo task at W=64 under a 16k-token budget, REBASE ran 10 searches peaking near 4.1k
tokens each, and the engine preempted 81k times. A prior of W steps instead of W paths
let 64 best-of-N searches start in a 262k-token pool that holds about 27 of them.
Reserving the *mean* peak of the searches finished so far let a wave of searches in on
the first, small ones, which then outgrew the pool together: REBASE at W=64 in a 32k-token
pool had 4,914 sequences preempted and computed 1.42 tokens per token generated, and
finished problems slower than in a 16k-token pool; scripts/bench_budget.py measures it.)

The mean step length is measured as the run goes (it starts at half of max_step_tokens).
At least one problem is always in flight, so a capacity smaller than one search slows the
run (the engine evicts and recomputes) but never stops it.
"""

from __future__ import annotations

import bisect
import math
from typing import Iterable

from ets.tree import Node, kv_size

# A search is reserved the peak footprint that this share of the finished searches stayed within.
PEAK_QUANTILE = 0.9


class KVAdmission:
    def __init__(self, capacity_tokens: int | None, width: int, max_step_tokens: int, max_tokens: int):
        self.capacity_tokens = capacity_tokens
        self.width = width
        self.max_tokens = max_tokens
        self._steps = 0
        self._step_tokens = 0
        self._prior = max(1, max_step_tokens // 2)
        self._peaks: list[float] = []  # sorted: expected_peak reads a rank every round

    @property
    def mean_step_tokens(self) -> float:
        return self._step_tokens / self._steps if self._steps else self._prior

    def observe(self, new_nodes: Iterable[Node]) -> None:
        for node in new_nodes:
            self._steps += 1
            self._step_tokens += node.num_tokens

    def footprint(self, kept: list[Node], children: int) -> float:
        """What a search locks next round: the paths it keeps and the children it grows."""
        return kv_size(kept) + children * self.mean_step_tokens

    def finished(self, peak_footprint: float) -> None:
        """Record the largest footprint a finished search had."""
        bisect.insort(self._peaks, peak_footprint)

    @property
    def mean_peak(self) -> float | None:
        """The mean peak footprint of the finished searches (None before any)."""
        return sum(self._peaks) / len(self._peaks) if self._peaks else None

    def expected_peak(self, prompt_tokens: int) -> float:
        """The peak a search is reserved: PEAK_QUANTILE of the n finished searches' peaks
        (nearest rank), weighed n to 1 against the worst case (the prompt plus W paths of
        max_tokens), which is all there is before any has finished. The first searches to
        finish are the small ones, so their peaks alone run low: on the demo at W=64 in a
        32k-token pool, REBASE's first search peaked at 6.0k tokens, five were let in on it,
        grew together to 47k, and the engine preempted 4,900 sequences."""
        worst = prompt_tokens + self.width * self.max_tokens
        if not self._peaks:
            return worst
        n = len(self._peaks)
        return (n * self._peaks[math.ceil(PEAK_QUANTILE * n) - 1] + worst) / (n + 1)

    def reservation(self, footprint: float, prompt_tokens: int) -> float:
        """The tokens held back for a search whose footprint is `footprint` now."""
        return max(footprint, self.expected_peak(prompt_tokens))

    def admits(self, reserved: float, prompt_tokens: int, n_active: int) -> bool:
        """Whether a new problem fits beside searches holding `reserved` tokens."""
        if self.capacity_tokens is None or n_active == 0:
            return True
        return reserved + self.reservation(0.0, prompt_tokens) <= self.capacity_tokens
