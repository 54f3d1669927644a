"""Paged attention over the KV pool, plugged into `transformers` as an attention function.

The model runs on a *packed* batch: batch size 1, the new tokens of every scheduled
sequence concatenated, each with its own position id. The model's own code computes q/k/v
and rotary embeddings; this function, registered under `ATTENTION_NAME` through
`transformers.AttentionInterface`, receives them for one layer, and using the metadata
the runner passed for this forward (`ets_batch`, a `PackedBatch`):

1. writes each new token's k/v into its pool slot;
2. gathers, per sequence, the slots of its whole context (cached prefix + new tokens)
   into buffers it reuses (ets/engine/workspace.py): for decode, kept across forwards,
   so a step only writes the new tokens into them;
3. attends each query over its own sequence only, causally: on the CPU with batched
   matmuls (SDPA's blocking follows the batch there: see invariant.py); on a GPU with
   torch SDPA, prefill chunks and the plain decode groups (`FUSED_DECODE`), the cascade's
   clusters with batched matmuls still.

Sequences are attended in groups (decode tokens apart from prefill chunks, and each kind
cut into groups of like shapes: ets/engine/groups.py) so a long context does not pad every
other query to its length; decode tokens of sequences that share a cached prefix read it
once (ets/engine/cascade.py). The same code runs on CPU and GPU.

    packed q:   [ s0 s1 s2 | s3 s3 s3 s3 | s4 s4 ]      decode group = s0..s2 (1 token each)
                  decode     prefill group (padded to the longest chunk, Qmax = 4)
    group kv:   kv_slots[b, j] = slot of token j of sequence b, j < Lmax
    mask[b, i, j] = j <= q_pos[b, i]   (and j > q_pos - window for sliding-window layers)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ets.engine import cascade
from ets.engine.cascade import CascadeMeta, take
from ets.engine.invariant import attend_values, least_per_product
from ets.engine.pool import operands
from ets.engine.workspace import DecodeKV, Workspace
from ets.models.load import ModelLoadError

ATTENTION_NAME = "ets_paged"


class Compaction(NamedTuple):
    """Sequences left the decode group: old rows `keep` (of `old_rows`) survive, in order;
    cascade: old prefix rows `keep_clusters` (of `old_clusters`, `old_pre_cols` wide)."""
    keep: torch.Tensor
    old_rows: int
    keep_clusters: torch.Tensor
    old_clusters: int
    old_pre_cols: int


@dataclass
class DecodeMeta:
    """A decode group's gathered contexts (see workspace.DecodeKV): on a rebuild (`fresh`)
    every layer gathers `slots` [B, cap] (or the cascade's regions); on a growth (`grow`,
    cascade only) the own regions, `cap` columns wide now, and the prefixes stay; otherwise
    it writes each sequence's new token at column `cols[b]` of its row."""

    kv: DecodeKV
    fresh: bool
    per_layer: bool       # buffers kept per layer (else layer 0's, gathered every layer)
    cap: int              # columns of the kept buffers
    slots: torch.Tensor | None  # [B, cap] plain decode: the gather index (None where nothing gathers)
    cols: torch.Tensor    # [B] column of each new token (plain: its position; cascade: - shared)
    rows: torch.Tensor    # [B] arange
    compact: Compaction | None = None  # reused after some sequences left: compact first
    grow: bool = False    # the own columns ran out: gather them anew, wider; keep the prefixes
    _index: dict = field(default_factory=dict)

    def write_new(self, buf: torch.Tensor, cols: torch.Tensor, new: torch.Tensor) -> None:
        """buf[:, b, cols[b]] = new[:, b] for every sequence b (buf [Hkv, B, width, D], new
        [Hkv, B, D]): one index_copy_ into the rows flattened, at b * width + cols[b], an
        index computed once per forward for all layers (an advanced-index assignment per
        layer cost several times more)."""
        key = (id(cols), buf.shape[2])  # plain (`self.cols`) or cascade (its own columns)
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = self.rows * buf.shape[2] + cols
        buf.view(buf.shape[0], -1, buf.shape[3]).index_copy_(1, index, new)

    def layer_key(self, layer: int) -> int:
        return layer if self.per_layer else 0

    def must_gather(self) -> bool:
        return self.fresh or not self.per_layer


