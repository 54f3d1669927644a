"""`search.compat: ets_code`: the ETS public code's selection rules, hand-worked on fixed
score sequences (docs/FIDELITY.md), beside the project's default on the same frontiers."""

from __future__ import annotations

import math

import pytest

import ets.strategies as search
from ets.config import SearchConfig
from ets.tree import SearchTree
from ets.config import ConfigError
from ets.strategies.compat import earlier_first, later_first, reference_allocate, reference_rank
from ets.strategies.rebase import allocate
from tests.helpers import add_children, frontier, tree_with_children


def strategy(method: str, compat: str = "ets_code", **kw):
    return search.build(SearchConfig(method=method, compat=compat, **kw))


# ------------------------------------------------------------------ shared pieces

def test_the_reference_ranks_ties_later_first():
    scores = [0.5, 0.9, 0.5, 0.1, 0.9]
    assert later_first(scores) == [4, 1, 2, 0, 3]     # ascending sort, reversed
    assert earlier_first(scores) == [1, 4, 0, 2, 3]   # descending stable sort (the ETS first pass)


def test_reference_allocate_tie_gives_the_extra_child_to_the_later_candidate():
    # Two equal scores, 3 children: the first ranked gets ceil(3 * 1/2) = 2, the other 1.
    assert allocate([0.5, 0.5], 3, 0.2) == [2, 1]            # the project: the earlier one
    assert reference_allocate([0.5, 0.5], 3, 0.2) == [1, 2]  # the ETS code: the later one
    assert reference_allocate([0.5, 0.5], 3, 0.2, ties="earlier") == [2, 1]


def test_reference_allocate_can_hand_out_one_child_more_than_the_width():
    # w = exp(0.1 / 0.2) in float32. The later candidate gets ceil(11 w / 2w) = ceil(5.5) = 6;
    # 5 are left, and 5 * w / w in float32 is 5.0000005, whose ceiling is 6: 12 children of 11.
    assert allocate([0.1, 0.1], 11, 0.2) == [6, 5]
    assert reference_allocate([0.1, 0.1], 11, 0.2) == [6, 6]


def test_reference_allocate_agrees_with_rebase_where_float32_does_not_bite():
    scores = [0.9, 0.7, 0.3, 0.05]
    assert reference_allocate(scores, 16, 0.2) == allocate(scores, 16, 0.2) == [12, 4, 0, 0]


def test_reference_allocate_gives_pruned_leaves_nothing():
    assert reference_allocate([0.6, -math.inf, 0.5], 8, 0.2, scale_first=True) == [5, 0, 3]


def test_the_final_pass_ranks_by_s_over_t_where_scores_one_ulp_apart_tie():
    up = math.nextafter(0.9, 1.0)
    assert 0.9 / 0.2 == up / 0.2 == 4.5
    assert reference_rank([up, 0.9], 0.2) == [0, 1]                      # by s: the larger first
    assert reference_rank([up, 0.9], 0.2, scale_first=True) == [1, 0]    # by s/T: a tie, the later first
    assert reference_allocate([up, 0.0, 0.9], 3, 0.2, scale_first=True) == [1, 0, 2]


def test_rebase_without_its_guard_hands_out_more_at_a_tiny_temperature():
    # T = 0.02: the float32 weights are 5.8e19, 2.1e19, 1.3e9 and 2981. The first two shares
    # are ceil(10.97) = 11 and ceil(4.000001) = 5 (one over already); the sum then left has
    # cancelled to -4.4e12, and each later share is a tiny ratio of two negatives: ceil 1.
    scores = [0.89, 0.42, 0.16, 0.91]
    assert reference_allocate(scores, 15, 0.02, guarded=False) == [5, 1, 1, 11]   # 18 children for 15
    assert reference_allocate(scores, 15, 0.02) == [5, 0, 0, 11]                  # the ETS passes' guard
    tree = tree_with_children(scores)
    a, b, c, d = tree.root.children
    alloc = strategy("rebase", width=15, softmax_temperature=0.02).select(frontier(tree, [a, b, c, d], 15))
    assert list(alloc.items()) == [(d.id, 11), (a.id, 5), (b.id, 1), (c.id, 1)]   # in the code's ranking order


def test_a_share_that_is_not_a_number_is_an_error_as_in_the_code():
    # T = 0.05: exp(20) absorbs the two exp(0) in the float32 sum, so after the best
    # candidate the sum is 0: the next share is 0 * 1 / 0, which the code's ceil raises on.
    with pytest.raises(ConfigError, match="softmax_temperature 0.05: under compat=ets_code"):
        reference_allocate([0.0, 0.0, 1.0], 3, 0.05, guarded=False)
    assert reference_allocate([0.0, 0.0, 1.0], 3, 0.05) == [0, 0, 3]   # guarded: the sum is not positive, stop
    # T = 0.01: exp(100) overflows float32, inf / inf; the guard does not help there
    with pytest.raises(ConfigError, match="softmax_temperature 0.01"):
        reference_allocate([1.0], 4, 0.01, scale_first=True)


# ------------------------------------------------------------------ the root

