"""Solve the ETS selection program in-process with HiGHS (`scipy.optimize.milp`).

    kept, objective, status = solve_selection(parents, leaves, weights, costs, clusters,
                                              lambda_c, lambda_s)

Where this differs from the paper's public code (and why):
- The public code solves with PuLP + CBC, one subprocess per step; here HiGHS runs
  in-process with `mip_rel_gap = mip_abs_gap = 0` (HiGHS stops at a 1e-6 absolute gap by
  default, too loose to call the answer the optimum), under a time limit on every solve.
- The public code replaces `lambda_c = 0` by `+1e-4` with the cost term's sign flipped,
  i.e. a tiny *reward* per kept node, so that with no cost every leaf is kept. Here
  `lambda_c = 0` means no cost (docs/algorithms.md), and the same effect comes from a defined
  tie-break: after the solve, every pruned leaf whose keeping would not lower the objective
  (and fits the budget) is kept. The objective never drops, so the answer stays optimal;
  with `lambda_c = lambda_s = 0` all leaves are kept and ETS equals REBASE exactly.
- Beyond the paper: `budget` caps the tokens of the kept nodes (the kept leaves and all
  their ancestors, prompt included), and `relax=True` solves the LP relaxation and rounds
  it (x >= 0.5 kept, best-first while the budget allows; at least one leaf).

The LP relaxation is solved first and the MIP only when its x is fractional (rare on
search trees): an integral LP optimum is already the integer optimum.

Statuses: "optimal" (proven); "relaxed" (relax=True and the LP optimum was fractional,
so it was rounded); "budget_infeasible" (no single leaf's path fits the budget: the leaf
with the cheapest path is kept, budget exceeded); and the fallbacks "time_limit" and
"failed" (solver error or no solution), after which the kept set is the REBASE
allocation's: every leaf, or, with a budget, leaves by weight, best first, while they
fit. Callers must count fallbacks (`FALLBACK_STATUSES`).
"""

from __future__ import annotations

import time
import warnings
from typing import NamedTuple, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from ets.lp.program import Program, build_program, tree_layout

# Seconds a solve may take before the REBASE fallback; every solve has one. A guard against a
# pathological program, not a budget: the limit is wall-clock, so a solve that reaches it on
# a busy machine and not on an idle one makes the records depend on the load. At the demo's
# heavier cost weights a solve's time is HiGHS's root work (presolve, cuts), not its search:
# at lambda_c 2.0 on 24 validation problems, sharing 2 cores with a test run, the slowest MIP
# took 1.15 s at 13 nodes (p99 0.74 s, max 304 nodes), and the old 1-s limit fell back on
# 5 of ~1,600 solves at lambda_c 1.25 with three runs on two cores.
DEFAULT_TIME_LIMIT = 10.0
FALLBACK_STATUSES = ("time_limit", "failed")
_BUDGET_SLACK = 1e-9              # token sums are integers; this only absorbs float noise
_INTEGRAL_TOL = 1e-9              # an LP x this close to 0/1 is read as integral


class Selection(NamedTuple):
    kept: np.ndarray      # (N,) bool, in the order of `leaves`
    objective: float      # the program's objective (maximised) of `kept`, evaluated exactly
    status: str


