"""DVTS (diverse verifier tree search): S independent greedy subtrees.

S = fixed_width if set else ceil(sqrt(W)). At depth 1 the W children of the root (in
creation order, completed ones included) are split into S contiguous groups, the first
`W mod S` groups one longer; each group is a subtree with its own width
W // S, led by its best child. From then on each subtree keeps only its single best child
per parent and gives it the subtree's remaining width: W // S minus the trajectories
completed inside that subtree.

The ETS public code departs in two ways, reproduced with `compat: ets_code`: at depth 1 it
splits only the root's *surviving* children (the completed ones are not in its groups),
and a subtree's width never shrinks (its completed nodes carry no subtree id), so every
kept node gets W // S each round and the search can finish more than W trajectories.

A node's subtree is the label of its depth-1 ancestor (`tags["subtree"]`); a kept node
carries its subtree's initial width in `tags["subtree_width"]`, inherited by its children.

With `lookahead`, a subtree's best child is the best by lookahead score
(search.base.selection_score), as search-and-learn's DVTS picks it.

When fewer than S children are split (by default only possible with fixed_width > W),
groups are cycled over them as in the public code; a child leading several subtrees gets
the sum of their widths, and its descendants are counted in the first of them (in the
ETS code they go on as one subtree of width W // S).
"""

from __future__ import annotations

from collections import Counter

from ets.tree import Node
from ets.strategies.base import Allocation, Frontier, Strategy, register, selection_score
from ets.strategies.beam import beams_kept

SUBTREE = "subtree"
SUBTREE_WIDTH = "subtree_width"


def contiguous_groups(n_items: int, n_groups: int) -> list[list[int]]:
    """Indices 0..n_items-1 in n_groups contiguous runs, the first (n mod g) one longer;
    cycled when there are fewer items than groups."""
    if n_items < n_groups:
        return [[g % n_items] for g in range(n_groups)]
    size, extra = divmod(n_items, n_groups)
    groups, start = [], 0
    for g in range(n_groups):
        end = start + size + (1 if g < extra else 0)
        groups.append(list(range(start, end)))
        start = end
    return groups


def subtree_of(node: Node):
    """The subtree label of `node`: the one given to its depth-1 ancestor."""
    while node.depth > 1:
        node = node.parent
    return node.tags.get(SUBTREE)


@register("dvts")
class DVTS(Strategy):
    def select(self, frontier: Frontier) -> Allocation:
        n_subtrees = beams_kept(frontier.width, self.config.fixed_width)  # beam's rule: S = keep
        per_subtree = frontier.width // n_subtrees
        ets_code = self.config.ets_code
        if frontier.depth == 1:
            # every child of the root is split; the ETS code splits its surviving ones
            children = frontier.candidates if ets_code else frontier.tree.root.children
            leaders = self._split_root(frontier, children, n_subtrees, per_subtree)
        else:
            leaders = self._best_per_parent(frontier, per_subtree if ets_code else None)
        # the ETS code never shrinks a subtree's width
        done = Counter() if ets_code else Counter(subtree_of(n) for n in frontier.completed)
        alloc: Allocation = {}
        for c in leaders:
            width = c.tags[SUBTREE_WIDTH] - done[subtree_of(c)]
            if width > 0:
                alloc[c.id] = width
        return alloc

    def listed_nodes(self, frontier: Frontier) -> list[Node]:
        """Under the ETS code, at depth 1 with fewer survivors than subtrees, the survivors
        cycled over the subtrees: its KV figure counts each once per subtree it leads."""
        n_subtrees = beams_kept(frontier.width, self.config.fixed_width)
        cands = frontier.candidates
        if self.config.ets_code and frontier.depth == 1 and len(cands) < n_subtrees:
            return [cands[g % len(cands)] for g in range(n_subtrees)]
        return cands

    @staticmethod
    def _split_root(frontier: Frontier, children: list[Node], n_subtrees: int, per_subtree: int) -> list[Node]:
        alive_ids = {c.id for c in frontier.candidates}
        led: Counter[int] = Counter()
        leaders: dict[int, Node] = {}
        for g, members in enumerate(contiguous_groups(len(children), n_subtrees)):
            for i in members:
                children[i].tags.setdefault(SUBTREE, g)
            alive = [children[i] for i in members if children[i].id in alive_ids]
            if alive:  # otherwise every member completed and this subtree is done
                leader = max(alive, key=selection_score)  # first best on ties
                led[leader.id] += 1
                leaders[leader.id] = leader
        for node_id, leader in leaders.items():
            leader.tags[SUBTREE_WIDTH] = per_subtree * led[node_id]
        return list(leaders.values())

    @staticmethod
    def _best_per_parent(frontier: Frontier, width: int | None) -> list[Node]:
        """The best child of each parent; each carries `width`, or its parent's width if None."""
        best: dict[int, Node] = {}
        for c in frontier.candidates:
            c.tags[SUBTREE_WIDTH] = c.parent.tags[SUBTREE_WIDTH] if width is None else width
            cur = best.get(c.parent.id)
            if cur is None or selection_score(c) > selection_score(cur):
                best[c.parent.id] = c
        return list(best.values())
