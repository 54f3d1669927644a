"""Best-of-N: W independent samples; after the root, every node gets exactly one child.

Nothing is pruned, so the W trajectories share only the prompt. The answer is chosen at
the end by the aggregation and vote (ets/answers/aggregate.py), not here.
"""

from __future__ import annotations

from ets.strategies.base import Allocation, Frontier, Strategy, register


@register("best_of_n")
class BestOfN(Strategy):
    def select(self, frontier: Frontier) -> Allocation:
        return {c.id: 1 for c in frontier.candidates}
