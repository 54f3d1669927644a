"""The program's limits, the budget, the relaxation, the time-limit fallback, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from ets.lp import solve_selection, tree_layout
from tests.test_lp_exact import ancestors_of, random_tree, search_tree


def uniform(parents):
    return np.full(len(parents), 1.0 / len(parents))


def big_frontier(seed=0, width=64, depth=6):
    """A search-shaped frontier with `width` leaves, token counts 20-60 and a long prompt."""
    rng = np.random.default_rng(seed)
    parents, frontier = [-1], [0]
    for d in range(depth):
        new = []
        for _ in range(width):
            parents.append(int(frontier[rng.integers(len(frontier))]))
            new.append(len(parents) - 1)
        frontier = new if d == depth - 1 else [int(v) for v in rng.choice(new, size=width // 4, replace=False)]
    tokens = rng.integers(20, 61, len(parents)).astype(float)
    tokens[0] = 200
    return parents, frontier, tokens, rng


def test_no_cost_no_coverage_keeps_every_leaf():
    rng = np.random.default_rng(1)
    for _ in range(100):
        parents, leaves = random_tree(rng)
        n = len(leaves)
        weights = rng.multinomial(n, np.ones(n) / n) / n   # some weights exactly 0: ties
        kept, objective, status = solve_selection(parents, leaves, weights, uniform(parents), None, 0.0, 0.0)
        assert status == "optimal" and kept.all()
        assert objective == pytest.approx(weights.sum())


def test_huge_cost_keeps_one_leaf_on_a_cheapest_path():
    rng = np.random.default_rng(2)
    for _ in range(100):
        parents, leaves = random_tree(rng)
        n = len(leaves)
        weights = rng.dirichlet(np.ones(n))
        clusters = list(rng.integers(0, 3, n))
        kept, _, _ = solve_selection(parents, leaves, weights, uniform(parents), clusters, 1e6, 1.5)
        assert kept.sum() == 1
        path_len = [len(ancestors_of(parents, leaf)) for leaf in leaves]
        assert path_len[int(np.flatnonzero(kept)[0])] == min(path_len)


def test_equal_weights_keep_every_cluster():
    """The paper's lambda_c = 1, lambda_s = 1.5, uniform costs, on search-shaped trees."""
    rng = np.random.default_rng(3)
    for _ in range(150):
        parents, leaves = search_tree(rng, 16)
        n = len(leaves)
        clusters = rng.integers(0, n, n)
        kept, _, _ = solve_selection(parents, leaves, np.full(n, 1.0 / n), uniform(parents), clusters, 1.0, 1.5)
        assert set(clusters[kept]) == set(clusters)


def kept_tokens(parents, leaves, kept, tokens):
    nodes = set()
    for leaf, k in zip(leaves, kept):
        if k:
            nodes |= {leaf, *ancestors_of(parents, leaf)}
    return sum(tokens[v] for v in nodes)


@pytest.mark.parametrize("relax", [False, True])
def test_budget_is_respected_and_binds(relax):
    parents, leaves, tokens, rng = big_frontier(seed=4)
    weights = rng.dirichlet(np.ones(len(leaves)))
    free, _, _ = solve_selection(parents, leaves, weights, uniform(parents), None, 0.0, 0.0)
    full = kept_tokens(parents, leaves, free, tokens)
    for fraction in (0.2, 0.5, 0.8):
        budget = int(full * fraction)
        kept, _, status = solve_selection(
            parents, leaves, weights, uniform(parents), None, 0.0, 0.0,
            budget=budget, token_counts=tokens, relax=relax,
        )
        assert status in (("relaxed", "optimal") if relax else ("optimal",))
        assert 1 <= kept.sum() < len(leaves)
        assert kept_tokens(parents, leaves, kept, tokens) <= budget


def test_budget_below_every_path_keeps_the_cheapest():
    parents, leaves, tokens, rng = big_frontier(seed=5, width=16)
    weights = rng.dirichlet(np.ones(len(leaves)))
    kept, _, status = solve_selection(
        parents, leaves, weights, uniform(parents), None, 1.0, 0.0, budget=10, token_counts=tokens
    )
    assert status == "budget_infeasible" and kept.sum() == 1
    paths = [kept_tokens(parents, leaves, np.arange(len(leaves)) == i, tokens) for i in range(len(leaves))]
    assert paths[int(np.flatnonzero(kept)[0])] == min(paths)


def test_time_limit_falls_back_to_rebase_kept_set():
    parents, leaves, tokens, rng = big_frontier(seed=6, width=64)
    weights = rng.dirichlet(np.ones(len(leaves)))
    clusters = rng.integers(0, 20, len(leaves))
    kept, _, status = solve_selection(parents, leaves, weights, uniform(parents), clusters, 1.0, 1.5, time_limit=1e-9)
    assert status == "time_limit" and kept.all()
    # With a budget the fallback keeps the best-weight leaves that fit.
    budget = int(kept_tokens(parents, leaves, kept, tokens) * 0.3)
    kept, _, status = solve_selection(
        parents, leaves, weights, uniform(parents), clusters, 1.0, 1.5,
        budget=budget, token_counts=tokens, time_limit=1e-9,
    )
    assert status == "time_limit" and kept.any() and not kept.all()
    assert kept_tokens(parents, leaves, kept, tokens) <= budget
    assert kept[int(np.argmax(weights))]


def test_config_default_time_limit_is_the_solvers():
    # Two copies by design: the config stays free of scipy (the CLI starts without it), and
    # lp does not import the app's config. A run's recorded `lp_time_limit` is the config's.
    from ets.config.sections import SearchConfig
    from ets.lp import DEFAULT_TIME_LIMIT

    assert SearchConfig().lp_time_limit == DEFAULT_TIME_LIMIT


def test_layout_numbers_ancestors_parents_first():
    rng = np.random.default_rng(8)
    for _ in range(50):
        parents, leaves = random_tree(rng)
        layout = tree_layout(parents, leaves)
        nodes = layout.nodes
        assert sorted(layout.ancestors) == sorted(set().union(*(ancestors_of(parents, v) for v in leaves)))
        for v, p in enumerate(layout.up):
            assert (p == -1) == (parents[nodes[v]] == -1)
            if p >= 0:
                assert nodes[p] == parents[nodes[v]]
                if v >= layout.n:
                    assert p < v


def test_bad_input_is_rejected_with_a_reason():
    parents = [-1, 0, 1]
    with pytest.raises(ValueError, match="ancestors of each other"):
        solve_selection(parents, [1, 2], [0.5, 0.5], uniform(parents), None, 1.0, 0.0)
    with pytest.raises(ValueError, match="one per leaf"):
        solve_selection(parents, [2], [0.5, 0.5], uniform(parents), None, 1.0, 0.0)
    with pytest.raises(ValueError, match="token_counts"):
        solve_selection(parents, [2], [1.0], uniform(parents), None, 1.0, 0.0, budget=5)
    with pytest.raises(ValueError, match=">= 0"):
        solve_selection(parents, [2], [1.0], uniform(parents), None, -1.0, 0.0)
