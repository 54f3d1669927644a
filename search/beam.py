"""Beam search, as in the ETS and REBASE code and in search-and-learn.

keep = fixed_width if set else ceil(sqrt(W)). The root gets W children (the controller's
first expansion); afterwards the `keep` best candidates by score each get
ceil(remaining / keep) children and the rest are pruned. Ties keep creation order.

Note: ALGORITHMS.md takes sqrt of the width W; the ETS public code passes the *remaining*
width to this function and takes sqrt of that. We follow ALGORITHMS.md; the two agree
until the first trajectory completes. With `compat: ets_code`: keep = fixed_width if set
else ceil(sqrt(remaining)), and ties rank the later candidate first (search/compat.py).
"""

from __future__ import annotations

import math

from search.base import Allocation, Frontier, Strategy, register
from search.compat import later_first


def beams_kept(width: int, fixed_width: int | None) -> int:
    """Beams kept by beam search, and subtrees grown by DVTS: `fixed_width`, else ceil(sqrt(W))."""
    return fixed_width if fixed_width else math.ceil(math.sqrt(width))


@register("beam")
class Beam(Strategy):
    def select(self, frontier: Frontier) -> Allocation:
        cands = frontier.candidates
        if self.config.ets_code:
            keep = beams_kept(frontier.remaining, self.config.fixed_width)
            ranked = [cands[i] for i in later_first(frontier.scores())]
        else:
            keep = beams_kept(frontier.width, self.config.fixed_width)
            ranked = sorted(cands, key=lambda c: -c.score)  # stable: ties in creation order
        per_beam = math.ceil(frontier.remaining / keep)
        return {c.id: per_beam for c in ranked[:keep]}
