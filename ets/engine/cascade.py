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

from dataclasses import dataclass

import torch


def take(pool: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """pool [Hkv, N, D] gathered at slot `index` (any shape S) -> [Hkv, *S, D].

    One `index_select` along dim 0 per kv head, into one output: on CPU this is several
    times faster than advanced indexing or an `index_select` along dim 1."""
    flat = index.reshape(-1)
    out = pool.new_empty(pool.shape[0], flat.numel(), pool.shape[2])
    for h in range(pool.shape[0]):
        torch.index_select(pool[h], 0, flat, out=out[h])
    return out.view(pool.shape[0], *index.shape, pool.shape[2])


@dataclass
class CascadeMeta:
    pre_slots: torch.Tensor     # [C, Pmax] slots of each cluster's shared prefix
    pre_bias_seq: torch.Tensor  # [1, B, 1, Pmax] 0 where j < P_(cluster of b), else -inf
    own_slots: torch.Tensor     # [B, Smax] slots of each sequence's own positions P_b..
    own_bias: torch.Tensor      # [1, B, 1, Smax] 0 where j < S_b (always >= 1: the new token)
    dst: torch.Tensor           # [B] index of sequence b in the [C * Gmax] cluster layout
    g_max: int


def build(rows: torch.Tensor, table: torch.Tensor, shared: list[int], cluster_of: list[int],
          member_of: list[int], ends: list[int], device) -> CascadeMeta:
    """Metadata for B decode sequences sorted by cluster. `rows[b]` is b's table row,
    `shared[b]` its cluster's prefix length, `ends[b]` its context length after this step."""
    n_clusters = cluster_of[-1] + 1
    g_max = max(member_of) + 1
    first = [0] * n_clusters  # first sequence of each cluster
    p_len = [0] * n_clusters
    for b in range(len(rows) - 1, -1, -1):
        first[cluster_of[b]], p_len[cluster_of[b]] = b, shared[b]
    p_max = max(1, max(p_len))
    pre_slots = table[rows[torch.tensor(first, device=device)], :p_max]
    p_len_t = torch.tensor(p_len, device=device)
    seq_p = p_len_t[torch.tensor(cluster_of, device=device)]
    pre_bias = _bias(torch.arange(p_max, device=device) < seq_p[:, None])
    own = [e - s for e, s in zip(ends, shared)]
    s_max = max(own)
    shared_t = torch.tensor(shared, device=device)
    j = torch.arange(s_max, device=device)
    cols = (shared_t[:, None] + j).clamp(max=table.shape[1] - 1)
    own_slots = table[rows[:, None], cols]
    own_bias = _bias(j < torch.tensor(own, device=device)[:, None])
    dst = torch.tensor([c * g_max + g for c, g in zip(cluster_of, member_of)], device=device)
    return CascadeMeta(pre_slots, pre_bias, own_slots, own_bias, dst, g_max)


def _bias(allowed: torch.Tensor) -> torch.Tensor:
    """[B, L] bool -> [1, B, 1, L] additive float bias (0 or -inf)."""
    return torch.zeros(allowed.shape, device=allowed.device).masked_fill_(~allowed, float("-inf"))[None, :, None, :]


def attend(meta: CascadeMeta, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
           scaling: float | None) -> torch.Tensor:
    """q [B, H, D] (one query per sequence) -> [B, H, D]. Pools are [Hkv, N, D]."""
    n_seq, heads, dim = q.shape
    kv_heads = k_pool.shape[0]
    rep = heads // kv_heads
    n_clusters, p_max = meta.pre_slots.shape
    cg = n_clusters * meta.g_max
    scaling = dim ** -0.5 if scaling is None else scaling
    q4 = (q * scaling).view(n_seq, kv_heads, rep, dim).transpose(0, 1)  # [Hkv, B, rep, D]

    # prefix scores in the cluster layout [Hkv, C, Gmax*rep, Pmax], then per sequence
    qc = q4.new_zeros(kv_heads, cg, rep, dim).index_copy_(1, meta.dst, q4)
    k_pre = take(k_pool, meta.pre_slots)  # [Hkv, C, Pmax, D]
    s_pre = torch.matmul(qc.view(kv_heads, n_clusters, -1, dim), k_pre.transpose(-1, -2))
    s_pre = s_pre.view(kv_heads, cg, rep, p_max).index_select(1, meta.dst)  # [Hkv, B, rep, Pmax]

    # own scores [Hkv, B, rep, Smax]
    k_own = take(k_pool, meta.own_slots)  # [Hkv, B, Smax, D]
    s_own = torch.matmul(q4, k_own.transpose(-1, -2))

    scores = torch.cat([s_pre + meta.pre_bias_seq, s_own + meta.own_bias], dim=-1)
    probs = scores.float().softmax(dim=-1).to(q.dtype)
    p_pre, p_own = probs.split([p_max, probs.shape[-1] - p_max], dim=-1)
    out = torch.matmul(p_own, take(v_pool, meta.own_slots))  # [Hkv, B, rep, D]

    pc = p_pre.new_zeros(kv_heads, cg, rep, p_max).index_copy_(1, meta.dst, p_pre)
    out_pre = torch.matmul(pc.view(kv_heads, n_clusters, -1, p_max), take(v_pool, meta.pre_slots))
    out = out + out_pre.view(kv_heads, cg, rep, dim).index_select(1, meta.dst)
    return out.transpose(0, 1).reshape(n_seq, heads, dim)