@pytest.mark.parametrize("method, code_root", [("rebase", 16), ("ets", 16), ("beam", 15), ("dvts", 15)])
def test_the_root_is_selected_as_the_code_selects_it(method, code_root):
    # REBASE and ETS select the root, scored 1.0, alone: ceil(float32(15 exp(5)) / exp(5)) =
    # ceil(15.000001) = 16. Beam search and DVTS give it the width.
    assert strategy(method, width=15).root_children(15) == code_root
    assert strategy(method, compat="project", width=15).root_children(15) == 15
    assert strategy(method, width=16).root_children(16) == 16


# ------------------------------------------------------------------ beam search

def test_beam_keeps_ceil_sqrt_of_the_remaining_width():
    # W = 16 and 7 trajectories done: the project keeps ceil(sqrt(16)) = 4 beams of
    # ceil(9/4) = 3 children; the ETS code keeps ceil(sqrt(9)) = 3 beams of ceil(9/3) = 3.
    tree = tree_with_children([0.9, 0.8, 0.7, 0.6, 0.1])
    ids = [c.id for c in tree.root.children]
    f = search.Frontier(tree, tree.root.children, [], 9, 16, 1)
    assert strategy("beam", compat="project", width=16).select(f) == {ids[0]: 3, ids[1]: 3, ids[2]: 3, ids[3]: 3}
    assert strategy("beam", width=16).select(f) == {ids[0]: 3, ids[1]: 3, ids[2]: 3}


def test_beam_tie_at_the_cut_keeps_the_later_candidate():
    tree = tree_with_children([0.9, 0.5, 0.5, 0.1])
    c0, c1, c2, _ = tree.root.children
    f = frontier(tree, tree.root.children, 4)                       # keep ceil(sqrt(4)) = 2
    assert strategy("beam", compat="project").select(f) == {c0.id: 2, c1.id: 2}
    assert strategy("beam").select(f) == {c0.id: 2, c2.id: 2}


# ------------------------------------------------------------------ REBASE

def test_rebase_tie_and_overshoot_in_a_frontier():
    tree = tree_with_children([0.5, 0.5])
    a, b = tree.root.children
    assert strategy("rebase", compat="project", width=3).select(frontier(tree, [a, b], 3)) == {a.id: 2, b.id: 1}
    assert strategy("rebase", width=3).select(frontier(tree, [a, b], 3)) == {a.id: 1, b.id: 2}
    tree = tree_with_children([0.1, 0.1])
    a, b = tree.root.children
    assert strategy("rebase", width=11).select(frontier(tree, [a, b], 11)) == {a.id: 6, b.id: 6}


def test_rebase_lists_its_allocation_in_the_codes_ranking_order():
    tree = tree_with_children([0.5, 0.6, 0.5, 0.1])
    a, b, c, _ = tree.root.children
    alloc = strategy("rebase", width=8).select(frontier(tree, tree.root.children, 8))
    assert list(alloc.items()) == [(b.id, 4), (c.id, 2), (a.id, 2)]   # best first, the later of a tie first
    project = strategy("rebase", compat="project", width=8).select(frontier(tree, tree.root.children, 8))
    assert list(project.items()) == [(a.id, 2), (b.id, 4), (c.id, 2)]  # the project: candidate order


# ------------------------------------------------------------------ DVTS

class Search:
    """The search loop driven by hand: each round the scripted children of
    every allocated node (score, terminal?) are added, the terminal ones complete, and the
    strategy allocates the next round from the rest."""

    def __init__(self, method: str, width: int, compat: str, **kw):
        self.tree = SearchTree("Q", [1, 2, 3])
        self.strategy = strategy(method, compat=compat, width=width, **kw)
        self.width, self.remaining = width, width
        self.completed, self.alloc, self.depth = [], {0: width}, 0
        self.allocations = []

    def round(self, script):
        """`script`: {parent id: [(score, terminal), ...]}, one entry per child allocated."""
        assert {k: len(v) for k, v in script.items()} == self.alloc, "the script must follow the allocation"
        self.depth += 1
        candidates = []
        for parent_id, children in script.items():
            for score, terminal in children:
                child = self.tree.add_child(self.tree.nodes[parent_id], f"s{len(self.tree)}", [9, 9], terminal)
                child.score = score
                if terminal:
                    self.completed.append(child)
                    self.remaining -= 1
                else:
                    candidates.append(child)
        if self.remaining <= 0 or not candidates:
            self.alloc = {}
        else:
            f = search.Frontier(self.tree, candidates, list(self.completed), self.remaining, self.width, self.depth)
            self.alloc = {k: n for k, n in self.strategy.select(f).items() if n > 0}
        self.allocations.append(dict(self.alloc))
        return self.alloc