def solve_selection(
    parents: Sequence[int] | np.ndarray,
    leaves: Sequence[int] | np.ndarray,
    weights: Sequence[float] | np.ndarray,
    costs: Sequence[float] | np.ndarray,
    clusters: Sequence | np.ndarray | None,
    lambda_c: float,
    lambda_s: float,
    *,
    budget: float | None = None,
    token_counts: Sequence[int] | np.ndarray | None = None,
    relax: bool = False,
    time_limit: float | None = None,
) -> Selection:
    """Choose which leaves to keep (docs/algorithms.md, "ETS: the integer program").

    `parents[v]`: node v's parent (-1 for a root), over all nodes; `leaves`: the N
    candidates' node indices; `weights`: their outcome weights O_i; `costs[v]`: every
    node's cost (>= 0); `clusters`: one label per leaf, or None for no coverage term (the
    term is also dropped when `lambda_s == 0`); `token_counts[v]`: every node's tokens,
    needed with `budget`. `time_limit` in seconds (None: DEFAULT_TIME_LIMIT).
    """
    if lambda_c < 0 or lambda_s < 0:
        raise ValueError(f"lambda_c and lambda_s must be >= 0, got {lambda_c}, {lambda_s}")
    if budget is not None and token_counts is None:
        raise ValueError("a budget needs token_counts (tokens of every node)")
    layout = tree_layout(parents, leaves)
    n = layout.n
    if n == 0:
        raise ValueError("solve_selection needs at least one leaf")
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (n,):
        raise ValueError(f"weights has shape {weights.shape}; expected one per leaf, ({n},)")
    nodes = layout.nodes
    node_costs = np.asarray(costs, dtype=np.float64)[nodes]
    if (node_costs < 0).any():
        raise ValueError("costs must be >= 0")
    tokens = None if token_counts is None else np.asarray(token_counts, dtype=np.float64)[nodes]
    labels = None
    if clusters is not None and lambda_s > 0:
        if len(clusters) != n:
            raise ValueError(f"clusters has {len(clusters)} labels; expected one per leaf ({n})")
        labels = np.unique(np.asarray(clusters), return_inverse=True)[1].reshape(-1)
    program = build_program(layout, weights, node_costs, labels, lambda_c, lambda_s, tokens, budget)
    order = np.argsort(-weights, kind="stable")

    if budget is not None:
        path_tokens = layout.path_sums(tokens)[:n]
        if path_tokens.min() > budget + _BUDGET_SLACK:
            kept = np.zeros(n, dtype=bool)
            cheapest = np.lexsort((-weights, path_tokens))[0]
            kept[cheapest] = True
            return Selection(kept, program.objective(kept), "budget_infeasible")
    if n == 1:   # the one feasible answer: nothing to solve
        kept = np.ones(1, dtype=bool)
        return Selection(kept, program.objective(kept), "optimal")

    # The LP relaxation first: on search trees it is almost always integral in x, and an
    # integral LP optimum is the integer optimum (y and c follow x; see program.py), so
    # the MIP machinery, ~4 ms of fixed set-up in HiGHS, runs only when it must.
    limit = DEFAULT_TIME_LIMIT if time_limit is None else float(time_limit)
    start = time.perf_counter()
    try:
        result = _milp(program, False, limit)
        x = None if result.status != 0 or result.x is None else result.x[:n]
        integral = x is not None and bool(np.all(np.abs(x - np.round(x)) <= _INTEGRAL_TOL))
        if x is not None and not integral and not relax:
            result = _milp(program, True, max(limit - (time.perf_counter() - start), 1e-9))
            x = None if result.status != 0 or result.x is None else result.x[:n]
            integral = True
    except Exception:  # noqa: BLE001  (any solver error has the same defined fallback)
        return _fallback(program, order, "failed")
    if x is None:
        return _fallback(program, order, "time_limit" if result.status == 1 else "failed")
    if integral:
        kept, status = x > 0.5, "optimal"
    else:   # relax=True and a fractional x: round, best first, within the budget
        kept = _fill(program, [i for i in np.argsort(-x, kind="stable") if x[i] >= 0.5])
        if not kept.any():
            kept = _fill(program, np.argsort(-x, kind="stable"), limit=1)
        status = "relaxed"
    kept = _keep_ties(program, kept, order)
    return Selection(kept, program.objective(kept), status)


def solve_program(program: Program, relax: bool = False, time_limit: float = DEFAULT_TIME_LIMIT):
    """The raw solver result (scipy `OptimizeResult`; `x` in the layout [x | y | c]), MIP or LP.
    For checks that look at the solver's own y and c."""
    return _milp(program, not relax, time_limit)


def _milp(program: Program, integer: bool, time_limit: float):
    integrality = program.integrality if integer else np.zeros_like(program.integrality)
    with warnings.catch_warnings():
        # scipy passes options it does not know (mip_abs_gap) to HiGHS verbatim, with a warning.
        warnings.filterwarnings("ignore", message="Unrecognized options", category=RuntimeWarning)
        return milp(
            program.c,
            integrality=integrality,
            bounds=Bounds(0.0, 1.0),
            constraints=LinearConstraint(program.A, program.lb, program.ub),
            options={"time_limit": time_limit, "mip_rel_gap": 0.0, "mip_abs_gap": 0.0},
        )


def _fallback(program: Program, order: np.ndarray, status: str) -> Selection:
    """REBASE's kept set: every leaf, or best-weight first while the budget allows."""
    kept = _fill(program, order)
    return Selection(kept, program.objective(kept), status)


def _fill(program: Program, order, kept: np.ndarray | None = None, limit: int | None = None) -> np.ndarray:
    """Keep leaves in `order` while their new path tokens fit the budget (all, without one)."""
    layout = program.layout
    kept = np.zeros(layout.n, dtype=bool) if kept is None else kept.copy()
    if program.budget is None:
        chosen = list(order)[:limit] if limit else list(order)
        kept[chosen] = True
        return kept
    alive = layout.closure(kept)
    spent = program.tokens_of(alive)
    for i in order:
        if kept[i]:
            continue
        new = layout.new_nodes(alive, int(i))
        extra = float(program.tokens[new].sum())
        if spent + extra <= program.budget + _BUDGET_SLACK:
            kept[i] = True
            alive[new] = True
            spent += extra
            if limit and kept.sum() >= limit:
                break
    return kept


def _keep_ties(program: Program, kept: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Also keep every pruned leaf whose keeping does not lower the objective (see module doc)."""
    layout, gain = program.layout, program.node_gain
    kept = kept.copy()
    alive = layout.closure(kept)
    spent = program.tokens_of(alive)
    covered = None
    if program.clusters is not None:
        covered = np.zeros(program.k, dtype=bool)
        covered[program.clusters[kept]] = True
    for i in order:
        i = int(i)
        if kept[i]:
            continue
        bonus = program.cluster_gain if covered is not None and not covered[program.clusters[i]] else 0.0
        if gain[i] + bonus < 0:    # ancestors only add cost (gain <= 0): cannot break even
            continue
        new = layout.new_nodes(alive, i)
        if float(gain[new].sum()) + bonus < 0:
            continue
        extra = 0.0 if program.budget is None else float(program.tokens[new].sum())
        if program.budget is not None and spent + extra > program.budget + _BUDGET_SLACK:
            continue
        kept[i] = True
        alive[new] = True
        spent += extra
        if covered is not None:
            covered[program.clusters[i]] = True
    return kept
