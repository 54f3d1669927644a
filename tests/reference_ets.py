"""TEST-ONLY: an independent model of the ETS public code's search, to compare whole searches
of `search.compat: ets_code` with it node for node.

What is modelled is the search of `SqueezeAILab/ETS` rebase.py (its class `Tree`): the loop
of `select_and_expand`, the four selections (`select_beam_search`, `select_dvts`,
`select_softmax` = REBASE, `select_softmax_costmodel` = ETS) and `get_kv_size`. Their rules
were read there and written again here in this project's test terms; nothing here is
imported by the project, and nothing here imports the project's strategies, so a rule the
project gets wrong shows up as a difference.

The two searches run in one scripted world (tests/scripted_world.py): a node is named by
its path of child indices (the k-th child made under its parent), and its score, whether it
is a leaf and its tokens are a fixed function of that path. Scores come from a short list,
so ties (and scores one ulp apart) are common: the tie rules are what a difference would
come from. Two searches are identical when they made the same nodes (by path) and the same
sequence of KV figures (`kv_size_ref_steps`).

Modelled as the code has it: the root scored 1.0 and selected like any frontier; children
made in the order of the selection's list; the float32 REBASE loops (no guard in REBASE,
`sum > 0` in the ETS passes); the ETS program's objective with `lambda_c = 0` read as +1e-4
per kept node; DVTS's cycled split, its subtree widths that never shrink, and its KV count
of a cycled survivor once per repeat. One thing is not the code's: the program is solved
exactly by enumeration (the code's CBC may return a set that is not optimal), and among
equal-objective sets the largest is taken; a search that met such a tie is reported as such.
Clustering (lambda_s) is not modelled: the comparisons run with lambda_s = 0.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from tests.scripted_world import Steps, World, node_paths, run_search, tie_prone_scores

CODE_PROMPT_TOKENS = 2        # len(tokenizer(text)): the keys of the tokenizer's output
CODE_MAX_DEPTH = 25           # the code's loop stops after 25 expansions


# ------------------------------------------------------------------ the code's tree

@dataclass(eq=False)
class CodeNode:
    id: int
    path: tuple[int, ...]
    score: float
    leaf: bool
    step_tokens: int
    parent: "CodeNode | None"
    depth: int
    cum_tokens: int
    n_children: int = 0
    dvts_id: int | None = None


@dataclass
class CodeOutcome:
    paths: set[tuple[int, ...]]
    kv_steps: list[int]
    lp_ties: int = 0             # ETS selections with more than one optimal kept set
    raised: str | None = None    # the exception the code raises, if it does


class CodeSearch:
    """One search as the ETS code runs it (see the module doc)."""

    def __init__(self, world: Steps, method: str, width: int, temperature: float, max_tokens: int,
                 fixed_width: int = -1, lambda_c: float = 1.0):
        self.world, self.method, self.T, self.max_tokens = world, method, temperature, max_tokens
        self.fixed_width, self.lambda_c = fixed_width, lambda_c
        self.width = self.remaining = width
        self.root = CodeNode(0, (), 1.0, False, CODE_PROMPT_TOKENS, None, 0, CODE_PROMPT_TOKENS)
        self.nodes = [self.root]
        self.by_depth: dict[int, list[CodeNode]] = {0: [self.root]}
        self.kv_steps: list[int] = []
        self.lp_ties = 0
        if method == "dvts":
            subtrees = fixed_width if fixed_width > -1 else math.ceil(math.sqrt(width))
            self.dvts_widths = [width // subtrees] * subtrees
        else:
            self.dvts_widths = None

    def run(self) -> CodeOutcome:
        try:
            for depth in range(CODE_MAX_DEPTH):
                if not self._select_and_expand(depth):
                    break
        except (ValueError, OverflowError, ZeroDivisionError) as exc:
            return CodeOutcome({n.path for n in self.nodes}, self.kv_steps, self.lp_ties, type(exc).__name__)
        return CodeOutcome({n.path for n in self.nodes}, self.kv_steps, self.lp_ties)

    # -------------------------------------------------------------- the loop
    def _select_and_expand(self, depth: int) -> bool:
        cands = []
        for node in self.by_depth.get(depth, []):
            if node.leaf or node.cum_tokens >= self.max_tokens:
                self.remaining -= 1
                if self.dvts_widths is not None and node.dvts_id is not None:
                    self.dvts_widths[node.dvts_id] -= 1
            else:
                cands.append(node)
        if self.remaining <= 0 or not cands:
            return False
        select = {"beam": self._beam, "dvts": self._dvts, "rebase": self._rebase, "ets": self._ets}[self.method]
        listed, counts = select(cands, [c.score for c in cands], self.remaining, depth)
        self.kv_steps.append(self._kv(listed))
        for node, n in zip(listed, counts):
            if n >= 1:
                self._expand(node, n)
        return True

    def _expand(self, parent: CodeNode, n: int) -> None:
        for _ in range(n):
            path = parent.path + (parent.n_children,)
            parent.n_children += 1
            score, leaf, tokens = self.world.step(path)
            child = CodeNode(len(self.nodes), path, score, leaf, tokens, parent, parent.depth + 1,
                             parent.cum_tokens + tokens)
            self.nodes.append(child)
            self.by_depth.setdefault(child.depth, []).append(child)

    @staticmethod
    def _kv(listed: list[CodeNode]) -> int:
        """Each listed node's own tokens once per listing; every ancestor once."""
        own = sum(n.step_tokens for n in listed)
        ancestors: dict[int, int] = {}
        for n in listed:
            a = n.parent
            while a is not None:
                ancestors[a.id] = a.step_tokens
                a = a.parent
        return own + sum(ancestors.values())

    # -------------------------------------------------------------- the selections
    @staticmethod
    def _ascending_reversed(items: list, key) -> list:
        """The code's ranking: an ascending stable sort, reversed (best first, later first on ties)."""
        return sorted(items, key=key)[::-1]

    def _beam(self, cands, scores, width, depth):
        ranked = self._ascending_reversed(list(zip(cands, scores)), key=lambda p: p[1])
        keep = self.fixed_width if self.fixed_width > 0 else math.ceil(math.sqrt(width))
        per = width if depth == 0 else math.ceil(width / keep)
        return [n for n, _ in ranked], [per if k < keep else 0 for k in range(len(ranked))]

    def _dvts(self, cands, scores, width, depth):
        subtrees = self.fixed_width if self.fixed_width > 0 else math.ceil(math.sqrt(self.width))
        pairs = list(zip(cands, scores))
        best: dict[int, tuple[int, float]] = {}
        if depth == 1:
            if len(pairs) < subtrees:
                pairs = list(itertools.islice(itertools.cycle(pairs), subtrees))
            size, extra = divmod(len(pairs), subtrees)
            start = 0
            for g in range(subtrees):
                end = start + size + (1 if extra > 0 else 0)
                extra -= 1 if extra > 0 else 0
                best[g] = (pairs[start][0].id, pairs[start][1])
                for node, s in pairs[start:end]:
                    node.dvts_id = g
                    if s > best[g][1]:
                        best[g] = (node.id, s)
                start = end
        else:
            for node, s in pairs:
                if node.parent is None:
                    continue
                node.dvts_id = node.parent.dvts_id
                key = node.parent.id
                if key not in best or s > best[key][1]:
                    best[key] = (node.id, s)
        kept = {v[0] for v in best.values()}
        listed, counts = [], []
        for node, _ in pairs:
            listed.append(node)
            if depth == 0:
                counts.append(self.width)
            else:
                counts.append(self.dvts_widths[node.dvts_id] if node.id in kept else 0)
        return listed, counts

    @staticmethod
    def _float32_loop(weights: torch.Tensor, width: int, guarded: bool) -> list[int]:
        """ceil(width * w / sum) down the list; width and the float32 sum decremented."""
        total = weights.sum()
        counts = []
        for w in weights:
            if guarded and not total > 0:
                counts.append(0)
                continue
            n = math.ceil(width * w / total)
            counts.append(n)
            width -= n
            total -= w
        return counts

    def _rebase(self, cands, scores, width, depth):
        ranked = self._ascending_reversed(list(zip(cands, scores)), key=lambda p: p[1])
        weights = torch.exp(torch.tensor([s for _, s in ranked]) / self.T)
        return [n for n, _ in ranked], self._float32_loop(weights, width, guarded=False)

    def _ets(self, cands, scores, width, depth):
        # the outcome weights: REBASE ranked descending (earlier first on ties), guarded
        order = sorted(range(len(cands)), key=lambda i: scores[i], reverse=True)
        first = self._float32_loop(torch.exp(torch.tensor([scores[i] for i in order]) / self.T), width, guarded=True)
        outcome = [0] * len(cands)
        for k, i in enumerate(order):
            outcome[i] = first[k]
        weights = [o / sum(outcome) for o in outcome]
        kept = self._solve(cands, weights)
        # the final pass: s / T (float64) for kept leaves, -inf for pruned, ranked ascending-reversed
        scaled = [s / self.T if k else -math.inf for s, k in zip(scores, kept)]
        ranked = self._ascending_reversed(list(zip(cands, scaled)), key=lambda p: p[1])
        final = self._float32_loop(torch.exp(torch.tensor([v for _, v in ranked])), width, guarded=True)
        return [n for n, _ in ranked], final

    def _solve(self, leaves: list[CodeNode], weights: list[float]) -> list[bool]:
        """The code's program, solved exactly: maximise sum O_i x_i + lc * c * (kept leaves +
        kept branches), c = 1/(M+N), lc = +1e-4 at lambda_c = 0 else -lambda_c; a branch is
        kept when any leaf under it is; at least one leaf kept."""
        n = len(leaves)
        branch_leaves: dict[int, set[int]] = {}
        for i, leaf in enumerate(leaves):
            a = leaf.parent
            while a is not None:
                branch_leaves.setdefault(a.id, set()).add(i)
                a = a.parent
        m = len(branch_leaves)
        lc = 1e-4 if self.lambda_c == 0 else -self.lambda_c
        cost = 1.0 / (m + n)
        # branches with the same leaves are kept together: one column each, with a multiplicity
        groups = Counter(frozenset(s) for s in branch_leaves.values())
        masks = np.array([sum(1 << i for i in g) for g in groups], dtype=np.int64)
        mult = np.array(list(groups.values()), dtype=np.float64)
        subsets = np.arange(1, 1 << n, dtype=np.int64)
        bits = ((subsets[:, None] >> np.arange(n)) & 1).astype(np.float64)
        covered = ((subsets[:, None] & masks[None, :]) != 0).astype(np.float64)
        objective = bits @ np.asarray(weights) + lc * cost * (bits.sum(1) + covered @ mult)
        best = objective.max()
        optimal = np.flatnonzero(objective >= best - 1e-12)
        if len(optimal) > 1:
            self.lp_ties += 1
        chosen = optimal[np.argmax(bits[optimal].sum(1))]
        return [bool(b) for b in bits[chosen]]


