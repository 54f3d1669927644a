"""Allocations of the baseline strategies, worked out by hand from docs/algorithms.md."""

import math

import pytest

from ets.config import ConfigError
from ets.strategies import available, build, canonical_name
from ets.strategies.dvts import contiguous_groups
from ets.strategies.rebase import allocate
from tests.helpers import add_children, config, frontier, tree_with_children


def test_registry_lists_known_names_on_unknown():
    with pytest.raises(ConfigError) as err:  # a user's mistake, reported as one line
        canonical_name("nope")
    for name in ("beam", "best_of_n", "dvts", "rebase"):
        assert name in str(err.value)
    assert canonical_name("beam_search") == "beam"
    assert canonical_name("softmax") == "rebase"
    assert {"beam", "best_of_n", "dvts", "rebase"} <= set(available())


def test_best_of_n_one_child_each():
    tree = tree_with_children([0.1, 0.9, 0.5])
    alloc = build(config(method="best_of_n", width=3)).select(frontier(tree, tree.root.children, 3))
    assert alloc == {1: 1, 2: 1, 3: 1}


def test_beam_keeps_ceil_sqrt_width_best():
    # W=16 -> keep 4 beams, each ceil(16/4)=4 children; best by score, ties by order.
    scores = [0.1, 0.9, 0.5, 0.7, 0.7, 0.2, 0.3, 0.05, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    tree = tree_with_children(scores)
    alloc = build(config(method="beam", width=16)).select(frontier(tree, tree.root.children, 16))
    # ids are 1-based: scores 0.9 (id 2), 0.7 (id 4), 0.7 (id 5), 0.6 (id 9)
    assert alloc == {2: 4, 4: 4, 5: 4, 9: 4}


def test_beam_with_completed_and_fixed_width():
    # W=10, 3 completed -> remaining 7; fixed 2 beams -> ceil(7/2)=4 each (beam may exceed).
    tree = tree_with_children([0.3, 0.8, 0.6, 0.9, 0.1, 0.2, 0.4, 0.5, 0.7, 0.0])
    kids = tree.root.children
    completed, cands = kids[:3], kids[3:]
    alloc = build(config(method="beam", width=10, fixed_width=2)).select(frontier(tree, cands, 10, completed, depth=1))
    assert alloc == {4: 4, 9: 4}  # scores 0.9 and 0.7


def test_rebase_allocation_by_hand():
    # T=0.2, scores (0.9, 0.5, 0.1): weights e^0=1, e^-2=0.1353, e^-4=0.0183; sum 1.1536.
    # n1 = ceil(16*1/1.1536)=ceil(13.87)=14; B=2; n2 = ceil(2*0.1353/0.1536)=ceil(1.76)=2; n3=0.
    assert allocate([0.9, 0.5, 0.1], 16, 0.2) == [14, 2, 0]
    # Order of the input is kept: the same scores shuffled.
    assert allocate([0.1, 0.9, 0.5], 16, 0.2) == [0, 14, 2]
    # Equal scores split as evenly as ceil allows, best (first) first: ceil(5/3)=2, ceil(3/2)=2, 1.
    assert allocate([0.5, 0.5, 0.5], 5, 0.2) == [2, 2, 1]
    # -inf (pruned by ETS) gets nothing. Best 0.3: weights 1 and e^-0.5=0.6065, so
    # ceil(7/1.6065)=ceil(4.36)=5, then the last candidate takes the remaining 2.
    assert allocate([0.2, -math.inf, 0.3], 7, 0.2) == [2, 0, 5]
    assert sum(allocate([0.3, 0.31, 0.9, 0.0], 64, 0.2)) == 64


def test_rebase_strategy_uses_remaining_width():
    tree = tree_with_children([0.9, 0.5, 0.1, 0.3])
    kids = tree.root.children
    alloc = build(config(method="rebase", width=17)).select(frontier(tree, kids[:3], 17, [kids[3]], depth=1))
    assert alloc == {1: 14, 2: 2}


def test_contiguous_groups_match_public_code_split():
    assert contiguous_groups(16, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert contiguous_groups(10, 4) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert contiguous_groups(2, 3) == [[0], [1], [0]]


def test_dvts_splits_root_then_keeps_best_per_subtree():
    # W=9 -> S=3 subtrees of width 3; root children in groups [1,2,3] [4,5,6] [7,8,9].
    scores = [0.2, 0.8, 0.5, 0.9, 0.1, 0.3, 0.4, 0.4, 0.6]
    tree = tree_with_children(scores)
    kids = tree.root.children
    strategy = build(config(method="dvts", width=9))
    # Child 4 (score 0.9, group 1) completed: group 1 leader is the best alive (id 6, 0.3),
    # and that subtree's width shrinks to 3 - 1 = 2.
    completed = [kids[3]]
    cands = [k for k in kids if k is not kids[3]]
    alloc = strategy.select(frontier(tree, cands, 9, completed, depth=1))
    assert alloc == {2: 3, 6: 2, 9: 3}

    # Depth 2: subtree 0 (leader id 2) has 3 children; subtree 2 (id 9) has 3; subtree 1 (id 6) 2.
    a = add_children(tree, tree.nodes[2], [0.3, 0.7, 0.1])
    b = add_children(tree, tree.nodes[6], [0.5, 0.4])
    c = add_children(tree, tree.nodes[9], [0.2, 0.2, 0.9])
    # One child of subtree 2 completes: its width drops from 3 to 2.
    completed2 = completed + [c[2]]
    alloc2 = strategy.select(frontier(tree, a + b + c[:2], 9, completed2, depth=2))
    assert alloc2 == {a[1].id: 3, b[0].id: 2, c[0].id: 2}


def test_dvts_fixed_subtrees():
    tree = tree_with_children([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    alloc = build(config(method="dvts", width=8, fixed_width=2)).select(frontier(tree, tree.root.children, 8, depth=1))
    assert alloc == {4: 4, 8: 4}


# ---------------------------------------------------------------- search-and-learn's beam options
def children_with_texts(tree, parent, texts_scores):
    out = []
    for text, score in texts_scores:
        child = tree.add_child(parent, text, [7])
        child.score = score
        out.append(child)
    return out


def test_filter_duplicates_keeps_one_of_each_trajectory_text():
    from ets.tree import SearchTree

    tree = SearchTree("Q", [1, 2])
    kids = children_with_texts(tree, tree.root, [("a", 0.9), ("a", 0.8), ("b", 0.5), ("c", 0.1)])
    f = frontier(tree, kids, 4)
    assert build(config(method="beam", width=4, fixed_width=2)).select(f) == {1: 2, 2: 2}  # both "a"
    # the second "a" is a duplicate: the next best, "b", is kept in its place
    assert build(config(method="beam", width=4, fixed_width=2, filter_duplicates=True)).select(f) == {1: 2, 3: 2}


def test_filter_duplicates_compares_whole_trajectories_not_steps():
    from ets.tree import SearchTree

    tree = SearchTree("Q", [1, 2])
    x, y = children_with_texts(tree, tree.root, [("x", 0.5), ("y", 0.5)])
    (xz,) = children_with_texts(tree, x, [("z", 0.9)])
    (yz,) = children_with_texts(tree, y, [("z", 0.8)])
    (xz2,) = children_with_texts(tree, x, [("z", 0.7)])   # "xz" again
    f = frontier(tree, [xz, yz, xz2], 4, depth=2)
    assert build(config(method="beam", width=4, fixed_width=2, filter_duplicates=True)).select(f) == {
        xz.id: 2, yz.id: 2}
    assert build(config(method="beam", width=4, fixed_width=3, filter_duplicates=True)).select(f) == {
        xz.id: 2, yz.id: 2}  # only two distinct trajectories to keep


def test_sort_completed_keeps_the_best_width_trajectories():
    from ets.tree import SearchTree

    tree = SearchTree("Q", [1, 2])
    (a,) = children_with_texts(tree, tree.root, [("a", 0.9)])
    done = [a, *children_with_texts(tree, a, [("b", 0.2), ("c", 0.6), ("d", 0.1), ("e", 0.6)])]
    plain = build(config(method="beam", width=4))
    assert plain.answering(done, 4) == done                          # every completed trajectory answers
    best = build(config(method="beam", width=4, sort_completed=True))
    assert best.answering(done, 4) == [done[0], done[2], done[4], done[1]]  # 0.9, 0.6, 0.6 (in order), 0.2
    assert best.answering(done[:4], 4) == done[:4]                   # no more than W: all, as they came
    # by the aggregation of each trajectory's step scores
    p, q = children_with_texts(tree, tree.root, [("p", 0.2), ("q", 0.9)])
    two = [*children_with_texts(tree, p, [("b", 0.8)]), *children_with_texts(tree, q, [("c", 0.7), ("d", 0.5)])]
    assert build(config(method="beam", width=2, sort_completed=True)).answering(two, 2) == two[:2]  # last: 0.8, 0.7
    by_min = build(config(method="beam", width=2, sort_completed=True, aggregation="min"))
    assert by_min.answering(two, 2) == two[1:]                       # min: 0.7, 0.5 over 0.2
    # the other methods let every completed trajectory answer
    assert build(config(method="rebase", width=4)).answering(done, 4) == done


def test_lookahead_scores_rank_beam_and_dvts_candidates():
    from ets.strategies.base import LOOKAHEAD_SCORE

    tree = tree_with_children([0.9, 0.1, 0.5, 0.4])
    kids = tree.root.children
    beam = build(config(method="beam", width=4, fixed_width=1, lookahead=1))
    assert beam.select(frontier(tree, kids, 4)) == {1: 4}            # no rollout scores yet: the PRM's own
    for kid, ahead in zip(kids, [0.0, 1.0, 0.2, 0.3]):
        kid.tags[LOOKAHEAD_SCORE] = ahead
    assert beam.select(frontier(tree, kids, 4)) == {2: 4}            # where the rollouts led
    dvts = build(config(method="dvts", width=4, fixed_width=2, lookahead=1))
    assert dvts.select(frontier(tree, kids, 4, depth=1)) == {2: 2, 4: 2}
    assert kids[0].score == 0.9                                      # the step keeps its own score


@pytest.mark.parametrize("kw, words", [
    ({"method": "rebase", "lookahead": 2}, ["lookahead: 2", "beam and dvts only", "'rebase'"]),
    ({"method": "best_of_n", "lookahead": 1}, ["lookahead", "'best_of_n'"]),
    ({"method": "dvts", "filter_duplicates": True}, ["filter_duplicates", "beam only", "'dvts'"]),
    ({"method": "ets", "sort_completed": True}, ["sort_completed", "beam only", "'ets'"]),
    ({"method": "beam", "lookahead": -1}, ["lookahead", ">= 0"]),
    ({"method": "beam", "sort_completed": "yes"}, ["sort_completed", "true or false"]),
])
def test_search_and_learn_options_on_the_wrong_method_are_named(kw, words):
    with pytest.raises(ConfigError) as err:
        config(**kw)
    for w in words:
        assert w in str(err.value)
