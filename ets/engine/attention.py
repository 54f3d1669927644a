"""Paged attention over the KV pool, plugged into `transformers` as an attention function.

The model runs on a *packed* batch: batch size 1, the new tokens of every scheduled
sequence concatenated, each with its own position id. The model's own code computes q/k/v
and rotary embeddings; this function, registered under `ATTENTION_NAME` through
`transformers.AttentionInterface`, receives them for one layer, and using the metadata
the runner passed for this forward (`ets_batch`, a `PackedBatch`):

1. writes each new token's k/v into its pool slot;
2. gathers, per sequence, the slots of its whole context (cached prefix + new tokens);
3. attends each query over its own sequence only, causally, with torch SDPA.

Sequences are attended in groups (decode tokens together, prefill chunks together) so a
long prefill does not pad every decode query to its length; decode tokens of sequences
that share a cached prefix read it once (ets/engine/cascade.py).

    packed q:   [ s0 s1 s2 | s3 s3 s3 s3 | s4 s4 ]      decode group = s0..s2 (1 token each)
                  decode     prefill group (padded to the longest chunk, Qmax = 4)
    group kv:   kv_slots[b, j] = slot of token j of sequence b, j < Lmax
    mask[b, i, j] = j <= q_pos[b, i]   (and j > q_pos - window for sliding-window layers)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ets.engine import cascade
from ets.engine.cascade import CascadeMeta, take
from ets.models.load import ModelLoadError

ATTENTION_NAME = "ets_paged"


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
    _masks: dict = field(default_factory=dict)

    def mask(self, window: int | None) -> torch.Tensor:
        """[B, 1, Qmax, Lmax] bool, True = may attend. Built once per forward, shared by layers.

        Padded query rows get the position of their sequence's last token, so no row is
        all-False (SDPA would give NaN); their outputs are dropped anyway.
        """
        if window not in self._masks:
            cols = torch.arange(self.kv_slots.shape[1], device=self.kv_slots.device)
            pos = self.q_pos[:, :, None]
            allowed = cols <= pos
            if window is not None:
                allowed = allowed & (cols > pos - window)
            self._masks[window] = allowed[:, None]
        return self._masks[window]


@dataclass
class PackedBatch:
    """Everything the attention function needs for one forward, for every layer."""

    k_pool: list[torch.Tensor]        # per layer [Hkv, num_slots, D]
    v_pool: list[torch.Tensor]
    write_slots: torch.Tensor         # [T] slot of each packed token
    groups: list[AttentionGroup]


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
    for unsupported in ("softcap", "s_aux"):  # Gemma-2 logit soft-capping, attention sinks
        if kwargs.get(unsupported) is not None:
            raise NotImplementedError(f"ets.engine attention does not implement {unsupported!r}; use the hf backend")
    layer = module.layer_idx
    k_pool, v_pool = batch.k_pool[layer], batch.v_pool[layer]
    # 1. store the new tokens' KV: [1, Hkv, T, D] -> pool [Hkv, slots, D]
    k_pool.index_copy_(1, batch.write_slots, key[0].to(k_pool.dtype))
    v_pool.index_copy_(1, batch.write_slots, value[0].to(v_pool.dtype))
    q_all = query[0].transpose(0, 1)  # [T, H, D]
    window = kwargs.get("sliding_window")
    outs, start = [], 0
    for group in batch.groups:
        q = q_all[start:start + group.num_tokens]
        start += group.num_tokens
        outs.append(_attend_group(group, q, k_pool, v_pool, scaling, window))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.unsqueeze(0), None


def _attend_group(group: AttentionGroup, q: torch.Tensor, k_pool, v_pool, scaling, window) -> torch.Tensor:
    """q [T_g, H, D] -> [T_g, H, D] attended over each sequence's own context."""
    n_seq, q_max = group.q_pos.shape
    if group.cascade is not None and (window is None or window >= group.kv_slots.shape[1]):
        return cascade.attend(group.cascade, q, k_pool, v_pool, scaling)
    heads, dim = q.shape[1], q.shape[2]
    # 2. gather each sequence's context: [Hkv, B, Lmax, D] -> [B, Hkv, Lmax, D]
    k = take(k_pool, group.kv_slots).transpose(0, 1)
    v = take(v_pool, group.kv_slots).transpose(0, 1)
    if group.q_dst is None:
        qp = q.unsqueeze(2)  # [B, H, 1, D]
    else:
        qp = q.new_zeros(n_seq * q_max, heads, dim)
        qp.index_copy_(0, group.q_dst, q)
        qp = qp.view(n_seq, q_max, heads, dim).transpose(1, 2)  # [B, H, Qmax, D]
    # 3. causal attention within each sequence; GQA: SDPA repeats kv heads itself
    out = F.scaled_dot_product_attention(
        qp, k, v, attn_mask=group.mask(window), scale=scaling, enable_gqa=k.shape[1] != heads
    )
    out = out.transpose(1, 2)  # [B, Qmax, H, D]
    if group.q_dst is None:
        return out.reshape(n_seq, heads, dim)
    return out.reshape(n_seq * q_max, heads, dim).index_select(0, group.q_dst)


def register() -> None:
    """Make `ATTENTION_NAME` known to `transformers` (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention)