@dataclass
class AttentionGroup:
    """Sequences attended together; their tokens are contiguous in the packed batch.

    `q_dst[t]` is where packed token t of this group goes in the padded [B * Qmax] query
    layout (b * Qmax + i for token i of sequence b); None when every sequence has exactly
    one new token (decode): then the packed layout already is [B, 1].
    """

    kv_slots: torch.Tensor            # [B, Lmax] pool slot of each context position
    q_pos: torch.Tensor               # [B, Qmax] position of each (padded) query
    q_dst: torch.Tensor | None        # [T_group] or None (decode)
    num_tokens: int                   # T_group
    cascade: CascadeMeta | None = None  # decode only: the same, split at shared prefixes
    decode: DecodeMeta | None = None    # decode only: the kept gather buffers
    _masks: dict = field(default_factory=dict)

    def _allowed(self, window: int | None, width: int) -> torch.Tensor:
        """[B, Qmax, width] bool: column j may be attended from query (b, i)."""
        cols = torch.arange(width, device=self.kv_slots.device)
        pos = self.q_pos[:, :, None]
        allowed = cols <= pos
        if window is not None:
            allowed = allowed & (cols > pos - window)
        return allowed

    def mask(self, window: int | None, width: int | None = None) -> torch.Tensor:
        """[B, 1, Qmax, width] bool, True = may attend (SDPA's layout; decode: [B, 1, 1,
        width], a kv head's query heads being its queries). `width` >= Lmax (default Lmax).
        Built once per forward, shared by layers.

        Padded query rows get the position of their sequence's last token, so no row is
        all-False (SDPA would give NaN); their outputs are dropped anyway.
        """
        width = width or self.kv_slots.shape[1]
        key = ("mask", window, width)
        if key not in self._masks:
            self._masks[key] = self._allowed(window, width)[:, None]
        return self._masks[key]

    def bias(self, window: int | None, width: int | None = None) -> torch.Tensor:
        """The mask as an additive bias [1, B, Qmax, width] (0 or -inf); decode: [1, B, 1,
        width], for scores laid out [Hkv, B, rep, width]. `width` >= Lmax (default Lmax):
        the columns past a sequence's position are -inf like any other it may not attend."""
        width = width or self.kv_slots.shape[1]
        key = ("bias", window, width)
        if key not in self._masks:
            allowed = self._allowed(window, width)  # decode: [B, 1, width]
            zeros = torch.zeros(allowed.shape, device=allowed.device)
            self._masks[key] = zeros.masked_fill_(~allowed, float("-inf"))[None]
        return self._masks[key]


@dataclass
class PackedBatch:
    """Everything the attention function needs for one forward, for every layer."""

    k_pool: list[torch.Tensor]        # per layer [Hkv, num_slots, D]
    v_pool: list[torch.Tensor]
    write_slots: torch.Tensor         # [T] slot of each packed token
    groups: list[AttentionGroup]
    workspace: Workspace | None = None  # scratch for prefill gathers (None: fresh tensors)


# Attention features of some architectures that paged_attention does not implement, by the
# config attribute that turns them on: found at construction, not in the middle of a run.
UNSUPPORTED_CONFIG = {
    "attn_logit_softcapping": "attention logit soft-capping (Gemma-2)",
}