# ------------------------------------------------------------------ the project's search

@dataclass
class ProjectOutcome:
    paths: set[tuple[int, ...]]
    kv_steps: list[int]
    raised: str | None = None


def project_search(world: Steps, method: str, width: int, temperature: float, max_tokens: int,
                   fixed_width: int = -1, lambda_c: float = 1.0, compat: str = "ets_code") -> ProjectOutcome:
    """The project's whole search over the same world, by default in `compat: ets_code`."""
    try:
        record = run_search(world, method=method, width=width, softmax_temperature=temperature,
                            max_tokens=max_tokens, max_depth=CODE_MAX_DEPTH, fixed_width=fixed_width,
                            lambda_c=lambda_c, lambda_s=0.0, compat=compat)
    except (ValueError, OverflowError, ZeroDivisionError) as exc:
        return ProjectOutcome(set(), [], type(exc).__name__)
    return ProjectOutcome(set(node_paths(record)), list(record["kv_size_ref_steps"]))


# ------------------------------------------------------------------ comparing

@dataclass
class Tally:
    """How many searches came out the same, tree and KV figures, and how many differed."""

    identical: int = 0
    kv_only: int = 0             # the same tree, a different KV figure
    tie: int = 0                 # a different tree after an equal-objective tie of the program
    differ: int = 0
    code_raises: int = 0         # the code raises; the project did not raise the same way
    both_raise: int = 0
    examples: list = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.identical + self.kv_only + self.tie + self.differ + self.code_raises + self.both_raise


