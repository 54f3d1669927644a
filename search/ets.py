"""ETS (Hooper et al., arXiv 2502.13575): prune the frontier with an integer program that
trades outcome weight against KV cost and semantic coverage, then spend the width with
REBASE over the leaves it kept. docs/algorithms.md, "ETS: the integer program", describes it:

1. O_i = REBASE allocation counts / their sum (search.rebase.allocate).
2. Clusters of the candidates' newest step texts, only when lambda_s > 0, N > 1 and the
   texts are not all identical (lp.clustering; model loaded once per strategy, lazily).
   With `embedder: policy` or `prm` the vectors clustered are the candidates' own
   `Node.embedding`s, pooled from that model's hidden states by the search loop
   (`step_embeddings`); nothing is embedded here.
3. Costs per node: 'uniform' 1/(M+N), or 'tokens' = node tokens / tokens of all M+N nodes
   (root prompt included). Solve (lp.solve_selection), under `lp_time_limit`.
4. REBASE again over the kept leaves (pruned leaves score -inf), handing out all of
   `remaining`. Beyond the paper, `final_pass: keep_counts` keeps each kept leaf's
   REBASE count and hands out only the pruned leaves' children, by REBASE over the kept
   leaves: where the program pruned only leaves REBASE gave nothing, the allocation is
   REBASE's, so the two settings tell what the renormalisation itself costs.

With `compat: ets_code` both REBASE passes are the ETS code's (search/compat.py): the
first ranks ties earlier first, the final one later first by s / T, with its division by T
before the float32 exponentials; either can hand out more children than `remaining`. The
final pass runs on a lone candidate too (its float32 share can round up: a leaf of 0.06
gets 14 children of 13), the root, scored 1.0, is selected so, and the children are made in
the final pass's order.

Beyond the paper: `kv_budget` caps the tokens of the kept nodes; `lp_relax` solves the
LP relaxation and rounds. When the solver fails or hits its time limit the REBASE
allocation is kept (with a budget: its best leaves that fit), counted in
`metrics["lp_fallback"]` and logged.

metrics (per problem, in `frontier.metrics`): lp_solves, lp_seconds (build + solve),
cluster_seconds (embedding and clustering this problem's steps), embed_seconds and
embedded_steps (a sentence embedder's part of that, and the step texts it was asked for;
the hidden-state embedders count theirs in the policy's or the reward's stats), lp_fallback, lp_budget_infeasible, lp_kept, lp_pruned; and where
ETS's allocation departs from REBASE's on the same frontier: lp_pruned_weighted (pruned
leaves that REBASE gave children), lp_pruned_width (those children) and lp_moved_width
(children the final pass gives leaves beyond their REBASE counts: at least
lp_pruned_width; the rest comes of the final pass renormalising over fewer leaves, which
moves width to the best-scored even where only leaves REBASE gave nothing were pruned).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import numpy as np

from ets.config import HIDDEN_EMBEDDERS
from ets.tree import Node
from ets.lp import FALLBACK_STATUSES, StepClusterer, cluster_embeddings, prepare_embedder, solve_selection
from ets.strategies.base import Allocation, Frontier, Strategy, register
from ets.strategies.compat import EARLIER, LATER, ROOT_SCORE, in_code_order, reference_allocate, reference_rank
from ets.strategies.rebase import allocate

log = logging.getLogger(__name__)


def frontier_arrays(candidates: list[Node]) -> tuple[list[int], list[int], list[Node]]:
    """Compact parent array over the candidates (0..N-1) and their distinct ancestors.

    Returns (parents, leaves, nodes): `nodes[v]` is the tree node of local index v.
    """
    local = {c.id: i for i, c in enumerate(candidates)}
    nodes = list(candidates)
    parents = [-1] * len(candidates)
    for i, cand in enumerate(candidates):
        child, node = i, cand.parent
        while node is not None:
            seen = node.id in local
            if not seen:
                local[node.id] = len(nodes)
                nodes.append(node)
                parents.append(-1)
            parents[child] = local[node.id]
            if seen:
                break
            child, node = local[node.id], node.parent
    return parents, list(range(len(candidates))), nodes


@register("ets")
class ETS(Strategy):
    def __init__(self, config):
        super().__init__(config)
        self._clusterer: StepClusterer | None = None

    @property
    def clusterer(self) -> StepClusterer:
        if self._clusterer is None:
            self._clusterer = StepClusterer(self.config.embedder, self.config.cluster_threshold)
        return self._clusterer

    @property
    def _sentence_embedder(self) -> bool:
        """Whether ETS embeds the step texts itself (a sentence model), clustering at all."""
        return self.config.lambda_s > 0 and self.config.embedder not in HIDDEN_EMBEDDERS

    def step_embeddings(self) -> str | None:
        cfg = self.config
        return cfg.embedder if cfg.lambda_s > 0 and cfg.embedder in HIDDEN_EMBEDDERS else None

    def warm_up(self) -> None:
        if self._sentence_embedder:
            self.clusterer.model  # noqa: B018  (loads the embedder once, outside timed work)

    def prefetch(self) -> None:
        if self._sentence_embedder:
            prepare_embedder(self.config.embedder)

    def select(self, frontier: Frontier) -> Allocation:
        cfg = self.config
        cands, remaining = frontier.candidates, frontier.remaining
        scores = frontier.scores()
        if cfg.ets_code:
            counts = reference_allocate(scores, remaining, cfg.softmax_temperature, ties=EARLIER)
        else:
            counts = allocate(scores, remaining, cfg.softmax_temperature)
        if len(cands) > 1 and remaining > 0:
            kept = self._prune(cands, counts, frontier.metrics)
            pruned = [s if k else -np.inf for s, k in zip(scores, kept)]
            keep_counts = cfg.final_pass == "keep_counts"
            # what the final pass hands out: everything, or the pruned leaves' children
            width = sum(n for n, k in zip(counts, kept) if not k) if keep_counts else remaining
            if cfg.ets_code:
                final = self._code_final_pass(pruned, width)
            else:
                final = allocate(pruned, width, cfg.softmax_temperature)
            if keep_counts:
                final = [f + (n if k else 0) for f, n, k in zip(final, counts, kept)]
            _count_departure(frontier.metrics, counts, final, kept)
            counts = final
            scores = pruned
        elif cfg.ets_code:   # one leaf: the code's program must keep it, and its final pass still runs
            counts = self._code_final_pass(scores, remaining)
        if cfg.ets_code:     # the code makes the children in its final pass's order
            return in_code_order(cands, counts, reference_rank(scores, cfg.softmax_temperature, scale_first=True))
        return {c.id: k for c, k in zip(cands, counts) if k > 0}

    def root_children(self, width: int) -> int:
        if self.config.ets_code:   # the code's root: one leaf scored 1.0 (its outcome weight is 1 whatever its count)
            return self._code_final_pass([ROOT_SCORE], width)[0]
        return width

    def _code_final_pass(self, scores: list[float], width: int) -> list[int]:
        return reference_allocate(scores, width, self.config.softmax_temperature, ties=LATER, scale_first=True)

    def _prune(self, cands: list[Node], counts: list[int], metrics: Counter[str]) -> np.ndarray:
        cfg = self.config
        weights = np.asarray(counts, dtype=np.float64) / sum(counts)
        parents, leaves, nodes = frontier_arrays(cands)
        tokens = np.asarray([n.num_tokens for n in nodes], dtype=np.float64)
        if cfg.cost == "tokens" and tokens.sum() > 0:
            costs = tokens / tokens.sum()
        else:   # 'uniform' (and 'tokens' with no tokens at all, where the ratio is undefined)
            costs = np.full(len(nodes), 1.0 / len(nodes))
        clusters = None
        texts = [c.text for c in cands]
        if cfg.lambda_s > 0 and len(set(texts)) > 1:
            t0 = time.perf_counter()
            if self.step_embeddings() is None:
                # This problem's texts alone, in one batch: a batch shared with other problems
                # would move the vectors' last bits (lp.clustering), and so its clusters.
                embedding = self.clusterer.seconds
                clusters = self.clusterer.cluster(texts)
                metrics["embed_seconds"] += self.clusterer.seconds - embedding
                metrics["embedded_steps"] += len(texts)
            else:
                clusters = cluster_embeddings(_embeddings(cands, cfg.embedder), cfg.cluster_threshold)
            metrics["cluster_seconds"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        kept, _, status = solve_selection(
            parents, leaves, weights, costs, clusters, cfg.lambda_c, cfg.lambda_s,
            budget=cfg.kv_budget, token_counts=tokens, relax=cfg.lp_relax, time_limit=cfg.lp_time_limit,
        )
        metrics["lp_seconds"] += time.perf_counter() - t0
        metrics["lp_solves"] += 1
        if status in FALLBACK_STATUSES:
            metrics["lp_fallback"] += 1
            log.warning("ETS solver %s on %d candidates: keeping the REBASE allocation", status, len(cands))
        elif status == "budget_infeasible":
            metrics["lp_budget_infeasible"] += 1
            log.warning("kv_budget=%s is below every candidate's path: keeping the cheapest one", cfg.kv_budget)
        metrics["lp_kept"] += int(kept.sum())
        metrics["lp_pruned"] += int((~kept).sum())
        return kept


def _embeddings(cands: list[Node], embedder: str) -> np.ndarray:
    """The candidates' hidden-state embeddings, stacked ([N, hidden], float64)."""
    missing = [c.id for c in cands if c.embedding is None]
    if missing:
        raise RuntimeError(f"ETS with embedder {embedder!r}: candidates {missing} carry no embedding; the search loop "
                           f"sets Node.embedding from the {embedder}'s hidden states")
    return np.stack([np.asarray(c.embedding, dtype=np.float64) for c in cands])


def _count_departure(metrics: Counter[str], rebase: list[int], final: list[int], kept: np.ndarray) -> None:
    """Where the final allocation departs from REBASE's first pass (module doc, metrics)."""
    weighted = [n for n, k in zip(rebase, kept) if n > 0 and not k]
    metrics["lp_pruned_weighted"] += len(weighted)
    metrics["lp_pruned_width"] += sum(weighted)
    metrics["lp_moved_width"] += sum(max(0, b - a) for a, b in zip(rebase, final))
