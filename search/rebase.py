"""REBASE (Wu et al., arXiv 2408.00724): spend the width greedily from the best candidate.

Candidates sorted by score, descending; with budget B = remaining width and temperature T:

    n_i = ceil(B * exp(s_i/T) / sum_{j >= i} exp(s_j/T));   B -= n_i

Every candidate with non-negligible weight survives, so the tree stays wide and shares
little KV cache; ETS (search/ets.py) reuses `allocate` on the leaves its program keeps.

With `compat: ets_code` the ETS code's loop runs instead (`search.compat.reference_allocate`):
ties give the extra child to the later candidate, its float32 sums can hand out more
children than the remaining width (it has no guard on the sum), the children are made in
its ranking's order, and the root, scored 1.0, is selected like any frontier (one child
over the width at W = 15, 29, 30, ...).
"""

from __future__ import annotations

import math
from typing import Sequence

from ets.strategies.base import Allocation, Frontier, Strategy, register
from ets.strategies.compat import ROOT_SCORE, in_code_order, later_first, reference_allocate

# ceil() of a ratio that is an integer in exact arithmetic can land a hair above it in
# floating point (3.0000000000000004 -> 4); this slack absorbs that, nothing more.
_CEIL_SLACK = 1e-9


def allocate(scores: Sequence[float], width: int, temperature: float) -> list[int]:
    """Children per candidate, in the order of `scores`; sums to `width`.

    A score of -inf gets 0 children (ETS marks pruned leaves so). At least one score
    must be finite when `width > 0`.
    """
    if width < 0:
        raise ValueError(f"width must be >= 0, got {width}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    n = len(scores)
    counts = [0] * n
    finite = [s for s in scores if s != -math.inf]
    if width == 0 or n == 0:
        return counts
    if not finite:
        raise ValueError("allocate needs at least one candidate with a finite score")
    top = max(finite)
    # Stable order: ties keep their given order, as Python's sort does.
    order = sorted(range(n), key=lambda i: -scores[i])
    weights = [math.exp((scores[i] - top) / temperature) if scores[i] != -math.inf else 0.0 for i in order]
    # suffix[k] = sum of weights[k:], so the denominator of candidate k is suffix[k].
    suffix = [0.0] * (n + 1)
    for k in range(n - 1, -1, -1):
        suffix[k] = suffix[k + 1] + weights[k]
    budget = width
    for k, i in enumerate(order):
        if budget <= 0 or weights[k] == 0.0:
            break
        share = budget * weights[k] / suffix[k]
        counts[i] = min(budget, math.ceil(share - _CEIL_SLACK))
        budget -= counts[i]
    return counts


@register("rebase")
class Rebase(Strategy):
    def select(self, frontier: Frontier) -> Allocation:
        scores, temperature = frontier.scores(), self.config.softmax_temperature
        if self.config.ets_code:
            counts = reference_allocate(scores, frontier.remaining, temperature, guarded=False)
            return in_code_order(frontier.candidates, counts, later_first(scores))
        counts = allocate(scores, frontier.remaining, temperature)
        return {c.id: k for c, k in zip(frontier.candidates, counts) if k > 0}

    def root_children(self, width: int) -> int:
        if self.config.ets_code:
            return reference_allocate([ROOT_SCORE], width, self.config.softmax_temperature, guarded=False)[0]
        return width
