"""Beam search, as in the ETS and REBASE code and in search-and-learn.

keep = fixed_width if set else ceil(sqrt(W)). The root gets W children (the controller's
first expansion); afterwards the `keep` best candidates by score each get
ceil(remaining / keep) children and the rest are pruned. Ties keep creation order.

Note: ALGORITHMS.md takes sqrt of the width W; the ETS public code passes the *remaining*
width to this function and takes sqrt of that. We follow ALGORITHMS.md; the two agree
until the first trajectory completes.
"""

from __future__ import annotations

import math

from search.base import Allocation, Frontier, Strategy, register


def beams_kept(width: int, fixed_width: int | None) -> int:
    """Beams kept by beam search, and subtrees grown by DVTS: `fixed_width`, else ceil(sqrt(W))."""
    return fixed_width if fixed_width else math.ceil(math.sqrt(width))


@register("beam")
class Beam(Strategy):
    def select(self, frontier: Frontier) -> Allocation:
        keep = beams_kept(frontier.width, self.config.fixed_width)
        per_beam = math.ceil(frontier.remaining / keep)
        ranked = sorted(frontier.candidates, key=lambda c: -c.score)  # stable: ties in creation order
        return {c.id: per_beam for c in ranked[:keep]}
