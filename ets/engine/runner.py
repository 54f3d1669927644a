"""The model runner: one forward of the model's own code over a packed batch of chunks.

It turns the scheduler's chunks (a sequence's next new tokens and the slots chosen for
them, already recorded in the slot table) into `input_ids` / `position_ids` of shape
[1, T], builds the attention metadata once, and runs the model with the paged attention
function switched on for this call only (the same model object can serve other code,
e.g. the `transformers` baseline, between calls). It owns no memory decisions.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch

from ets.engine import attention, cascade
from ets.engine.pool import KVPool
from ets.engine.sequence import Chunk
from ets.engine.table import SlotTable
from ets.engine.workspace import HEADROOM, DecodeKV, Workspace


class Outputs(Sequence[torch.Tensor]):
    """A forward's outputs, chunk by chunk: `outputs[i]` [len(keep_i), V] are chunk i's.

    They stay one tensor, `rows`, in the order the runner packed the chunks; a decode step
    samples every chunk's last row, and `last` hands those over in one indexed read (or as
    `rows` itself when they are already in that order) instead of a view per sequence."""

    def __init__(self, rows: torch.Tensor, first: list[int], count: list[int]):
        self.rows, self.first, self.count = rows, first, count

    def __len__(self) -> int:
        return len(self.first)

    def __getitem__(self, i):  # type: ignore[override]
        return self.rows[self.first[i]: self.first[i] + self.count[i]]

    def last(self, chunks: Sequence[int]) -> torch.Tensor:
        """[len(chunks), V]: the last output row of each of these chunks, in this order."""
        index = [self.first[i] + self.count[i] - 1 for i in chunks]
        if len(index) == self.rows.shape[0] and index == list(range(len(index))):
            return self.rows
        return self.rows.index_select(0, torch.tensor(index, dtype=torch.long, device=self.rows.device))


class ModelRunner:
    def __init__(self, model, pool: KVPool, table: SlotTable):
        attention.register()
        self.model = model
        self.pool = pool
        self.table = table
        self.device = pool.device
        dtype = pool.k[0].dtype
        self.workspace = Workspace(dtype, self.device)
        # kept decode buffers: at most as much memory again as the pool itself
        self.decode_kv = DecodeKV(len(pool.k), dtype, self.device, limit_bytes=pool.num_bytes)
        # the decode group's cascade metadata of the last forward, advanced in place while the
        # kept buffers are reused as they are (workspace.DecodeKV.plan: same sequences, one
        # step further); any other plan builds it afresh
        self._last_cascade: cascade.CascadeMeta | None = None

    @contextlib.contextmanager
    def _paged_attention(self):
        """Route this model's attention through the pool for one forward, then restore it."""
        config = self.model.config
        previous = config._attn_implementation
        config._attn_implementation = attention.ATTENTION_NAME
        try:
            yield
        finally:
            config._attn_implementation = previous

    @torch.inference_mode()
    def forward(self, chunks: list[Chunk], hidden: bool = False) -> "Outputs":
        """Per chunk, the logits (or final hidden states) at its `keep` offsets: [len(keep), V]."""
        # Decode chunks first (by cluster), then prefill chunks: each group is contiguous.
        order = sorted(range(len(chunks)), key=lambda i: (len(chunks[i].token_ids) > 1, chunks[i].cluster))
        ordered = [chunks[i] for i in order]
        ids: list[int] = []
        pos: list[int] = []
        keep: list[int] = []
        for c in ordered:
            base = len(ids)
            ids.extend(c.token_ids)
            pos.extend(range(c.start, c.start + len(c.token_ids)))
            keep.extend(base + k for k in c.keep)
        n_decode = sum(1 for c in ordered if len(c.token_ids) == 1)
        groups = []
        if n_decode:
            groups.append(self._group(ordered[:n_decode], decode=True))
        if n_decode < len(ordered):
            groups.append(self._group(ordered[n_decode:], decode=False))
        if not n_decode:
            self.decode_kv.uids = None  # a forward without decode tokens: the kept buffers go stale
        batch = attention.PackedBatch(self.pool.k, self.pool.v, torch.cat([c.slots for c in ordered]), groups,
                                      self.workspace)

        dev = self.device
        input_ids = torch.tensor([ids], dtype=torch.long, device=dev)
        position_ids = torch.tensor([pos], dtype=torch.long, device=dev)
        keep_t = torch.tensor(keep, dtype=torch.long, device=dev)
        with self._paged_attention():
            if hidden:
                out = self.model.base_model(
                    input_ids=input_ids, position_ids=position_ids, use_cache=False, ets_batch=batch
                ).last_hidden_state[0, keep_t]
            else:
                out = self.model(
                    input_ids=input_ids, position_ids=position_ids, use_cache=False,
                    logits_to_keep=keep_t, ets_batch=batch,
                ).logits[0]
        first = [0] * len(chunks)  # chunk i's outputs are rows first[i]..first[i] + len(keep) of `out`
        row = 0
        for i in order:
            first[i] = row
            row += len(chunks[i].keep)
        return Outputs(out, first, [len(c.keep) for c in chunks])

    def _cascade(self, chunks: list[Chunk], rows: torch.Tensor, cap: int | None = None) -> cascade.CascadeMeta | None:
        """Cascade metadata when some decode chunks share a prefix (else plain attention)."""
        cluster_of, member_of, seen = [], [], {}
        for c in chunks:
            if c.cluster not in seen:
                seen[c.cluster] = [len(seen), 0]
            entry = seen[c.cluster]
            cluster_of.append(entry[0])
            member_of.append(entry[1])
            entry[1] += 1
        if len(seen) == len(chunks):
            return None
        return cascade.build(rows, self.table.rows, [c.shared for c in chunks], cluster_of, member_of,
                             [c.start + 1 for c in chunks], self.device, cap)

    def _decode_group(self, chunks: list[Chunk], rows: torch.Tensor, starts: torch.Tensor,
                      l_max: int) -> attention.AttentionGroup:
        """A decode group and its kept gather buffers (workspace.DecodeKV): rebuilt when the
        group is not the last forward's sequences one step further, else only extended."""
        kv = self.decode_kv
        shared = any(chunks[i].cluster == chunks[i - 1].cluster for i in range(1, len(chunks)))
        # columns the buffers need now: plain, the whole context; cascade, the own part
        need = l_max if not shared else max(c.start + 1 - c.shared for c in chunks)
        clusters = tuple(dict.fromkeys(c.cluster for c in chunks)) if shared else ()
        reuse = kv.plan(tuple(c.uid for c in chunks), [c.start for c in chunks], shared, need, clusters)
        fresh = reuse is None
        if fresh:
            kv.cap = min(need + HEADROOM, self.table.rows.shape[1]) if not shared else need + HEADROOM
        cap = kv.cap
        if shared and reuse is not None and reuse.keep is None and self._last_cascade is not None:
            # the same sequences, each one token further: only their own lengths moved
            casc = self._last_cascade.advance()
        else:
            casc = self._cascade(chunks, rows, cap) if shared else None
        self._last_cascade = casc
        old_pre_cols = kv.pre_cols
        if casc is None:
            slots = self.table.rows[rows, :cap]
            cols = starts
            per_row = cap
        else:
            slots, cols = casc.own_slots, casc.own_cols
            per_row = casc.pre_slots.numel() / len(chunks) + cap
            kv.pre_cols = casc.pre_slots.shape[1]
        kept = kv.keep(int(per_row * len(chunks)) * self.pool.k[0].shape[0] * self.pool.k[0].shape[2]) if fresh else kv.kept
        n = len(chunks)
        compact = None
        if reuse is not None and reuse.keep is not None:
            dev = self.device
            compact = attention.Compaction(torch.tensor(reuse.keep, device=dev), reuse.old_rows,
                                           torch.tensor(reuse.keep_clusters or [0], device=dev),
                                           reuse.old_clusters, old_pre_cols)
        meta = attention.DecodeMeta(kv, fresh, kept, cap, slots, cols, torch.arange(n, device=self.device), compact)
        return attention.AttentionGroup(self.table.rows[rows, :l_max], starts[:, None], None, n, casc, meta)

    def _group(self, chunks: list[Chunk], decode: bool) -> attention.AttentionGroup:
        dev = self.device
        rows = torch.tensor([c.row for c in chunks], dtype=torch.long, device=dev)
        lens = [len(c.token_ids) for c in chunks]
        starts = torch.tensor([c.start for c in chunks], dtype=torch.long, device=dev)
        l_max = max(c.start + n for c, n in zip(chunks, lens))
        if decode:
            return self._decode_group(chunks, rows, starts, l_max)
        kv_slots = self.table.rows[rows, :l_max]
        # Padded query layout: token i of sequence b sits at b * q_max + i.
        #   packed: [a0 a1 a2 | b0 b1]   ->   padded: [a0 a1 a2 | b0 b1 --]   (q_max = 3)
        q_max = max(lens)
        lens_t = torch.tensor(lens, dtype=torch.long, device=dev)
        i = torch.arange(q_max, device=dev)
        q_pos = starts[:, None] + torch.minimum(i[None, :], lens_t[:, None] - 1)
        first = torch.cumsum(lens_t, 0) - lens_t  # packed index of each sequence's first token
        n_tok = sum(lens)
        shift = torch.repeat_interleave(torch.arange(len(chunks), device=dev) * q_max - first, lens_t, output_size=n_tok)
        q_dst = torch.arange(n_tok, device=dev) + shift
        return attention.AttentionGroup(kv_slots, q_pos, q_dst, n_tok)
