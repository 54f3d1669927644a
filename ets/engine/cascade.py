"""Decode attention split at a shared prefix (cascade attention), for tree-shaped batches.

In a tree search, the n samples of one node decode together and share that node's whole
path. Gathering the path's K/V once per sample reads it n times; here the samples of one
*cluster* (sequences locked on the same radix node, so with identical KV for the first
P positions) read it once:

    cluster c:  [ shared prefix, P_c tokens ][ own suffix of sample 0 ]
                [        (read once)        ][ own suffix of sample 1 ]  ...

    scores_pre[c, h, (g, r), j]  = q(c, g, head h*rep+r) . K_pre[c, j, h]    j < P_c
    scores_own[b, h, r, j]       = q(b, head h*rep+r) . K_own[b, j, h]        j < S_b
    softmax over [pre | own] together, then out = p_pre @ V_pre + p_own @ V_own.

Queries of a kv head are stacked (g, r) so that one batched matmul per cluster serves all
its samples and every query head sharing that kv head (grouped-query attention).
Scores are small ([., rep, L] vs K's [., D, L]), so moving them between the cluster layout
[C * Gmax] and the sequence layout [B] costs little.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ets.engine.invariant import attend_values, round_up
from ets.engine.pool import operands


def take(pool: torch.Tensor, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """pool [Hkv, N, D] gathered at slot `index` (any shape S) -> [Hkv, *S, D], into `out`
    (a contiguous tensor of that shape, e.g. a reused buffer) if given.

    One `index_select` along dim 0 per kv head, into one output: on CPU this is several
    times faster than advanced indexing or an `index_select` along dim 1."""
    flat = index.reshape(-1)
    if out is None:
        out = pool.new_empty(pool.shape[0], *index.shape, pool.shape[2])
    flat_out = out.view(pool.shape[0], flat.numel(), pool.shape[2])
    for h in range(pool.shape[0]):
        torch.index_select(pool[h], 0, flat, out=flat_out[h])
    return out


def take_keys(pool: torch.Tensor, index: torch.Tensor, out: torch.Tensor, staging: torch.Tensor) -> torch.Tensor:
    """`take`, transposed: pool [Hkv, N, D] at `index` [R, L] -> `out` [Hkv, R, D, L] (the
    kept key buffers' layout, workspace.py), through `staging` [Hkv, R, L, D]."""
    take(pool, index, out=staging)
    return out.copy_(staging.transpose(-1, -2))


@dataclass
class CascadeMeta:
    pre_slots: torch.Tensor     # [C, Pmax] slots of each cluster's shared prefix
    own_slots: torch.Tensor     # [B, cap >= Smax] slots of each sequence's own positions P_b..
    # [1, B, 1, Pmax + cap], 0 or -inf: over the prefix columns, 0 where j < P_(cluster of
    # b); over the own ones, 0 where j < S_b (always >= 1: the new token). One tensor, so
    # one add masks the scores of both regions.
    bias: torch.Tensor
    own_cols: torch.Tensor      # [B] own column of each new token (S_b - 1)
    dst: torch.Tensor           # [B] index of sequence b in the [C * Gmax] cluster layout
    g_max: int
    # The zero-padded cluster-layout scratch of this forward, shared by its layers: each
    # layer writes the same `dst` rows, so the padding, zeroed once, stays zero.
    _scratch: dict = field(default_factory=dict)

    @property
    def identity(self) -> bool:
        """Every cluster has Gmax members: the cluster layout is the sequence layout (dst is
        arange(B), the sequences being sorted by cluster), so nothing moves between them."""
        return self.pre_slots.shape[0] * self.g_max == self.dst.numel()

    def advance(self) -> "CascadeMeta":
        """This metadata one decode step further, in place: each sequence's own part grows by
        its new token (its column joins `own_bias`). Only for the same sequences decoding on
        over kept buffers: `own_slots` is not updated (it only serves a gather, and a gather
        builds anew)."""
        self.own_cols += 1
        rows = torch.arange(self.own_cols.numel(), device=self.own_cols.device)
        self.bias[0, rows, 0, self.pre_slots.shape[1] + self.own_cols] = 0.0
        return self

    def to_clusters(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """x [Hkv, B, ...] in the cluster layout [Hkv, C * Gmax, ...] (padding rows zero)."""
        if self.identity:
            return x
        shape = (x.shape[0], self.pre_slots.shape[0] * self.g_max, *x.shape[2:])
        buf = self._scratch.get(name)
        if buf is None or buf.shape != shape or buf.dtype != x.dtype:
            buf = self._scratch[name] = x.new_zeros(shape)
        return buf.index_copy_(1, self.dst, x)

    def to_sequences(self, y: torch.Tensor) -> torch.Tensor:
        """y [Hkv, C * Gmax, ...] back in the sequence layout [Hkv, B, ...]."""
        return y if self.identity else y.index_select(1, self.dst)


def prefix_columns(longest: int, table_width: int, key_block: int) -> int:
    """The prefix region's columns for a longest shared prefix of `longest` tokens: padded
    to a multiple of `key_block` (masked; invariant.KEY_BLOCK), so that a sequence's sums
    run in the same order whatever its batch-mates' prefixes are."""
    return min(round_up(max(1, longest), key_block), table_width)


def build(rows: torch.Tensor, table: torch.Tensor, shared: list[int], cluster_of: list[int],
          member_of: list[int], ends: list[int], device, cap: int | None = None, key_block: int = 1,
          min_members: int = 1) -> CascadeMeta:
    """Metadata for B decode sequences sorted by cluster. `rows[b]` is b's table row,
    `shared[b]` its cluster's prefix length, `ends[b]` its context length after this step;
    `cap` (>= Smax): the own columns the gather buffers hold; `min_members`: the rows of a
    cluster's prefix products, in samples, at least (padded: invariant.product_rows)."""
    n_clusters = cluster_of[-1] + 1
    g_max = max(max(member_of) + 1, min_members)
    first = [0] * n_clusters  # first sequence of each cluster
    p_len = [0] * n_clusters
    for b in range(len(rows) - 1, -1, -1):
        first[cluster_of[b]], p_len[cluster_of[b]] = b, shared[b]
    p_max = prefix_columns(max(p_len), table.shape[1], key_block)
    pre_slots = table[:, :p_max].index_select(0, rows[torch.tensor(first, device=device)])
    p_len_t = torch.tensor(p_len, device=device)
    seq_p = p_len_t[torch.tensor(cluster_of, device=device)]
    pre_allowed = torch.arange(p_max, device=device) < seq_p[:, None]
    own = [e - s for e, s in zip(ends, shared)]
    s_max = max(own)
    shared_t = torch.tensor(shared, device=device)
    j = torch.arange(max(s_max, cap or 0), device=device)
    cols = (shared_t[:, None] + j).clamp(max=table.shape[1] - 1)  # beyond S_b: stale, masked
    own_slots = table[rows[:, None], cols]
    own_t = torch.tensor(own, device=device)
    # every own column is scored (see attention._attend_decode): those past S_b masked
    bias = _bias(torch.cat([pre_allowed, j < own_t[:, None]], dim=1))
    dst = torch.tensor([c * g_max + g for c, g in zip(cluster_of, member_of)], device=device)
    return CascadeMeta(pre_slots, own_slots, bias, own_t - 1, dst, g_max)


def _bias(allowed: torch.Tensor) -> torch.Tensor:
    """[B, L] bool -> [1, B, 1, L] additive float bias (0 or -inf)."""
    return torch.zeros(allowed.shape, device=allowed.device).masked_fill_(~allowed, float("-inf"))[None, :, None, :]


def attend(meta: CascadeMeta, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
           scaling: float | None, decode=None, layer: int = 0, new_kv=None) -> torch.Tensor:
    """q [B, H, D] (one query per sequence) -> [B, H, D]. Pools are [Hkv, N, D].

    `decode` (an attention.DecodeMeta): the prefix and own K/V live in its kept buffers
    (gathered on a rebuild; else only `new_kv`, the new tokens' [Hkv, B, D], is written),
    the prefix keys transposed (workspace.TRANSPOSED_KEYS)."""
    n_seq, heads, dim = q.shape
    kv_heads = k_pool.shape[0]
    rep = heads // kv_heads
    n_clusters, p_max = meta.pre_slots.shape
    cg = n_clusters * meta.g_max
    scaling = dim ** -0.5 if scaling is None else scaling
    q4 = (q * scaling).view(n_seq, kv_heads, rep, dim).transpose(0, 1)  # [Hkv, B, rep, D]
    k_pre, v_pre, k_own, v_own = _regions(meta, k_pool, v_pool, decode, layer, new_kv)
    # each region in the dtype its matmuls take (stored, or widened when small: pool.operands)
    k_pre, v_pre = operands(k_pre, v_pre, q.dtype)
    k_own, v_own = operands(k_own, v_own, q.dtype)

    # prefix scores in the cluster layout [Hkv, C, Gmax*rep, Pmax], then per sequence
    qc = meta.to_clusters("q", q4.to(k_pre.dtype))
    s_pre = torch.matmul(qc.reshape(kv_heads, n_clusters, -1, dim), k_pre)
    s_pre = meta.to_sequences(s_pre.view(kv_heads, cg, rep, p_max))  # [Hkv, B, rep, Pmax]

    # own scores [Hkv, B, rep, cap]: every column of the (contiguous) buffers, those past
    # S_b masked, as in attention._attend_decode
    s_own = torch.matmul(q4.to(k_own.dtype), k_own.transpose(-1, -2))

    scores = torch.cat([s_pre, s_own], dim=-1).add_(meta.bias)
    probs = scores.float().softmax(dim=-1)
    p_pre, p_own = probs.split([p_max, probs.shape[-1] - p_max], dim=-1)
    # each sequence's own columns: always rep rows at a time (attend_values)
    out = attend_values(p_own.to(v_own.dtype), v_own, fixed_rows=True).to(q.dtype)  # [Hkv, B, rep, D]

    pc = meta.to_clusters("p", p_pre.to(v_pre.dtype))
    out_pre = attend_values(pc.reshape(kv_heads, n_clusters, -1, p_max), v_pre)
    out += meta.to_sequences(out_pre.view(kv_heads, cg, rep, dim))
    return out.transpose(0, 1).reshape(n_seq, heads, dim)


def _regions(meta: CascadeMeta, k_pool, v_pool, decode, layer: int, new_kv):
    """K/V of the prefixes, the keys transposed: [Hkv, C, D, Pmax], [Hkv, C, Pmax, D]; and
    of the own positions [Hkv, B, cap, D]."""
    if decode is None:
        return (take(k_pool, meta.pre_slots).transpose(-1, -2), take(v_pool, meta.pre_slots),
                take(k_pool, meta.own_slots), take(v_pool, meta.own_slots))
    kv_heads, dim = k_pool.shape[0], k_pool.shape[2]
    key = decode.layer_key(layer)
    k_pre, v_pre = decode.kv.buffers("pre", key, (kv_heads, *meta.pre_slots.shape, dim))
    k_own, v_own = decode.kv.buffers("own", key, (kv_heads, *meta.own_slots.shape, dim))
    if decode.must_gather():
        take_keys(k_pool, meta.pre_slots, k_pre, decode.kv.scratch(v_pre.shape))
        take(v_pool, meta.pre_slots, out=v_pre)
    if decode.must_gather() or decode.grow:  # a growth: the prefixes (same clusters, same columns) stay
        take(k_pool, meta.own_slots, out=k_own)
        take(v_pool, meta.own_slots, out=v_own)
    else:  # the prefixes are unchanged; each sequence's new token goes into its own column
        c = decode.compact
        if c is not None:  # some sequences left: their rows (and emptied clusters) go
            decode.kv.compact("own", key, (kv_heads, c.old_rows, *meta.own_slots.shape[1:], dim), k_own.shape, c.keep)
            decode.kv.compact("pre", key, (kv_heads, c.old_clusters, c.old_pre_cols, dim), v_pre.shape, c.keep_clusters)
        decode.write_new(k_own, meta.own_cols, new_kv[0])
        decode.write_new(v_own, meta.own_cols, new_kv[1])
    return k_pre, v_pre, k_own, v_own
