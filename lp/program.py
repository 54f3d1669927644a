"""The ETS selection program as arrays: tree layout, sparse constraints, objective.

docs/algorithms.md, "ETS: the integer program". Local numbering puts
the N leaves first and the M ancestors after them, so a local node index *is* its
variable index; the K coverage variables follow:

    variables   [ x (N) | y (M) | c (K) ]
    local node  [ 0 .. N-1 | N .. N+M-1 ]      up[v] = local parent, -1 for a root

Ancestors are numbered parents-first (a parent's local index is smaller than its
child's, among ancestors), so one reverse sweep closes a kept set upwards.

Two exact reformulations, both with the same integer feasible set as docs/algorithms.md's:
- `y_j >= x_i` for every leaf i below j is written along tree edges, `z_parent >= z_child`
  (z = x for leaves, y for ancestors), and `y_j <= sum_{i below j} x_i` as
  `y_j <= sum_{children c of j} z_c`. By induction from the leaves both say "y_j = 1 iff
  some leaf below j is kept", with O(M+N) non-zeros instead of O(N * depth).
- Only x is declared integer (y too with a budget: see build_program). Given integral
  x, the two link rows force y = OR of its children (integral), and c_k, bounded by
  min(1, sum of its cluster's x) and rewarded by lambda_s / K > 0, is integral at any
  optimum. Fewer integers, smaller search. (The edge rows are also at least as tight
  in the LP relaxation as the path rows: they imply them.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import sparse


@dataclass(frozen=True)
class Layout:
    """The leaves, their distinct ancestors, and the links between them (local indices)."""

    leaves: np.ndarray      # global ids of the N leaves, in the caller's order
    ancestors: np.ndarray   # global ids of the M ancestors, parents first
    up: np.ndarray          # (N+M,) local parent index, -1 for a root

    @property
    def n(self) -> int:
        return len(self.leaves)

    @property
    def m(self) -> int:
        return len(self.ancestors)

    @property
    def nodes(self) -> np.ndarray:
        """Global ids of all N+M nodes, in local order."""
        return np.concatenate([self.leaves, self.ancestors])

    def closure(self, kept_leaves: np.ndarray) -> np.ndarray:
        """(N+M,) bool: the kept leaves and every ancestor of one of them."""
        alive = np.zeros(self.n + self.m, dtype=bool)
        alive[: self.n] = kept_leaves
        parent = self.up[: self.n][kept_leaves]
        alive[parent[parent >= 0]] = True
        up = self.up
        # Children have larger local indices than parents among ancestors: sweep backwards.
        for j in range(self.n + self.m - 1, self.n - 1, -1):
            if alive[j] and up[j] >= 0:
                alive[up[j]] = True
        return alive

    def path_sums(self, values: np.ndarray) -> np.ndarray:
        """(N+M,) the sum of `values` over each node's path from its root, itself included."""
        out = np.asarray(values, dtype=np.float64).copy()
        up = self.up
        for j in range(self.n, self.n + self.m):   # parents first: each parent is done
            if up[j] >= 0:
                out[j] += out[up[j]]
        has_parent = up[: self.n] >= 0
        out[: self.n][has_parent] += out[up[: self.n][has_parent]]
        return out

    def new_nodes(self, alive: np.ndarray, leaf: int) -> list[int]:
        """Local nodes that keeping `leaf` would add: it and its path up to the first alive node."""
        out: list[int] = []
        v = leaf
        while v >= 0 and not alive[v]:
            out.append(v)
            v = int(self.up[v])
        return out


def tree_layout(parents: Sequence[int] | np.ndarray, leaves: Sequence[int] | np.ndarray) -> Layout:
    """Collect the distinct ancestors of `leaves` (roots included) from a parent array.

    `parents[v]` is node v's parent (-1 for a root) over any superset of the nodes
    involved; nodes that are neither leaves nor their ancestors are ignored.
    """
    par = parents.tolist() if isinstance(parents, np.ndarray) else list(parents)
    leaf_ids = [int(v) for v in (leaves.tolist() if isinstance(leaves, np.ndarray) else leaves)]
    n = len(leaf_ids)
    local = {v: i for i, v in enumerate(leaf_ids)}
    if len(local) != n:
        raise ValueError("leaves must be distinct node indices")
    ancestors: list[int] = []
    up = [-1] * n
    for i, leaf in enumerate(leaf_ids):
        # Walk up to the first node already numbered (or past a root), remembering the
        # new ones; number them top-down so parents precede children.
        chain: list[int] = []
        v = par[leaf]
        while v != -1 and v not in local:
            chain.append(v)
            v = par[v]
        if v != -1 and local[v] < n:
            raise ValueError(f"leaf {leaf_ids[i]} lies below leaf {v}; leaves must not be ancestors of each other")
        above = local[v] if v != -1 else -1
        for a in reversed(chain):
            local[a] = n + len(ancestors)
            ancestors.append(a)
            up.append(above)
            above = local[a]
        up[i] = above
    return Layout(
        leaves=np.asarray(leaf_ids, dtype=np.int64),
        ancestors=np.asarray(ancestors, dtype=np.int64),
        up=np.asarray(up, dtype=np.int64),
    )


