"""The ETS strategy on real search trees: its limits, the budget, fallbacks, the embedder."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np
import pytest

from ets.config import SearchConfig
from ets.tree import SearchTree, kv_size
from ets.strategies import Frontier, build
from ets.strategies.ets import frontier_arrays
from ets.strategies.rebase import allocate

STEPS = [
    "We add 3 and 4 to get 7.",
    "Adding 3 and 4 gives 7.",
    "The area is pi r^2.",
    "Let x be the unknown.",
    "So the answer is 12.",
    "Multiply both sides by 2.",
]


class Simulated(NamedTuple):
    tree: SearchTree
    metrics: Counter     # what the strategy wrote into the problem's frontiers


def simulate(strategy, width: int, rounds: int, seed: int, check=None) -> Simulated:
    """A search loop with random scores, texts and 20-60 token steps; `check(frontier, alloc)`
    sees every selection."""
    rng = np.random.default_rng(seed)
    metrics: Counter = Counter()
    tree = SearchTree("Q: what is 3 + 4?", list(range(30)))
    alloc, remaining = {0: width}, width
    for depth in range(rounds):
        candidates = []
        for node_id, k in alloc.items():
            for _ in range(k):
                text = STEPS[rng.integers(len(STEPS))]
                child = tree.add_child(tree.nodes[node_id], text, [1] * int(rng.integers(20, 61)))
                child.score = float(rng.random())
                if rng.random() < 0.1:
                    child.terminal = True
                    remaining -= 1
                else:
                    candidates.append(child)
        if remaining <= 0 or not candidates:
            break
        frontier = Frontier(tree, candidates, [], remaining, width, depth + 1, metrics)
        alloc = strategy.select(frontier)
        assert sum(alloc.values()) == remaining
        assert set(alloc) <= {c.id for c in candidates}
        if check:
            check(frontier, alloc)
    tree.check()
    return Simulated(tree, metrics)


def rebase_of(frontier: Frontier, temperature: float) -> dict[int, int]:
    counts = allocate(frontier.scores(), frontier.remaining, temperature)
    return {c.id: k for c, k in zip(frontier.candidates, counts) if k > 0}


def assert_equal(a, b):
    assert a == b


def test_alias_builds_ets():
    assert build(SearchConfig(method="softmax_costmodel")).name == "ets"


def test_frontier_arrays_are_the_candidates_and_their_ancestors():
    tree = simulate(build(SearchConfig(method="rebase", width=8)), 8, 3, seed=0).tree
    leaves = [n for n in tree.nodes if n.depth == 3 and not n.terminal] or [tree.nodes[-1]]
    parents, local_leaves, nodes = frontier_arrays(leaves)
    assert local_leaves == list(range(len(leaves))) and nodes[: len(leaves)] == leaves
    assert len({n.id for n in nodes}) == len(nodes)
    for v, p in enumerate(parents):
        assert (p == -1) == (nodes[v].parent is None)
        if p >= 0:
            assert nodes[p] is nodes[v].parent


@pytest.mark.parametrize("cost", ["uniform", "tokens"])
def test_no_cost_no_coverage_is_rebase(cost):
    cfg = SearchConfig(method="ets", width=16, lambda_c=0.0, lambda_s=0.0, cost=cost)
    ets = build(cfg)
    metrics = simulate(ets, 16, 6, seed=1, check=lambda f, a: assert_equal(a, rebase_of(f, cfg.softmax_temperature))).metrics
    assert metrics["lp_solves"] > 0 and metrics["lp_fallback"] == 0 and metrics["lp_pruned"] == 0
    assert metrics["lp_moved_width"] == metrics["lp_pruned_weighted"] == 0


def test_huge_cost_keeps_one_leaf():
    ets = build(SearchConfig(method="ets", width=16, lambda_c=1e6, lambda_s=0.0))
    metrics = simulate(ets, 16, 5, seed=2, check=lambda f, a: assert_equal(len(a), 1)).metrics
    # one leaf kept: every child REBASE gave another leaf moves to it, and nothing else moves
    assert metrics["lp_moved_width"] == metrics["lp_pruned_width"] > 0


def test_departure_from_rebase_is_counted_per_solve():
    """Pruning only leaves REBASE gave nothing still moves width (the final pass
    renormalises over fewer leaves); each solve's move at least its pruned leaves' children."""
    cfg = SearchConfig(method="ets", width=64, lambda_c=0.25, lambda_s=0.0)
    seen = []

    def check(frontier, alloc):
        rebase = rebase_of(frontier, cfg.softmax_temperature)
        moved = sum(max(0, alloc.get(i, 0) - rebase.get(i, 0)) for i in alloc)
        lost = sum(n for i, n in rebase.items() if i not in alloc and alloc)
        seen.append((moved, lost))

    metrics = simulate(build(cfg), 64, 6, seed=7, check=check).metrics
    assert metrics["lp_moved_width"] == sum(m for m, _ in seen) > 0
    assert all(m >= lost for m, lost in seen)


def test_kv_budget_caps_the_kept_paths():
    budget = 400
    ets = build(SearchConfig(method="ets", width=32, lambda_c=0.0, lambda_s=0.0, kv_budget=budget))

    def check(frontier, alloc):
        assert kv_size([frontier.tree.nodes[i] for i in alloc]) <= budget

    metrics = simulate(ets, 32, 6, seed=3, check=check).metrics
    assert metrics["lp_pruned"] > 0 and metrics["lp_budget_infeasible"] == 0


def test_time_limit_fallback_is_counted_and_keeps_rebase():
    cfg = SearchConfig(method="ets", width=64, lambda_c=1.0, lambda_s=0.0, lp_time_limit=1e-9)
    ets = build(cfg)
    metrics = simulate(ets, 64, 4, seed=4, check=lambda f, a: assert_equal(a, rebase_of(f, cfg.softmax_temperature))).metrics
    assert metrics["lp_fallback"] == metrics["lp_solves"] > 0


def test_paper_settings_with_real_embedder_load_once():
    ets = build(SearchConfig(method="ets", width=16, lambda_c=1.0, lambda_s=1.5))
    first = simulate(ets, 16, 6, seed=5).metrics
    model = ets.clusterer._model
    assert model is not None and first["cluster_seconds"] > 0
    metrics = first + simulate(ets, 16, 6, seed=6).metrics
    assert ets.clusterer._model is model           # loaded once per strategy
    assert ets.clusterer.encoded <= metrics["embedded_steps"]   # each distinct text of a selection once
    assert metrics["lp_fallback"] == 0 and metrics["lp_pruned"] > 0


def test_metrics_are_the_problems_own():
    """Two problems interleaved on one strategy: each frontier's counter holds its own
    solves and its own embedding."""
    ets = build(SearchConfig(method="ets", width=8, lambda_c=1.0, lambda_s=1.0))
    assert not hasattr(ets, "metrics")            # nothing run-wide to diff
    frontiers = []
    for seed in (7, 8):
        rng = np.random.default_rng(seed)
        tree = SearchTree("Q", list(range(10)))
        kids = [tree.add_child(tree.root, STEPS[i], [1] * 20) for i in rng.permutation(len(STEPS))[:4]]
        for k in kids:
            k.score = float(rng.random())
        frontiers.append(Frontier(tree, kids, [], 8, 8, 1, Counter()))
    ets.select(frontiers[0])
    first, second = frontiers[0].metrics, frontiers[1].metrics
    assert first["lp_solves"] == 1 and first["embedded_steps"] == 4 and first["embed_seconds"] > 0
    assert not second


def test_keep_counts_final_pass_only_hands_out_the_pruned_leaves_children():
    """`final_pass: keep_counts`: every kept leaf gets at least its REBASE count, the width is
    spent exactly, and nothing moves but the pruned leaves' children (lp_moved_width ==
    lp_pruned_width); the paper's renormalising pass moves more on the same searches."""
    def run(final_pass):
        cfg = SearchConfig(method="ets", width=64, lambda_c=1.0, lambda_s=0.0, final_pass=final_pass)

        def check(frontier, alloc):
            rebase = rebase_of(frontier, cfg.softmax_temperature)
            assert sum(alloc.values()) == frontier.remaining
            if final_pass == "keep_counts":
                assert all(alloc.get(i, 0) >= n for i, n in rebase.items() if i in alloc or n == 0)

        return simulate(build(cfg), 64, 6, seed=8, check=check).metrics

    kept, renormalised = run("keep_counts"), run("renormalise")
    assert kept["lp_moved_width"] == kept["lp_pruned_width"]
    assert renormalised["lp_moved_width"] > renormalised["lp_pruned_width"]


def test_keep_counts_is_rebase_when_only_childless_leaves_are_pruned():
    cfg = SearchConfig(method="ets", width=64, lambda_c=0.25, lambda_s=0.0, final_pass="keep_counts")
    metrics = simulate(build(cfg), 64, 6, seed=7,
                       check=lambda f, a: assert_equal(a, rebase_of(f, cfg.softmax_temperature))).metrics
    assert metrics["lp_pruned"] > 0 and metrics["lp_pruned_weighted"] == 0
