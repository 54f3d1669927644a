"""The HiGHS answer is the optimum: checked against enumeration on hundreds of small trees.

The brute force below is written from docs/algorithms.md directly (walk the parents, count
the kept nodes), sharing no code with lp/, so it checks the program's construction too.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ets.lp import build_program, solve_program, solve_selection, tree_layout


def random_tree(rng: np.random.Generator, max_leaves: int = 12) -> tuple[list[int], list[int]]:
    """(parents, leaves): half general random trees, half search-shaped frontiers."""
    if rng.random() < 0.5:
        return search_tree(rng, max_leaves)
    size = int(rng.integers(2, 3 * max_leaves))
    parents = [-1] + [int(rng.integers(0, v)) for v in range(1, size)]
    has_child = np.zeros(size, dtype=bool)
    has_child[[p for p in parents if p >= 0]] = True
    childless = [v for v in range(1, size) if not has_child[v]]
    n = int(rng.integers(1, min(max_leaves, len(childless)) + 1))
    return parents, sorted(int(v) for v in rng.choice(childless, size=n, replace=False))


def search_tree(rng: np.random.Generator, max_leaves: int) -> tuple[list[int], list[int]]:
    """Leaves at one depth, as a search's frontier: rounds of expansion, some nodes kept."""
    depth = int(rng.integers(1, 6))
    parents, frontier = [-1], [0]
    for d in range(depth):
        new = []
        for _ in range(int(rng.integers(1, max_leaves + 1))):
            parents.append(int(frontier[rng.integers(len(frontier))]))
            new.append(len(parents) - 1)
        keep = int(rng.integers(1, len(new) + 1))
        frontier = new if d == depth - 1 else [int(v) for v in rng.choice(new, size=keep, replace=False)]
    return parents, frontier


def ancestors_of(parents: list[int], v: int) -> list[int]:
    out = []
    while parents[v] != -1:
        v = parents[v]
        out.append(v)
    return out


def brute_force(parents, leaves, weights, costs, clusters, lambda_c, lambda_s, budget=None, tokens=None):
    """(best objective, objective of a given mask) by enumerating every non-empty kept set."""
    paths = [ancestors_of(parents, leaf) for leaf in leaves]
    k = len(set(clusters)) if clusters is not None and lambda_s > 0 else 0

    def value(mask) -> tuple[float, float]:
        kept = [leaf for leaf, m in zip(leaves, mask) if m]
        nodes = set(kept).union(*(set(p) for p, m in zip(paths, mask) if m))
        obj = sum(w for w, m in zip(weights, mask) if m) - lambda_c * sum(costs[v] for v in nodes)
        if k:
            obj += lambda_s / k * len({c for c, m in zip(clusters, mask) if m})
        used = sum(tokens[v] for v in nodes) if tokens is not None else 0
        return obj, used

    best = -np.inf
    for mask in itertools.product([0, 1], repeat=len(leaves)):
        if not any(mask):
            continue
        obj, used = value(mask)
        if budget is None or used <= budget:
            best = max(best, obj)
    return best, value


def random_instance(rng: np.random.Generator):
    parents, leaves = random_tree(rng)
    n, size = len(leaves), len(parents)
    if rng.random() < 0.5:   # REBASE-like weights: counts over a width, normalised
        counts = rng.multinomial(int(rng.integers(n, 4 * n + 1)), rng.dirichlet(np.ones(n)))
        weights = counts / counts.sum()
    else:
        weights = rng.dirichlet(np.ones(n))
    tokens = rng.integers(1, 60, size).astype(float)
    costs = tokens / tokens.sum() if rng.random() < 0.5 else np.full(size, 1.0 / size)
    clusters = [int(c) for c in rng.integers(0, max(1, n // 2) + 1, n)] if rng.random() < 0.7 else None
    lambda_c = float(rng.choice([0.0, 0.3, 1.0, 3.0]))
    lambda_s = float(rng.choice([0.0, 0.5, 1.5]))
    budget = None
    if rng.random() < 0.35:
        budget = float(rng.integers(int(tokens.min()), int(tokens.sum()) + 1))
    return parents, leaves, weights, costs, clusters, lambda_c, lambda_s, budget, tokens


@pytest.mark.parametrize("seed", range(4))
def test_solver_objective_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(100):
        parents, leaves, weights, costs, clusters, lc, ls, budget, tokens = random_instance(rng)
        best, value = brute_force(parents, leaves, weights, costs, clusters, lc, ls, budget, tokens)
        kept, objective, status = solve_selection(
            parents, leaves, weights, costs, clusters, lc, ls, budget=budget, token_counts=tokens
        )
        if best == -np.inf:   # no single path fits the budget
            assert status == "budget_infeasible" and kept.sum() == 1
            continue
        assert status == "optimal"
        obj, used = value(kept)
        assert abs(obj - objective) < 1e-9, "reported objective is the kept set's objective"
        assert abs(objective - best) < 1e-9, (seed, objective, best)
        assert kept.any() and (budget is None or used <= budget)
        checked += 1
    assert checked >= 80


def test_raw_solution_keeps_whole_paths():
    """In the solver's own solution (x, y), a kept leaf keeps every ancestor and a kept
    ancestor has a kept leaf below it."""
    rng = np.random.default_rng(7)
    for _ in range(150):
        parents, leaves, weights, costs, clusters, lc, ls, budget, tokens = random_instance(rng)
        layout = tree_layout(parents, leaves)
        nodes = layout.nodes
        labels = None if clusters is None else np.unique(clusters, return_inverse=True)[1]
        program = build_program(layout, weights, np.asarray(costs)[nodes], labels, lc, ls, tokens[nodes], budget)
        result = solve_program(program)
        if result.status == 2:   # infeasible budget
            continue
        assert result.status == 0
        z = np.round(result.x[: layout.n + layout.m]).astype(bool)
        kept_leaves = {int(leaves[i]) for i in range(layout.n) if z[i]}
        kept_anc = {int(nodes[j]) for j in range(layout.n, layout.n + layout.m) if z[j]}
        needed = set().union(*(set(ancestors_of(parents, leaf)) for leaf in kept_leaves))
        assert kept_anc == needed
        assert kept_leaves


def test_relaxation_is_feasible_and_bounded_by_optimum():
    rng = np.random.default_rng(11)
    for _ in range(60):
        parents, leaves, weights, costs, clusters, lc, ls, budget, tokens = random_instance(rng)
        best, value = brute_force(parents, leaves, weights, costs, clusters, lc, ls, budget, tokens)
        if best == -np.inf:
            continue
        kept, objective, status = solve_selection(
            parents, leaves, weights, costs, clusters, lc, ls, budget=budget, token_counts=tokens, relax=True
        )
        obj, used = value(kept)
        assert status in ("relaxed", "optimal")
        assert kept.any() and (budget is None or used <= budget)
        assert abs(obj - objective) < 1e-9 and objective <= best + 1e-9
