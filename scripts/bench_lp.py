"""Time the ETS selection program per step on search-shaped trees, HiGHS vs PuLP + CBC.

    python scripts/bench_lp.py                      # W = 16, 64, 256, paper settings
    python scripts/bench_lp.py --widths 64 --problems 5 --cbc-max 20 --budget-frac 0.5

Trees come from a simulated ETS search, so the frontiers have the shapes ETS makes:
each round, every kept leaf gets its REBASE share of children (20-60 tokens each, a
200-token prompt), a child's PRM-like score drifts from its parent's, a child ends its
trajectory with a probability growing with depth, and the semantic "idea" of a step
(its cluster) is drawn Zipf-like, so clusters have uneven sizes. The selection uses
lp.solve_selection (build + solve + tie-break: what the strategy pays per step, no
embedding). If pulp is installed, the same programs are also solved the public code's
way (PuLP model, path constraints, CBC subprocess); objectives are compared by
evaluating both kept sets with the same exact objective.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from ets.lp import build_program, solve_selection, tree_layout  # noqa: E402
from ets.strategies.rebase import allocate  # noqa: E402

PAPER_LAMBDA_S = {16: 1.5, 64: 1.4, 256: 1.45}
TEMPERATURE = 0.2


def simulate(width: int, rng: np.random.Generator, max_depth: int, args):
    """Yield one selection step's inputs at a time; the caller returns the kept mask."""
    parents, tokens, scores, ideas = [-1], [200], [0.5], [-1]
    alloc = {0: width}
    remaining = width
    for depth in range(1, max_depth + 1):
        cands = []
        for node, k in alloc.items():
            for _ in range(k):
                parents.append(node)
                tokens.append(int(rng.integers(20, 61)))
                scores.append(float(np.clip(scores[node] + rng.normal(0, 0.15), 0, 1)))
                ideas.append(int(rng.zipf(1.6)) % max(2, width // 2))
                v = len(parents) - 1
                if rng.random() < 0.04 * depth:
                    remaining -= 1           # a completed trajectory
                else:
                    cands.append(v)
        if remaining <= 0 or not cands:
            return
        leaf_scores = [scores[v] for v in cands]
        counts = allocate(leaf_scores, remaining, TEMPERATURE)
        layout = tree_layout(parents, cands)
        size = layout.n + layout.m
        step = dict(
            parents=list(parents),
            leaves=cands,
            weights=np.asarray(counts, dtype=float) / sum(counts),
            costs=(np.full(len(parents), 1.0 / size) if args.cost == "uniform"
                   else np.asarray(tokens, float) / np.asarray(tokens, float)[layout.nodes].sum()),
            clusters=[ideas[v] for v in cands],
            tokens=np.asarray(tokens, dtype=float),
            kv_full=float(np.asarray(tokens, float)[layout.nodes].sum()),
        )
        kept = yield step
        pruned = [s if k else -np.inf for s, k in zip(leaf_scores, kept)]
        counts = allocate(pruned, remaining, TEMPERATURE)
        alloc = {v: k for v, k in zip(cands, counts) if k > 0}


def solve_cbc(step, lambda_c, lambda_s, budget):
    """The public code's model: path constraints y_j >= x_i, y_j <= sum x, CBC subprocess."""
    import pulp

    layout = tree_layout(step["parents"], step["leaves"])
    n, m = layout.n, layout.m
    below = [[] for _ in range(m)]         # leaves below each ancestor
    for i in range(n):
        v = layout.up[i]
        while v >= 0:
            below[v - n].append(i)
            v = layout.up[v]
    nodes = layout.nodes
    cost = step["costs"][nodes]
    prob = pulp.LpProblem("ets", pulp.LpMaximize)
    x = [pulp.LpVariable(f"x_{i}", cat="Binary") for i in range(n)]
    y = [pulp.LpVariable(f"y_{j}", cat="Binary") for j in range(m)]
    labels = np.unique(step["clusters"], return_inverse=True)[1]
    k = int(labels.max()) + 1
    cov = [pulp.LpVariable(f"c_{q}", cat="Binary") for q in range(k)]
    prob += (pulp.lpSum(step["weights"][i] * x[i] for i in range(n))
             - lambda_c * pulp.lpSum(cost[n + j] * y[j] for j in range(m))
             - lambda_c * pulp.lpSum(cost[i] * x[i] for i in range(n))
             + (lambda_s / k) * pulp.lpSum(cov))
    for j in range(m):
        prob += y[j] <= pulp.lpSum(x[i] for i in below[j])
        for i in below[j]:
            prob += y[j] >= x[i]
    for q in range(k):
        prob += pulp.lpSum(x[i] for i in np.flatnonzero(labels == q)) >= cov[q]
    prob += pulp.lpSum(x) >= 1
    if budget is not None:
        tok = step["tokens"][nodes]
        prob += pulp.lpSum(tok[i] * x[i] for i in range(n)) + pulp.lpSum(tok[n + j] * y[j] for j in range(m)) <= budget
    prob.solve(pulp.PULP_CBC_CMD(msg=0))
    return np.array([(v.value() or 0) > 0.5 for v in x])


def objective(step, kept, lambda_c, lambda_s):
    """Exact objective of a kept set, evaluated by the program (the same for both solvers)."""
    layout = tree_layout(step["parents"], step["leaves"])
    labels = np.unique(step["clusters"], return_inverse=True)[1]
    program = build_program(layout, step["weights"], step["costs"][layout.nodes], labels, lambda_c, lambda_s)
    return program.objective(kept)


def bench_width(width: int, args, have_pulp: bool) -> None:
    rng = np.random.default_rng(args.seed + width)
    lambda_s = PAPER_LAMBDA_S.get(width, 1.5) if args.lambda_s is None else args.lambda_s
    times, cpu, ns, ms, statuses, cbc = [], [], [], [], {}, []
    for _ in range(args.problems):
        gen = simulate(width, rng, args.max_depth, args)
        try:
            step = next(gen)
            while True:
                budget = None if args.budget_frac is None else args.budget_frac * step["kv_full"]
                t0, c0 = time.perf_counter(), time.process_time()
                kept, obj, status = solve_selection(
                    step["parents"], step["leaves"], step["weights"], step["costs"], step["clusters"],
                    args.lambda_c, lambda_s, budget=budget, token_counts=step["tokens"], relax=args.relax,
                    time_limit=args.time_limit,
                )
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                layout = tree_layout(step["parents"], step["leaves"])
                ns.append(layout.n)
                ms.append(layout.m)
                statuses[status] = statuses.get(status, 0) + 1
                if have_pulp and len(cbc) < args.cbc_max and layout.n > 1 and budget is None:
                    t0 = time.perf_counter()
                    kept_cbc = solve_cbc(step, args.lambda_c, lambda_s, budget)
                    t_cbc = time.perf_counter() - t0
                    obj_cbc = objective(step, kept_cbc, args.lambda_c, lambda_s)
                    cbc.append((times[-1], t_cbc, obj, obj_cbc))
                step = gen.send(kept)
        except StopIteration:
            pass
    t, c = np.array(times) * 1e3, np.array(cpu) * 1e3
    print(f"W={width:4d}  steps={len(t):4d}  N(leaves) median {int(np.median(ns))} max {max(ns)}  "
          f"M(ancestors) median {int(np.median(ms))} max {max(ms)}  lambda_s={lambda_s}")
    print(f"        HiGHS solve_selection: median {np.median(t):7.2f} ms   p99 {np.percentile(t, 99):7.2f} ms"
          f"   max {t.max():7.2f} ms   statuses {statuses}")
    big = np.asarray(ns) >= width // 2
    if big.any():
        print(f"        steps with N >= W/2 ({big.sum()}): median {np.median(t[big]):7.2f} ms   "
              f"p99 {np.percentile(t[big], 99):7.2f} ms")
    print(f"        (CPU time of this process: median {np.median(c):7.2f} ms   p99 {np.percentile(c, 99):7.2f} ms;"
          f" wall time above includes waiting for a shared CPU)")
    if cbc:
        a = np.array(cbc)
        agree = np.abs(a[:, 2] - a[:, 3]) < 1e-7
        print(f"        PuLP+CBC on {len(a)} of them: median {np.median(a[:, 1]) * 1e3:7.2f} ms   "
              f"speed ratio CBC/HiGHS (medians) {np.median(a[:, 1]) / np.median(a[:, 0]):.1f}x   "
              f"objectives agree (1e-7) {agree.sum()}/{len(a)}   "
              f"max |diff| {np.abs(a[:, 2] - a[:, 3]).max():.2e}   HiGHS better on {(a[:, 2] > a[:, 3] + 1e-7).sum()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--widths", type=int, nargs="+", default=[16, 64, 256])
    p.add_argument("--problems", type=int, default=12, help="simulated searches per width")
    p.add_argument("--max-depth", type=int, default=12)
    p.add_argument("--lambda-c", type=float, default=1.0)
    p.add_argument("--lambda-s", type=float, default=None, help="default: the paper's value for W")
    p.add_argument("--cost", choices=["uniform", "tokens"], default="uniform")
    p.add_argument("--budget-frac", type=float, default=None, help="kv budget per step, as a fraction of the tokens of the whole frontier (so it binds)")
    p.add_argument("--relax", action="store_true", help="solve the LP relaxation and round")
    p.add_argument("--time-limit", type=float, default=1.0)
    p.add_argument("--cbc-max", type=int, default=40, help="CBC solves per width (each is a subprocess)")
    p.add_argument("--no-cbc", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    have_pulp = False
    if not args.no_cbc:
        try:
            import pulp  # noqa: F401
            have_pulp = True
        except ImportError:
            print("pulp not installed: HiGHS only")
    for width in args.widths:
        bench_width(width, args, have_pulp)


if __name__ == "__main__":
    main()