def compare_one(world: Steps, method: str, compat: str = "ets_code", **kw) -> str:
    code = CodeSearch(world, method, **kw).run()
    mine = project_search(world, method, compat=compat, **kw)
    if code.raised:
        return "both_raise" if mine.raised else "code_raises"
    if mine.raised:
        return "differ"
    if code.paths == mine.paths:
        return "identical" if code.kv_steps == mine.kv_steps else "kv_only"
    return "tie" if code.lp_ties else "differ"


def settings(method: str, n: int, seed: int = 0):
    """`n` search settings for `method`, drawn from widths, temperatures and worlds that hit
    the cases where the code departs (the root's extra child at W = 15 and 29, ties across
    parents, DVTS's cycled split, tiny T)."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        width = int(rng.choice([4, 8, 9, 15, 16, 29, 30] if method != "ets" else [4, 8, 9, 15, 16]))
        temperature = float(rng.choice([0.2, 0.2, 0.1, 0.05, 0.03] if method in ("rebase", "ets") else [0.2]))
        p_leaf = float(rng.choice([0.15, 0.3, 0.7] if method == "dvts" else [0.15, 0.3]))
        world = World(seed * 100_003 + i, tie_prone_scores(temperature), p_leaf)
        kw = dict(width=width, temperature=temperature, max_tokens=int(rng.integers(6, 14)))
        if method in ("beam", "dvts") and rng.random() < 0.3:
            kw["fixed_width"] = int(rng.integers(2, min(width, 6) + 1))
        if method == "ets":
            kw["lambda_c"] = float(rng.choice([0.0, 0.5, 1.0, 2.0]))
        yield world, kw


def tally(method: str, n: int, seed: int = 0, compat: str = "ets_code") -> Tally:
    """The outcomes of `n` searches of `method` (`settings`), the project's run in `compat`."""
    t = Tally()
    for world, kw in settings(method, n, seed):
        outcome = compare_one(world, method, compat=compat, **kw)
        setattr(t, outcome, getattr(t, outcome) + 1)
        if outcome not in ("identical", "both_raise") and len(t.examples) < 5:
            t.examples.append((outcome, world, kw))
    return t


if __name__ == "__main__":   # PYTHONPATH=. python -m tests.reference_ets [N]: the counts for every method
    import sys

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    for name in ("rebase", "beam", "dvts", "ets"):
        t = tally(name, count)
        print(f"{name:7s} identical {t.identical}/{t.total}  kv_only {t.kv_only}  tie {t.tie}  differ {t.differ}  "
              f"code_raises {t.code_raises}  both_raise {t.both_raise}")
        for ex in t.examples[:2]:
            print("   e.g.", ex)