def test_dvts_subtree_that_completes_early_reference_vs_project():
    """W = 4, S = ceil(sqrt(4)) = 2 subtrees of width 2. The root's children are
    a (0.9), b (0.2, completes at once), c (0.5), d (0.4): nodes 1-4."""
    root_children = {0: [(0.9, False), (0.2, True), (0.5, False), (0.4, False)]}

    # The project: a, b | c, d are the two subtrees; b's completion takes one unit of
    # subtree 0's width, so a gets 1 and c (the better of c, d) 2.
    project = Search("dvts", 4, "project")
    assert project.round(root_children) == {1: 1, 3: 2}

    # The ETS code splits only the survivors a, c, d: groups [a, c] and [d], each of width 2
    # (b's completion shrinks nothing).
    ref = Search("dvts", 4, "ets_code")
    assert ref.round(root_children) == {1: 2, 4: 2}
    # Depth 2: a's children 5 (0.3), 6 (0.6); d's 7 (completes), 8 (0.1). remaining = 4 - 2 = 2,
    # yet each subtree's best child still gets the subtree's full width 2.
    assert ref.round({1: [(0.3, False), (0.6, False)], 4: [(0.7, True), (0.1, False)]}) == {6: 2, 8: 2}
    assert ref.remaining == 2
    # Depth 3: all four children complete: 6 trajectories for a width of 4.
    assert ref.round({6: [(0.5, True), (0.5, True)], 8: [(0.5, True), (0.5, True)]}) == {}
    assert len(ref.completed) == 6 and ref.remaining == -2

    # The project, same depth 2: a's child 5 (0.3), c's children 6 (completes) and 7 (0.1).
    # Each subtree has done one (b, 6): each best child gets 2 - 1 = 1, and the search
    # finishes exactly W = 4.
    assert project.round({1: [(0.3, False)], 3: [(0.7, True), (0.1, False)]}) == {5: 1, 7: 1}
    assert project.round({5: [(0.5, True)], 7: [(0.5, True)]}) == {}
    assert len(project.completed) == 4 and project.remaining == 0


def test_dvts_reference_never_shrinks_with_fewer_survivors_than_subtrees():
    """W = 9, S = 3 (width 3 each). 7 of the root's 9 children complete at once: the ETS code
    cycles the 2 survivors over the 3 groups, so the first leads two subtrees (width 6), and
    from depth 2 on that subtree's best child gets 3, not 6."""
    first = {0: [(0.8, False), (0.3, False)] + [(0.5, True)] * 7}
    ref = Search("dvts", 9, "ets_code")
    assert ref.round(first) == {1: 6, 2: 3}
    # Children 10-15 of node 1 (15 the best), 16-18 of node 2 (tied: the first, 16, leads).
    assert ref.round({1: [(0.1, False)] * 5 + [(0.2, False)], 2: [(0.4, False)] * 3}) == {15: 3, 16: 3}
    # The project splits all nine children [1-3] [4-6] [7-9]: only subtree 0 is alive, led
    # by 1, of width 3 minus its one completed child (3).
    assert Search("dvts", 9, "project").round(first) == {1: 2}


def test_dvts_project_default_is_unchanged():
    """The default: every child of the root is split, and completions shrink their own
    subtree."""
    tree = tree_with_children([0.9, 0.2, 0.5, 0.4])
    a, b, c, d = tree.root.children
    b.terminal = True
    f = frontier(tree, [a, c, d], 4, completed=[b], depth=1)
    assert strategy("dvts", compat="project").select(f) == {a.id: 1, c.id: 2}
    grand = add_children(tree, a, [0.3, 0.6])
    f2 = frontier(tree, grand, 4, completed=[b], depth=2)
    assert strategy("dvts", compat="project").select(f2) == {grand[1].id: 1}


# ------------------------------------------------------------------ ETS

@pytest.mark.parametrize("compat", ["project", "ets_code"])
def test_ets_with_no_cost_and_no_coverage_is_rebase(compat):
    """lambda_c = lambda_s = 0 keeps every leaf; the final pass is then each mode's REBASE
    (the ETS code's: later first on ties)."""
    tree = tree_with_children([0.5, 0.5, 0.2])
    cands = tree.root.children
    kw = dict(width=5, lambda_c=0.0, lambda_s=0.0, compat=compat)
    ets_alloc = search.build(SearchConfig(method="ets", **kw)).select(frontier(tree, cands, 5))
    rebase_alloc = search.build(SearchConfig(method="rebase", **kw)).select(frontier(tree, cands, 5))
    assert ets_alloc == rebase_alloc
    first, second = cands[0].id, cands[1].id
    assert ets_alloc[first if compat == "project" else second] == 3


def test_ets_runs_its_final_pass_on_a_lone_leaf_under_the_ets_code():
    # One leaf of 0.06 and 13 children to hand out: the first pass (exp(float32(0.06) / T)
    # in float32) gives 13; the final pass (float32 of 0.06 / T, then exp) rounds its share
    # to 13.000001, so the code's one leaf gets 14.
    assert reference_allocate([0.06], 13, 0.2, ties="earlier") == [13]
    assert reference_allocate([0.06], 13, 0.2, scale_first=True) == [14]
    tree = tree_with_children([0.06])
    (leaf,) = tree.root.children
    assert strategy("ets", width=13).select(frontier(tree, [leaf], 13)) == {leaf.id: 14}
    assert strategy("ets", compat="project", width=13).select(frontier(tree, [leaf], 13)) == {leaf.id: 13}
