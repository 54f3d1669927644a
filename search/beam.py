"""Beam search, as in the ETS and REBASE code and in search-and-learn.

keep = fixed_width if set else ceil(sqrt(W)). The root gets W children (the controller's
first expansion); afterwards the `keep` best candidates by score each get
ceil(remaining / keep) children and the rest are pruned. Ties keep creation order.

Beams are sized from the width W, as search-and-learn sizes them; the ETS public code
takes sqrt of the *remaining* width instead. The two agree until the first trajectory
completes. With `compat: ets_code`: keep = fixed_width if set else ceil(sqrt(remaining)),
and ties rank the later candidate first (search/compat.py). In both modes the kept beams
are expanded best first, so their children are made in that order, as the code makes them.

search-and-learn's options (docs/search_and_learn.md):
- `filter_duplicates`: a candidate whose whole trajectory text (every step so far) an
  earlier candidate has is not kept; the first of them stands for it.
- `sort_completed`: when the search ends with more than W completed trajectories (beam
  rounds up), the W best by `aggregation` of their step scores answer, ties in completion
  order; without it every completed trajectory answers.
- `lookahead`: candidates are ranked by their lookahead score (search.base.selection_score).
"""

from __future__ import annotations

import math

from ets.answers.aggregate import aggregate
from ets.tree import Node
from ets.strategies.base import Allocation, Frontier, Strategy, register, selection_score
from ets.strategies.compat import later_first


def beams_kept(width: int, fixed_width: int | None) -> int:
    """Beams kept by beam search, and subtrees grown by DVTS: `fixed_width`, else ceil(sqrt(W))."""
    return fixed_width if fixed_width else math.ceil(math.sqrt(width))


@register("beam")
class Beam(Strategy):
    may_exceed_width = True  # each kept beam's share is rounded up

    def select(self, frontier: Frontier) -> Allocation:
        cands = distinct(frontier.candidates) if self.config.filter_duplicates else frontier.candidates
        if self.config.ets_code:
            keep = beams_kept(frontier.remaining, self.config.fixed_width)
            scores = [selection_score(c) for c in cands]
            ranked = [cands[i] for i in later_first(scores)]
        else:
            keep = beams_kept(frontier.width, self.config.fixed_width)
            ranked = sorted(cands, key=lambda c: -selection_score(c))  # stable: ties in creation order
        per_beam = math.ceil(frontier.remaining / keep)
        return {c.id: per_beam for c in ranked[:keep]}

    def answering(self, completed: list[Node], width: int) -> list[Node]:
        if not self.config.sort_completed or len(completed) <= width:
            return completed
        by_score = sorted(completed, key=lambda n: -aggregate(n.step_scores(), self.config.aggregation))
        return by_score[:width]  # stable: ties in completion order


def distinct(candidates: list[Node]) -> list[Node]:
    """The candidates whose trajectory text (all their steps) no earlier candidate has."""
    seen: set[str] = set()
    out = []
    for c in candidates:
        text = "".join(c.step_texts())
        if text not in seen:
            seen.add(text)
            out.append(c)
    return out
