"""The model runner: one forward of the model's own code over a packed batch of chunks.

It turns the scheduler's chunks (a sequence's next new tokens and the slots chosen for
them, already recorded in the slot table) into `input_ids` / `position_ids` of shape
[1, T], builds the attention metadata once, and runs the model with the paged attention
function switched on for this call only (the same model object can serve other code,
e.g. the `transformers` baseline, between calls). It owns no memory decisions.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Sequence

import torch

from ets.engine import attention, cascade
from ets.engine.pool import KVPool
from ets.engine.sequence import Chunk
from ets.engine.invariant import KEY_BLOCK, MIN_ROWS, least_per_product, round_up
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


# A prefill group's attention pads every sequence to its longest chunk (queries) and its
# longest context (keys, to KEY_BLOCK). A PRM round mixes steps of 10-40 tokens over
# histories of 100-400: in the demo's ETS run (W=8, 10 problems) one group per forward
# computed 1.57x the scores its queries need, these groups 1.30x. A group costs its fixed
# ops per layer: a cut is made when it saves more scores (per query head and layer) than
# SPLIT_MIN_SCORES and more than SPLIT_MIN_SHARE of the group's.
SPLIT_MIN_SCORES = 1 << 15
SPLIT_MIN_SHARE = 0.1
MAX_PREFILL_GROUPS = 4


def prefill_groups(lens: list[int], ends: list[int], key_block: int = KEY_BLOCK) -> list[list[int]]:
    """The prefill chunks (new tokens `lens[i]`, context `ends[i]` after them) in groups
    attended apart, as lists of indices: sorted by padded context, then cut where the
    scores the groups compute (chunks x longest chunk x widest context) fall most, up to
    MAX_PREFILL_GROUPS. Which group a chunk lands in changes none of its numbers
    (ets/engine/invariant.py: query blocks and key padding are a sequence's own)."""
    order = sorted(range(len(lens)), key=lambda i: (round_up(ends[i], key_block), lens[i]))

    def best_cut(part: list[int]) -> tuple[int, int]:
        """(scores saved, cut) of the best split of `part` in two; (0, 0): none worth it.
        Sorted by padded context, a left part's widest context is its last."""
        n = len(part)
        width = [round_up(ends[i], key_block) for i in part]
        left_q, right_q = [0] * n, [0] * n  # longest chunk up to k, and from k
        for k in range(n):
            left_q[k] = max(lens[part[k]], left_q[k - 1] if k else 2)
        for k in range(n - 1, -1, -1):
            right_q[k] = max(lens[part[k]], right_q[k + 1] if k + 1 < n else 2)
        whole = n * left_q[-1] * width[-1]
        best = (0, 0)
        for cut in range(1, n):
            saving = whole - cut * left_q[cut - 1] * width[cut - 1] - (n - cut) * right_q[cut] * width[-1]
            if saving > max(SPLIT_MIN_SCORES, SPLIT_MIN_SHARE * whole) and saving > best[0]:
                best = (saving, cut)
        return best

    parts, cuts = [order], [best_cut(order)]  # cuts[k]: part k's best cut, found once per part
    while len(parts) < MAX_PREFILL_GROUPS:
        p = max(range(len(parts)), key=lambda k: cuts[k][0])
        if cuts[p][0] == 0:
            break
        cut = cuts[p][1]
        parts[p:p + 1] = halves = [parts[p][:cut], parts[p][cut:]]
        cuts[p:p + 1] = [best_cut(half) for half in halves]
    return parts


class ModelRunner:
    def __init__(self, model, pool: KVPool, table: SlotTable, batch_invariant: bool = True):
        attention.register()
        # the rows a forward is padded to (1: none; then a small batch rounds its own way,
        # ~25% faster at one sequence on the demo policy)
        self.min_rows = MIN_ROWS if batch_invariant else 1
        self.model = model
        self.pool = pool
        self.table = table
        self.device = pool.device
        self.kv_heads, self.head_dim = pool.k[0].shape[0], pool.k[0].shape[2]
        dtype = pool.k[0].dtype
        # samples a cluster's prefix products take at least (padded): their rows are `rep`
        # query heads each, and BLAS computes a row otherwise below product_rows (invariant.py),
        # in the stored dtype or the model's (pool.operands may widen small regions)
        self.min_members = 1
        if batch_invariant and self.device.type == "cpu":
            rep = model.config.num_attention_heads // self.kv_heads
            self.min_members = max(least_per_product(d, self.head_dim, rep) for d in (dtype, next(model.parameters()).dtype))
        self.workspace = Workspace(dtype, self.device)
        # kept decode buffers, of the plain group (False) and of the cascade one (True): each
        # at most as much memory again as the pool itself (and KEY_BLOCK columns a row: _slack)
        self.decode_kv = {shared: DecodeKV(len(pool.k), dtype, self.device, limit_bytes=pool.num_bytes, grows=shared)
                          for shared in (False, True)}
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
        # Decode chunks first: those alone on their path (plain attention), then those with
        # siblings (cascade attention, by cluster); then prefill chunks, in groups of like
        # lengths (prefill_groups). Each group is contiguous. (Which group a sequence joins
        # depends on its own request only, or changes none of its numbers: invariant.py.)
        sizes = Counter(c.cluster for c in chunks if c.decode)
        kind = [(0 if sizes[c.cluster] == 1 else 1) if c.decode else 2 for c in chunks]
        order = sorted(range(len(chunks)), key=lambda i: (kind[i], chunks[i].cluster))
        n_plain, n_cascade = kind.count(0), kind.count(1)
        n_decode = n_plain + n_cascade
        prefill = order[n_decode:]
        parts = prefill_groups([len(chunks[i].token_ids) for i in prefill],
                               [chunks[i].start + len(chunks[i].token_ids) for i in prefill]) if prefill else []
        order[n_decode:] = [prefill[j] for part in parts for j in part]  # packed group by group
        ordered = [chunks[i] for i in order]
        ids: list[int] = []
        pos: list[int] = []
        keep: list[int] = []
        for c in ordered:
            base = len(ids)
            ids.extend(c.token_ids)
            pos.extend(range(c.start, c.start + len(c.token_ids)))
            keep.extend(base + k for k in c.keep)
        groups = []
        for shared, lo, hi in ((False, 0, n_plain), (True, n_plain, n_decode)):
            if hi > lo:
                groups.append(self._group(ordered[lo:hi], decode=True, shared=shared))
            else:  # a forward without this kind of decode token: its kept buffers go stale
                self.decode_kv[shared].uids = None
        at = n_decode
        for part in parts:
            groups.append(self._group(ordered[at:at + len(part)], decode=False))
            at += len(part)

        # At least MIN_ROWS rows through the model's matmuls (copies of the last token, and
        # of the last kept row; their outputs are dropped, their K/V go to a scratch slot):
        # see invariant.py
        ids += ids[-1:] * (self.min_rows - len(ids))
        pos += pos[-1:] * (self.min_rows - len(pos))
        n_keep = len(keep)
        keep += keep[-1:] * (self.min_rows - len(keep))
        dev = self.device
        input_ids = torch.tensor([ids], dtype=torch.long, device=dev)
        position_ids = torch.tensor([pos], dtype=torch.long, device=dev)
        keep_t = torch.tensor(keep, dtype=torch.long, device=dev)
        slots = torch.cat([c.slots for c in ordered])
        if len(ids) > len(slots):  # the padding rows write their K/V to the pool's scratch slot
            slots = torch.cat([slots, slots.new_full((len(ids) - len(slots),), self.pool.scratch_slot)])
        batch = attention.PackedBatch(self.pool.k, self.pool.v, slots, groups, self.workspace)
        with self._paged_attention():
            if hidden:
                out = self.model.base_model(
                    input_ids=input_ids, position_ids=position_ids, use_cache=False, ets_batch=batch
                ).last_hidden_state[0, keep_t[:n_keep]]
            else:
                out = self.model(
                    input_ids=input_ids, position_ids=position_ids, use_cache=False,
                    logits_to_keep=keep_t, ets_batch=batch,
                ).logits[0, :n_keep]
        first = [0] * len(chunks)  # chunk i's outputs are rows first[i]..first[i] + len(keep) of `out`
        row = 0
        for i in order:
            first[i] = row
            row += len(chunks[i].keep)
        return Outputs(out, first, [len(c.keep) for c in chunks])

    def _cascade(self, chunks: list[Chunk], rows: torch.Tensor, cap: int | None = None) -> cascade.CascadeMeta:
        """Cascade metadata: the decode chunks by cluster, each split where its cluster's
        shared prefix ends (Chunk.shared)."""
        cluster_of, member_of, seen = [], [], {}
        for c in chunks:
            if c.cluster not in seen:
                seen[c.cluster] = [len(seen), 0]
            entry = seen[c.cluster]
            cluster_of.append(entry[0])
            member_of.append(entry[1])
            entry[1] += 1
        return cascade.build(rows, self.table.rows, [c.shared for c in chunks], cluster_of, member_of,
                             [c.start + 1 for c in chunks], self.device, cap, KEY_BLOCK, self.min_members)

    def _decode_group(self, chunks: list[Chunk], rows: torch.Tensor, starts: torch.Tensor,
                      l_max: int, shared: bool) -> attention.AttentionGroup:
        """A decode group (`shared`: clusters of siblings, cascade attention; else one
        sequence per path, plain) and its kept gather buffers (workspace.DecodeKV): rebuilt
        when the group is not the last forward's sequences one step further, else only
        extended; past the buffers' columns, the cascade gathers its own columns anew and
        keeps its prefixes (`grow`), the plain group rebuilds (its rows are whole contexts)."""
        kv = self.decode_kv[shared]
        # columns the buffers need now: plain, the whole context; cascade, the own part
        need = l_max if not shared else max(c.start + 1 - c.shared for c in chunks)
        clusters = tuple(dict.fromkeys(c.cluster for c in chunks)) if shared else ()
        reuse = kv.plan(tuple(c.uid for c in chunks), [c.start for c in chunks], shared, need, clusters)
        fresh = reuse is None
        grow = reuse is not None and reuse.grow
        if fresh or grow:
            kv.cap = self._cap(chunks, need, len(clusters))
        cap = kv.cap
        if shared and reuse is not None and reuse.keep is None and not grow and self._last_cascade is not None:
            # the same sequences, each one token further: only their own lengths moved
            casc = self._last_cascade.advance()
        else:
            casc = self._cascade(chunks, rows, cap) if shared else None
        if shared:
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
        per_column = self.kv_heads * self.head_dim
        kept = kv.keep(int(per_row * len(chunks)) * per_column, self._slack(len(chunks))) if fresh or grow else kv.kept
        n = len(chunks)
        compact = None
        if reuse is not None and reuse.keep is not None:
            dev = self.device
            compact = attention.Compaction(torch.tensor(reuse.keep, device=dev), reuse.old_rows,
                                           torch.tensor(reuse.keep_clusters or [0], device=dev),
                                           reuse.old_clusters, old_pre_cols)
        meta = attention.DecodeMeta(kv, fresh, kept, cap, slots, cols, torch.arange(n, device=self.device), compact, grow)
        return attention.AttentionGroup(self.table.rows[rows, :l_max], starts[:, None], None, n, casc, meta)

    def _slack(self, rows: int) -> int:
        """Elements per layer the kept buffers may hold beyond the pool's size: each row's
        rounding up to KEY_BLOCK columns (a group whose contexts fill the pool still fits)."""
        return rows * KEY_BLOCK * self.kv_heads * self.head_dim

    def _cap(self, chunks: list[Chunk], need: int, n_clusters: int) -> int:
        """Columns for a decode group's rebuilt buffers: `need` and HEADROOM more, a multiple
        of KEY_BLOCK (as prefill keys: see invariant.py); less headroom when that much would not
        be kept (workspace.DecodeKV.keep: at most the pool's bytes), for rebuilding a few
        steps sooner costs far less than gathering every layer at every step. `n_clusters`:
        the cascade group's clusters (0: the plain group)."""
        cap = round_up(need + HEADROOM, KEY_BLOCK)
        shared = n_clusters > 0
        fixed = 0  # columns besides the own ones: the cascade's prefix regions, as cascade.build lays them out
        if shared:
            fixed = n_clusters * cascade.prefix_columns(
                max(c.shared for c in chunks), self.table.rows.shape[1], KEY_BLOCK)
        elements = self.decode_kv[shared].limit_elements(self._slack(len(chunks)))
        room = elements // (self.kv_heads * self.head_dim) - fixed
        if room < cap * len(chunks):
            cap = max(round_up(need, KEY_BLOCK), room // len(chunks) // KEY_BLOCK * KEY_BLOCK)
        return min(cap, self.table.rows.shape[1]) if not shared else cap

    def _group(self, chunks: list[Chunk], decode: bool, shared: bool = False) -> attention.AttentionGroup:
        dev = self.device
        rows = torch.tensor([c.row for c in chunks], dtype=torch.long, device=dev)
        lens = [len(c.token_ids) for c in chunks]
        starts = torch.tensor([c.start for c in chunks], dtype=torch.long, device=dev)
        l_max = max(c.start + n for c, n in zip(chunks, lens))
        if decode:
            return self._decode_group(chunks, rows, starts, l_max, shared)
        # Keys padded to a multiple of KEY_BLOCK (masked): a query's sums run in the same
        # order whatever the longest sequence beside this one is (see invariant.py)
        kv_slots = self.table.rows[rows, :min(round_up(l_max, KEY_BLOCK), self.table.rows.shape[1])]
        # Padded query layout: token i of sequence b sits at b * q_max + i.
        #   packed: [a0 a1 a2 | b0 b1]   ->   padded: [a0 a1 a2 | b0 b1 --]   (q_max = 3)
        q_max = max(2, *lens)  # one query alone is multiplied another way (see invariant.py)
        lens_t = torch.tensor(lens, dtype=torch.long, device=dev)
        i = torch.arange(q_max, device=dev)
        q_pos = starts[:, None] + torch.minimum(i[None, :], lens_t[:, None] - 1)
        first = torch.cumsum(lens_t, 0) - lens_t  # packed index of each sequence's first token
        n_tok = sum(lens)
        shift = torch.repeat_interleave(torch.arange(len(chunks), device=dev) * q_max - first, lens_t, output_size=n_tok)
        q_dst = torch.arange(n_tok, device=dev) + shift
        return attention.AttentionGroup(kv_slots, q_pos, q_dst, n_tok)