@dataclass(frozen=True)
class Program:
    """min c.z  s.t.  lb <= A z <= ub,  0 <= z <= 1,  z_i integer where integrality_i = 1."""

    layout: Layout
    c: np.ndarray
    A: sparse.csr_array
    lb: np.ndarray
    ub: np.ndarray
    integrality: np.ndarray
    # Kept for evaluating a kept set exactly, outside the solver.
    node_gain: np.ndarray          # (N+M,) objective gain of keeping each node (maximised)
    clusters: np.ndarray | None    # (N,) labels 0..K-1, or None without the coverage term
    cluster_gain: float            # lambda_s / K
    tokens: np.ndarray | None      # (N+M,) tokens per node, with a budget
    budget: float | None

    @property
    def k(self) -> int:
        return 0 if self.clusters is None else int(self.clusters.max()) + 1

    def objective(self, kept_leaves: np.ndarray) -> float:
        """The maximised objective (docs/algorithms.md) for a kept-leaf mask (ancestors implied)."""
        alive = self.layout.closure(kept_leaves)
        value = float(self.node_gain[alive].sum())
        if self.clusters is not None:
            value += self.cluster_gain * len(np.unique(self.clusters[kept_leaves]))
        return value

    def tokens_of(self, alive: np.ndarray) -> float:
        return 0.0 if self.tokens is None else float(self.tokens[alive].sum())


def build_program(
    layout: Layout,
    weights: np.ndarray,
    costs: np.ndarray,
    clusters: np.ndarray | None,
    lambda_c: float,
    lambda_s: float,
    tokens: np.ndarray | None = None,
    budget: float | None = None,
) -> Program:
    """Assemble the program. `weights` (N,) per leaf; `costs`, `tokens` (N+M,) in local order;
    `clusters` (N,) labels already numbered 0..K-1, or None."""
    n, m = layout.n, layout.m
    nm = n + m
    use_cover = clusters is not None and lambda_s > 0
    k = int(clusters.max()) + 1 if use_cover else 0
    nv = nm + k

    # Maximised gains; milp minimises, so c is their negation.
    node_gain = -lambda_c * np.asarray(costs, dtype=np.float64)
    node_gain[:n] += weights
    cluster_gain = lambda_s / k if k else 0.0
    c = np.concatenate([-node_gain, np.full(k, -cluster_gain)])

    # Columns [ x (N) | y (M) | c (K) ]; a node's column is its local index (z = x or y).
    # Rows, built as (row, col, val) triples:
    #
    #   block   one row per         entries                                bounds
    #   edge    non-root node v     +1 at z_up[v], -1 at z_v               >= 0
    #   active  ancestor j          +1 at y_j, -1 at each child's z        <= 0
    #   keep    (one row)           +1 at every x                          >= 1
    #   cover   cluster k           +1 at c_k, -1 at each x in cluster k   <= 0
    #   budget  (one row, optional) tokens_v at every z                    <= B
    #
    #   row index: [ edge 0..E-1 | active E..E+M-1 | keep E+M | cover (K) | budget ]
    #   so ancestor j (local N..N+M-1) owns active row E + (j - N).
    up = layout.up
    child = np.flatnonzero(up >= 0)
    e = len(child)
    erow = np.arange(e)
    rows = [erow, erow, e + (up[child] - n), np.arange(e, e + m)]
    cols = [up[child], child, child, np.arange(n, nm)]
    vals = [np.ones(e), -np.ones(e), -np.ones(e), np.ones(m)]
    keep = e + m
    rows.append(np.full(n, keep))
    cols.append(np.arange(n))
    vals.append(np.ones(n))
    lb = [np.zeros(e), np.full(m, -np.inf), [1.0]]
    ub = [np.full(e, np.inf), np.zeros(m), [np.inf]]
    nrows = keep + 1
    if k:
        rows += [nrows + np.arange(k), nrows + clusters]
        cols += [np.arange(nm, nv), np.arange(n)]
        vals += [np.ones(k), -np.ones(n)]
        lb.append(np.full(k, -np.inf))
        ub.append(np.zeros(k))
        nrows += k
    if budget is not None:
        rows.append(np.full(nm, nrows))
        cols.append(np.arange(nm))
        vals.append(np.asarray(tokens, dtype=np.float64))
        lb.append([-np.inf])
        ub.append([float(budget)])
        nrows += 1
    A = sparse.csr_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(nrows, nv)
    )
    integrality = np.zeros(nv)
    integrality[:n] = 1
    if budget is not None:
        # Integral y lets HiGHS derive knapsack cuts from the budget row (which involves
        # y): about 2x faster on budgeted search trees; without a budget it only slows.
        integrality[n:nm] = 1
    return Program(
        layout=layout,
        c=c,
        A=A,
        lb=np.concatenate(lb),
        ub=np.concatenate(ub),
        integrality=integrality,
        node_gain=node_gain,
        clusters=clusters if use_cover else None,
        cluster_gain=cluster_gain,
        tokens=None if tokens is None else np.asarray(tokens, dtype=np.float64),
        budget=None if budget is None else float(budget),
    )