def check_supported(config) -> None:
    """Raise ModelLoadError if the model needs an attention feature the engine lacks."""
    for attr, what in UNSUPPORTED_CONFIG.items():
        if getattr(config, attr, None) is not None:
            raise ModelLoadError(
                f"{getattr(config, 'model_type', 'this model')} uses {what}, which the ets engine's attention "
                "does not implement; run it on the plain transformers backend (policy.backend: hf)"
            )


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The `AttentionInterface` function. query [1, H, T, D], key/value [1, Hkv, T, D];
    returns ([1, T, H, D], None) as the `transformers` attention functions do."""
    batch: PackedBatch | None = kwargs.get("ets_batch")
    if batch is None:
        raise RuntimeError(
            f"the {ATTENTION_NAME!r} attention function only runs inside ets.engine; "
            "switch the model back to 'sdpa' to use it on its own"
        )
    check_kwargs(kwargs)
    return attend(batch, module.layer_idx, query, key, value, scaling, kwargs.get("sliding_window")), None


def check_kwargs(kwargs: dict) -> None:
    """Raise NotImplementedError for the attention features the model asks for that this
    function lacks."""
    for unsupported in ("softcap", "s_aux"):  # Gemma-2 logit soft-capping, attention sinks
        if kwargs.get(unsupported) is not None:
            raise NotImplementedError(f"ets.engine attention does not implement {unsupported!r}; use the hf backend")


def attend(batch: PackedBatch, layer: int, query, key, value, scaling, window) -> torch.Tensor:
    """Layer `layer`'s attention over the pool for the packed batch: query [1, H, T, D],
    key/value [1, Hkv, T, D] -> [1, T, H, D] (what `paged_attention` returns first)."""
    k_pool, v_pool = batch.k_pool[layer], batch.v_pool[layer]
    # 1. store the new tokens' KV: [1, Hkv, T, D] -> pool [Hkv, slots, D]
    k_new, v_new = key[0].to(k_pool.dtype), value[0].to(v_pool.dtype)  # once: the decode groups slice them
    k_pool.index_copy_(1, batch.write_slots, k_new)
    v_pool.index_copy_(1, batch.write_slots, v_new)
    q_all = query[0].transpose(0, 1)  # [T, H, D]
    outs, start = [], 0
    for group in batch.groups:
        q = q_all[start:start + group.num_tokens]
        if group.decode is not None:  # this group's new K/V [Hkv, B, D], for the kept buffers
            new_kv = (k_new[:, start:start + group.num_tokens], v_new[:, start:start + group.num_tokens])
            outs.append(_attend_decode(group, q, new_kv, k_pool, v_pool, layer, scaling, window))
        else:
            outs.append(_attend_group(group, q, k_pool, v_pool, scaling, window, batch.workspace))
        start += group.num_tokens
    if start < q_all.shape[0]:  # the runner's padding rows (invariant.MIN_ROWS): outputs dropped
        outs.append(q_all.new_zeros(q_all.shape[0] - start, *q_all.shape[1:]))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.unsqueeze(0)


def _attend_decode(group: AttentionGroup, q: torch.Tensor, new_kv, k_pool, v_pool, layer: int,
                   scaling, window) -> torch.Tensor:
    """One query per sequence, q [B, H, D] -> [B, H, D], over the kept gather buffers."""
    d = group.decode
    if group.cascade is not None and (window is None or window >= group.kv_slots.shape[1]):
        return cascade.attend(group.cascade, q, k_pool, v_pool, scaling, d, layer, new_kv)
    n_seq, heads, dim = q.shape
    kv_heads = k_pool.shape[0]
    # A layer that skips the cascade (sliding window) keeps no buffers of its own: it
    # gathers the whole context each time (into scratch shared by such layers).
    own = group.cascade is None
    slots = d.slots if own else group.kv_slots  # (None when own and nothing gathers)
    k, v = d.kv.buffers("ctx", d.layer_key(layer) if own else "window",
                        (kv_heads, n_seq, d.cap if own else slots.shape[1], dim))
    if d.must_gather() or not own:
        take(k_pool, slots, out=k)   # [Hkv, B, cap, D]; the new tokens are in the pool already
        take(v_pool, slots, out=v)
    else:
        if d.compact is not None:
            c = d.compact
            d.kv.compact("ctx", layer, (kv_heads, c.old_rows, d.cap, dim), (kv_heads, n_seq, d.cap, dim), c.keep)
        d.write_new(k, d.cols, new_kv[0])
        d.write_new(v, d.cols, new_kv[1])
    # The matmuls run over every column of the buffers (cap >= Lmax; those past a
    # sequence's position are masked): sliced to Lmax, K and V are no longer contiguous
    # and CPU matmul falls back to one small product per (kv head, sequence), 2-3x slower
    # at a few hundred sequences than the extra columns (HEADROOM, rounded up to KEY_BLOCK) cost.
    width = k.shape[2]
    scaling = dim ** -0.5 if scaling is None else scaling
    k, v = operands(k, v, q.dtype)
    if fused_decode(q.device):
        return _fused_decode(group, q, k, v, scaling, window)
    q4 = (q * scaling).view(n_seq, kv_heads, heads // kv_heads, dim).transpose(0, 1).to(k.dtype)  # [Hkv, B, rep, D]
    scores = torch.matmul(q4, k.transpose(-1, -2)) + group.bias(window, width)         # [Hkv, B, rep, W]
    probs = scores.float().softmax(dim=-1).to(v.dtype)
    # every sequence of this group is multiplied rep rows at a time (attend_values)
    out = attend_values(probs, v, fixed_rows=True)                                      # [Hkv, B, rep, D]
    return out.transpose(0, 1).reshape(n_seq, heads, dim).to(q.dtype)


# Plain decode attention as one fused kernel (torch SDPA) rather than the CPU's batched
# matmuls: None = on GPUs only. On a GPU every op is a kernel launch, and the ten or so
# the matmul path takes per layer cost more than its products (an H200, a 1.5B model:
# scripts/gpu_check.sh); on the CPU the matmuls stay, for batch invariance (invariant.py).
FUSED_DECODE: bool | None = None


def fused_decode(device: torch.device) -> bool:
    """Whether plain decode attention on `device` is one SDPA call (see FUSED_DECODE)."""
    return device.type != "cpu" if FUSED_DECODE is None else FUSED_DECODE


def _fused_decode(group: AttentionGroup, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float,
                  window) -> torch.Tensor:
    """q [B, H, D] over the kept buffers k, v [Hkv, B, W, D] -> [B, H, D], in one SDPA call:
    a kv head's `rep` query heads are its queries (so no K/V is repeated for grouped-query
    attention), and `mask` [B, 1, 1, W] says which columns each sequence sees."""
    n_seq, heads, dim = q.shape
    kv_heads = k.shape[0]
    q4 = q.view(n_seq, kv_heads, heads // kv_heads, dim).to(k.dtype)                     # [B, Hkv, rep, D]
    out = F.scaled_dot_product_attention(q4, k.transpose(0, 1), v.transpose(0, 1),
                                         attn_mask=group.mask(window, k.shape[2]), scale=scaling)
    return out.reshape(n_seq, heads, dim).to(q.dtype)


# The scores of one block of prefill queries, at most this many elements (float32: 64 MB).
PREFILL_SCORES = 1 << 24


def _attend_group(group: AttentionGroup, q: torch.Tensor, k_pool, v_pool, scaling, window,
                  workspace: Workspace | None = None) -> torch.Tensor:
    """q [T_g, H, D] -> [T_g, H, D] attended over each sequence's own context.

    On the CPU with two batched matmuls, not SDPA: SDPA splits the queries into blocks
    sized by the longest chunk of the batch, so a query's sums ran in an order set by its
    batch-mates; a batched matmul's row is the same for any number of rows from two on
    (invariant.py). Elsewhere SDPA, the faster kernel."""
    n_seq, q_max = group.q_pos.shape
    heads, dim = q.shape[1], q.shape[2]
    # 2. gather each sequence's context: [Hkv, B, Lmax, D]
    shape = (k_pool.shape[0], *group.kv_slots.shape, dim)
    k_out = workspace.get("k", shape) if workspace is not None else None
    v_out = workspace.get("v", shape) if workspace is not None else None
    # one dtype for the products: K/V stored narrower (pool.py) are widened to the queries'
    k = take(k_pool, group.kv_slots, out=k_out).to(q.dtype)
    v = take(v_pool, group.kv_slots, out=v_out).to(q.dtype)
    if group.q_dst is None:
        qp = q.view(n_seq, 1, heads, dim)
    else:
        qp = q.new_zeros(n_seq * q_max, heads, dim)
        qp.index_copy_(0, group.q_dst, q)
        qp = qp.view(n_seq, q_max, heads, dim)  # [B, Qmax, H, D]
    # 3. causal attention within each sequence
    if q.device.type == "cpu":
        out = _matmul_attention(group, qp, k, v, scaling, window, workspace)
    else:  # GQA: SDPA repeats kv heads itself
        out = F.scaled_dot_product_attention(
            qp.transpose(1, 2), k.transpose(0, 1), v.transpose(0, 1), attn_mask=group.mask(window),
            scale=scaling, enable_gqa=k.shape[0] != heads,
        ).transpose(1, 2)  # [B, Qmax, H, D]
    if group.q_dst is None:
        return out.reshape(n_seq, heads, dim)
    return out.reshape(n_seq * q_max, heads, dim).index_select(0, group.q_dst)


def _matmul_attention(group: AttentionGroup, qp: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      scaling, window, workspace: Workspace | None = None) -> torch.Tensor:
    """qp [B, Qmax, H, D] over k, v [Hkv, B, L, D] -> [B, Qmax, H, D], by blocks of queries,
    each of at least `product_rows` rows (rep per query): fewer are computed another way
    (invariant.py), so a chunk of fewer queries is padded (zero queries, outputs dropped).
    float32 scores are masked and softmaxed in place, in `workspace` memory when given (the
    same kernels, the same numbers): they are a forward's largest tensors, several MB a
    block, and fresh ones are freshly page-faulted. With this, a REBASE W=64 run's PRM
    phase (prefill on the PRM's engine) ran 1.15x faster on the CPU; the same for decode's
    scores, a few hundred KB, showed no gain."""
    n_seq, q_max, heads, dim = qp.shape
    kv_heads, width = k.shape[0], k.shape[2]
    rep = heads // kv_heads
    scaling = dim ** -0.5 if scaling is None else scaling
    bias = group.bias(window, width)[0]                                                 # [B, Qmax, L]
    least = least_per_product(k.dtype, dim, rep) if k.device.type == "cpu" else 1     # queries a block takes
    real = q_max
    if q_max < least:  # padding queries see what the last one sees: no row is all masked
        qp = torch.cat([qp, qp.new_zeros(n_seq, least - q_max, heads, dim)], dim=1)
        bias = torch.cat([bias, bias[:, -1:].expand(n_seq, least - q_max, width)], dim=1)
        q_max = least
    q5 = (qp * scaling).view(n_seq, q_max, kv_heads, rep, dim).permute(2, 0, 3, 1, 4)  # [Hkv, B, rep, Qmax, D]
    out = qp.new_empty(kv_heads, n_seq, rep, q_max, dim)
    rows = max(least, PREFILL_SCORES // (kv_heads * n_seq * rep * width))
    bounds = list(range(0, q_max, rows))[1:]
    if bounds and q_max - bounds[-1] < least:
        bounds.pop()  # the last block joins the one before
    for i, j in zip([0, *bounds], [*bounds, q_max]):
        n = j - i
        qb = q5[:, :, :, i:j].reshape(kv_heads, n_seq, rep * n, dim)
        shape = (kv_heads, n_seq, rep * n, width)
        into = workspace.get("scores", shape, dtype=qb.dtype) if workspace is not None else None
        scores = torch.matmul(qb, k.transpose(-1, -2), out=into).view(kv_heads, n_seq, rep, n, width)
        scores.add_(bias[None, :, None, i:j])
        if scores.dtype == torch.float32:
            probs = torch.softmax(scores, dim=-1, out=scores).to(v.dtype).view(shape)
        else:
            probs = scores.float().softmax(dim=-1).to(v.dtype).view(shape)
        out[:, :, :, i:j] = attend_values(probs, v).view(kv_heads, n_seq, rep, n, dim)
    return out[:, :, :, :real].permute(1, 3, 0, 2, 4).reshape(n_seq, real, heads, dim)


def register() -> None:
    """Make `ATTENTION_NAME` known to `transformers` (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention)
