"""The model runner: one forward of the model's own code over a packed batch of chunks.

It turns the scheduler's chunks (a sequence's next new tokens and the slots chosen for
them, already recorded in the slot table) into `input_ids` / `position_ids` of shape
[1, T], builds the attention metadata once, and runs the model with the paged attention
function switched on for this call only (the same model object can serve other code,
e.g. the `transformers` baseline, between calls). It owns no memory decisions.

A decode forward of the same sequences as the last one, each one token further (most of a
long decode's forwards), plans nothing per sequence: it moves the last forward's
positions and attention metadata one token on, on the device (`_advance`). A step of a
decode run (decode_run.py) is known to be one by the scheduler's word, and its input ids
are the tokens the run sampled last, on the device. Host work then grows with what
changed, not with the sequences in flight.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch

from ets.engine import attention, cascade, compiled
from ets.engine.decode_run import DecodeRun, DecodeStep
from ets.engine.hidden import Pooling, final_hidden
from ets.engine.groups import MAX_KEPT_GROUPS, cascade_decode_groups, plain_decode_groups, prefill_groups
from ets.engine.pool import KVPool
from ets.engine.sequence import Chunk
from ets.engine.linears import PackedLinears
from ets.engine.invariant import KEY_BLOCK, MIN_ROWS, least_per_product, round_up
from ets.engine.table import SlotTable
from ets.engine.workspace import HEADROOM, DecodeGroups, DecodeKV, Workspace

log = logging.getLogger(__name__)


class Outputs(Sequence[torch.Tensor]):
    """A forward's outputs, chunk by chunk: `outputs[i]` [len(keep_i), V] are chunk i's.

    They stay one tensor, `rows`, in the order the runner packed the chunks; a decode step
    samples every chunk's last row, and `last` hands those over in one indexed read (or as
    `rows` itself when they are already in that order) instead of a view per sequence."""

    def __init__(self, rows: torch.Tensor, first: list[int], count: list[int], every_last: bool = False,
                 last_rows: torch.Tensor | None = None):
        self.rows, self.first, self.count = rows, first, count
        # every chunk keeps one row (a decode forward): `last_rows` are those rows in the
        # chunks' order, None when `rows` already are
        self.every_last, self.last_rows = every_last, last_rows

    def __len__(self) -> int:
        return len(self.first)

    def __getitem__(self, i):  # type: ignore[override]
        return self.rows[self.first[i]: self.first[i] + self.count[i]]

    def last(self, chunks: Sequence[int]) -> torch.Tensor:
        """[len(chunks), V]: the last output row of each of these chunks, in this order."""
        if self.every_last and chunks == range(len(self.first)):  # every chunk, in order: no list
            return self.rows if self.last_rows is None else self.rows.index_select(0, self.last_rows)
        index = [self.first[i] + self.count[i] - 1 for i in chunks]
        if len(index) == self.rows.shape[0] and index == list(range(len(index))):
            return self.rows
        return self.rows.index_select(0, torch.tensor(index, dtype=torch.long, device=self.rows.device))


class _Held(NamedTuple):
    """A decode group as one forward left it: its kept buffers' state, whether its
    sequences share prefixes (cascade), their slot-table rows and positions [B] (on the
    device), the longest context (l_max), the columns its buffers needed, and arange(B)."""
    state: DecodeKV
    shared: bool
    rows: torch.Tensor
    starts: torch.Tensor
    l_max: int
    need: int
    index: torch.Tensor


class _Packed(NamedTuple):
    """One forward's packing: its attention groups and the model's inputs ([1, rows],
    padded: ModelRunner._rows), each packed token's slot-table row, the kept output rows
    (`n_keep` of them real), the chunks' packing order (decode chunks first, `n_decode`
    of them), and where each chunk's outputs start in the output rows and how many; for a
    decode forward, each chunk's one output row in the chunks' order (None: in order)."""
    groups: list[attention.AttentionGroup]
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    table_rows: torch.Tensor
    keep: torch.Tensor
    n_keep: int
    n_tokens: int
    order: list[int]
    n_decode: int
    first: list[int]
    counts: list[int]
    last_rows: torch.Tensor | None = None


@dataclass
class _Decoded:
    """The last forward, when it decoded only: its packing, its decode groups, and how to
    know that the next forward is the same sequences one token further
    (ModelRunner._advance): it is the next step of the same decode run (`run`, `step`:
    decode_run.py), or its chunks are `expect` ((uid, start, decode) each, in the call's
    order; None: only a step of the run follows it). `ids_index`: the run's rows in
    packing order, padded (the next input ids, from the run's sampled tokens)."""
    packed: _Packed
    held: list[_Held]
    expect: list[tuple[int, int, bool]] | None
    run: DecodeRun | None = None
    step: int = -1
    ids_index: torch.Tensor | None = None


class ModelRunner:
    def __init__(self, model, pool: KVPool, table: SlotTable, batch_invariant: bool = True,
                 cascade: bool = True, compile: str | bool = False, clock: dict[str, float] | None = None,
                 counters: dict[str, int] | None = None, linears: PackedLinears | None = None,
                 advance: bool = True):
        attention.register()
        # seconds by phase, added to: "prepare" (this forward's metadata) and "model" (the
        # model's own code); the engine's clock (Engine.step_seconds) when given
        self.clock = {"prepare": 0.0, "model": 0.0} if clock is None else clock
        # "advanced_steps" added to: the forwards `_advance` served (the engine's counters when given)
        self.counters = {"advanced_steps": 0} if counters is None else counters
        # compile (auto | on | off, or a bool: compiled.enabled): the model's forward runs
        # compiled (compiled.py), its rows padded as it asks. Under "auto" a compiled forward
        # that fails runs again eagerly, and so do all after it (`compile_failed`)
        self.compiled = compiled.CompiledModel(model, pool.device) if compiled.enabled(compile, pool.device) else None
        self.compile_fallback, self.compile_failed = compile == "auto", False
        # the linear layers' oneDNN weights (linears.py), routed to for each forward; None: torch's linears
        self.linears = linears
        self.cascade = cascade  # False: decode sequences with siblings are attended plainly too
        # the rows a forward is padded to (1: none; then a small batch rounds its own way,
        # ~25% faster at one sequence on the demo policy)
        self.min_rows = MIN_ROWS if batch_invariant else 1
        self.model = model
        self.pool = pool
        self.table = table
        self._pool_seconds = 0.0  # host time of `_pool` since `take_pool_seconds`
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
        # kept decode buffers, of the plain groups (False) and of the cascade ones (True): each
        # kind at most as much memory again as the pool itself (and KEY_BLOCK columns a row: _slack)
        self.decode_kv = {shared: DecodeGroups(len(pool.k), dtype, self.device, limit_bytes=pool.num_bytes, grows=shared)
                          for shared in (False, True)}
        # the last forward, when it decoded only: the next one, of the same sequences one
        # token further, moves its packing on (`_advance`; unless `advance` is False)
        self.advance = advance
        self._last: _Decoded | None = None

    @contextlib.contextmanager
    def _paged_attention(self):
        """Route this model's attention through the pool for one forward, then restore it."""
        config = self.model.config
        previous = config._attn_implementation
        config._attn_implementation = attention.ATTENTION_NAME if self.compiled is None else compiled.ATTENTION_NAME
        try:
            yield
        finally:
            config._attn_implementation = previous

    @torch.inference_mode()
    def forward(self, chunks: Sequence[Chunk], hidden: bool = False, pool: Pooling | None = None) -> "Outputs":
        """Per chunk, the logits (or final hidden states) at its `keep` offsets: [len(keep), V].
        With `pool`, the final hidden states it names are added to its sums, read off the
        model's final norm in this same forward (one gather and one index_add)."""
        t_start = time.perf_counter()
        packed, batch = self._prepare(chunks, hidden)
        t_model = time.perf_counter()
        try:
            out, states = self._call_model(batch, packed, hidden, pool is not None)
        except compiled.CompileFailed as failure:
            self._stop_compiling(failure)
            packed, batch = self._prepare(chunks, hidden)  # the kept buffers rebuilt from the pool
            out, states = self._call_model(batch, packed, hidden, pool is not None)
        t_end = t_pooled = time.perf_counter()
        self.clock["model"] += t_end - t_model
        if pool is not None:  # (its time is the embedding's: Engine.embed_seconds)
            self._pool(states[-1][0], pool, chunks, packed)
            t_pooled = time.perf_counter()
            self._pool_seconds += t_pooled - t_end
        outputs = Outputs(out, packed.first, packed.counts, packed.n_decode == len(packed.order), packed.last_rows)
        self.clock["prepare"] += (t_model - t_start) + (time.perf_counter() - t_pooled)
        return outputs

    def _prepare(self, chunks: Sequence[Chunk], hidden: bool) -> tuple["_Packed", attention.PackedBatch]:
        """This forward's packing (moved on from the last forward's where it can be) and the
        batch its attention reads."""
        packed = self._advance(chunks) if not hidden and self.advance else None
        if packed is None:
            packed = self._pack(chunks, record=not hidden and self.advance)
        # the new tokens' slots, read from the slot table (the scheduler wrote them there)
        n_tokens, rows = packed.n_tokens, packed.position_ids.shape[1]
        slots = self.table.rows[packed.table_rows, packed.position_ids[0, :n_tokens]]
        if rows > n_tokens:  # the padding rows write their K/V to the pool's scratch slot
            slots = torch.cat([slots, slots.new_full((rows - n_tokens,), self.pool.scratch_slot)])
        return packed, attention.PackedBatch(self.pool.k, self.pool.v, slots, packed.groups, self.workspace)

    def _call_model(self, batch: attention.PackedBatch, packed: "_Packed", hidden: bool, states: bool):
        """The model's own code over the packed batch, compiled or eager: (the logits at the
        kept rows, or with `hidden` the final hidden states there; and with `states` a list
        holding the final hidden states of every row, else an empty list)."""
        input_ids, position_ids, keep_t, n_keep = packed.input_ids, packed.position_ids, packed.keep, packed.n_keep
        hooked = states and self.compiled is None  # compiled, the graph hands them out
        with self._paged_attention(), (self.linears.routed() if self.linears is not None else contextlib.nullcontext()), \
                (final_hidden(self.model) if hooked else contextlib.nullcontext()) as finals:
            if self.compiled is not None:
                out, final = self.compiled.forward(batch, input_ids, position_ids, None if hidden else keep_t,
                                                   states=states)
                return (out[0, keep_t[:n_keep]] if hidden else out[0, :n_keep]), [final]
            if hidden:
                out = self.model.base_model(
                    input_ids=input_ids, position_ids=position_ids, use_cache=False, ets_batch=batch
                ).last_hidden_state[0, keep_t[:n_keep]]
            else:
                out = self.model(
                    input_ids=input_ids, position_ids=position_ids, use_cache=False,
                    logits_to_keep=keep_t, ets_batch=batch,
                ).logits[0, :n_keep]
        return out, finals if hooked else []

    def _stop_compiling(self, failure: compiled.CompileFailed) -> None:
        """The compiled forward failed: with `compile="auto"` say so and run eagerly from now
        on, this forward too, packed afresh; with "on", raise. (The failed forward may have
        written some layers' K/V, which the eager one writes again to the same slots, and
        moved the kept decode buffers on, which are dropped here and gathered again from
        the pool.)"""
        device = self.pool.device
        if not self.compile_fallback:
            raise RuntimeError(f"compile=on: the model's compiled forward failed on {device} ({failure}); "
                               "set policy.compile: off to run it eagerly") from failure.__cause__
        log.warning("compile=auto: the model's compiled forward failed on %s (%s); running it eagerly from now on "
                    "(set policy.compile: off to skip the attempt)", device, failure)
        self.compile_failed = True
        self.compiled = None
        self._last = None  # (its packing was padded for the compiled graph)
        for kind in self.decode_kv.values():
            kind.reset()

    def _pack(self, chunks: Sequence[Chunk], record: bool) -> "_Packed":
        """This forward's packing and attention metadata, from its chunks. `record`: when it
        decodes only, keep what the next forward of the same sequences reuses (`_advance`)."""
        # Decode chunks first: those alone on their path (plain attention), then those with
        # siblings (cascade attention, by cluster; plain too when the cascade is off); then
        # prefill chunks, in groups of like lengths (prefill_groups). Each group is contiguous.
        # (Which group a sequence joins depends on its own request only, or changes none of
        # its numbers: invariant.py.)
        self._last = None
        step = chunks if isinstance(chunks, DecodeStep) else None
        chunks = list(chunks)  # (a decode run's step makes its chunks when read: once here)
        sizes = Counter(c.cluster for c in chunks if c.decode) if self.cascade else Counter()
        kind = [(1 if sizes[c.cluster] > 1 else 0) if c.decode else 2 for c in chunks]
        order = sorted(range(len(chunks)), key=lambda i: (kind[i], chunks[i].cluster))
        n_plain, n_cascade = kind.count(0), kind.count(1)
        n_decode = n_plain + n_cascade
        groups, held = [], []
        for shared, lo, hi in ((False, 0, n_plain), (True, n_plain, n_decode)):
            if hi > lo:  # this kind's decode groups, packed one after another
                decode = self._decode_groups([chunks[i] for i in order[lo:hi]], shared)
                order[lo:hi] = [order[lo + k] for part, _, _ in decode for k in part]
                groups.extend(group for _, group, _ in decode)
                held.extend(h for _, _, h in decode)
            else:  # a forward without this kind of decode token: its kept buffers go stale
                self.decode_kv[shared].reset()
        prefill = order[n_decode:]
        parts = prefill_groups([len(chunks[i].token_ids) for i in prefill],
                               [chunks[i].start + len(chunks[i].token_ids) for i in prefill]) if prefill else []
        order[n_decode:] = [prefill[j] for part in parts for j in part]  # packed group by group
        ordered = [chunks[i] for i in order]
        # the decode chunks (first): one token each, whose one output is kept
        ids = [c.token_ids[0] for c in ordered[:n_decode]]
        pos = [c.start for c in ordered[:n_decode]]
        table_rows = [c.row for c in ordered[:n_decode]]  # each token's slot-table row
        keep = list(range(n_decode))
        for c in ordered[n_decode:]:
            base = len(ids)
            ids.extend(c.token_ids)
            pos.extend(range(c.start, c.start + len(c.token_ids)))
            table_rows.extend([c.row] * len(c.token_ids))
            keep.extend(base + k for k in c.keep)
        at = n_decode
        for part in parts:
            groups.append(self._prefill_group(ordered[at:at + len(part)]))
            at += len(part)

        # At least MIN_ROWS rows through the model's matmuls (copies of the last token, and
        # of the last kept row; their outputs are dropped, their K/V go to a scratch slot):
        # see invariant.py; compiled, as many more as its shapes want (CompiledModel.rows)
        rows = self._rows(len(ids))
        n_tokens = len(ids)
        ids += ids[-1:] * (rows - len(ids))
        pos += pos[-1:] * (rows - len(pos))
        n_keep = len(keep)
        # (a forward of pooling sequences alone may keep no output: it reads row 0, dropped)
        keep += (keep[-1:] or [0]) * (self._rows(len(keep)) - len(keep))
        dev = self.device
        input_ids = torch.tensor([ids], dtype=torch.long, device=dev)
        position_ids = torch.tensor([pos], dtype=torch.long, device=dev)
        keep_t = torch.tensor(keep, dtype=torch.long, device=dev)
        table_rows_t = torch.tensor(table_rows, dtype=torch.long, device=dev)
        first = [0] * len(chunks)  # chunk i's outputs are rows first[i]..first[i] + len(keep) of `out`
        row = 0
        for i in order:
            first[i] = row
            row += len(chunks[i].keep)
        last_rows = None
        if n_decode == len(chunks) and first != list(range(len(first))):
            last_rows = torch.tensor(first, dtype=torch.long, device=dev)
        packed = _Packed(groups, input_ids, position_ids, table_rows_t, keep_t, n_keep, n_tokens, order, n_decode,
                         first, [len(c.keep) for c in chunks], last_rows)
        if record and n_decode == len(chunks):
            if step is not None:
                index = torch.tensor(order + order[-1:] * (rows - n_tokens), dtype=torch.long, device=dev)
                self._last = _Decoded(packed, held, None, step.run, step.step, index)
            else:
                self._last = _Decoded(packed, held, [(c.uid, c.start + 1, True) for c in chunks])
        return packed

    def _advance(self, chunks: Sequence[Chunk]) -> "_Packed | None":
        """The last forward's packing one token further, when this forward is the same
        decode sequences in the same order, each one position on, and every group's kept
        buffers have a column left for it (else None: `_pack` works it out afresh). Then
        the metadata moves on the device (positions, the cascade's own columns and mask)
        and nothing is planned per sequence: no grouping, sorting or routing, and no
        table rows or positions copied from the host."""
        last = self._last
        if last is None:
            return None
        sampled = None  # the next step of the last forward's decode run: its input ids, drawn by the run
        if isinstance(chunks, DecodeStep) and chunks.follows(last.run, last.step):
            sampled = chunks.input_ids()  # (the scheduler vouches for each sequence)
            if sampled is None:  # drawn elsewhere: planned afresh
                return None
        elif last.expect is None or len(chunks) != len(last.expect) or \
                [(c.uid, c.start, c.decode) for c in chunks] != last.expect:
            return None
        if any(h.need >= h.state.cap for h in last.held):  # a group runs past its columns: rebuild or grow
            return None
        # A cascade group whose buffers are not kept per layer gathers its own columns from
        # the pool every layer, at the slots its metadata read from the table when it was
        # built, which end at that forward's tokens: planned afresh, as `plan` rebuilds it
        if any(h.shared and not h.state.kept for h in last.held):
            return None
        prev = last.packed
        groups = []
        for k, h in enumerate(last.held):
            casc = h.state.last_cascade.advance() if h.shared else None
            h.state.last_cascade = casc
            h.state.advance()
            last.held[k] = h = h._replace(starts=h.starts + 1, l_max=h.l_max + 1, need=h.need + 1)
            groups.append(self._decode_meta(h, casc, "reuse", None))
        if sampled is not None:  # what the run sampled last, on the device
            last.step = chunks.step
            input_ids = sampled.index_select(0, last.ids_index)[None]
        else:
            ids = [chunks[i].token_ids[0] for i in prev.order]
            last.expect = [(u, s + 1, d) for u, s, d in last.expect]
            ids += ids[-1:] * (prev.position_ids.shape[1] - len(ids))
            input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        packed = prev._replace(groups=groups, input_ids=input_ids, position_ids=prev.position_ids + 1)
        last.packed = packed
        self.counters["advanced_steps"] += 1
        return packed

    def _rows(self, rows: int) -> int:
        """The rows a forward of `rows` rows (or kept outputs) is padded to: MIN_ROWS at
        least (invariant.py), and compiled, what its shapes want."""
        rows = max(rows, self.min_rows)
        return rows if self.compiled is None else self.compiled.rows(rows)

    def take_pool_seconds(self) -> float:
        """The host seconds pooling took since the last call (and zero them)."""
        seconds, self._pool_seconds = self._pool_seconds, 0.0
        return seconds

    def _pool(self, states: torch.Tensor, pool: Pooling, chunks: Sequence[Chunk], packed: _Packed) -> None:
        """Add the rows of `states` ([T, hidden], the forward's packed tokens) that `pool`
        names to its sums. (A decode step adds one row a sequence; where a chunk adds
        several to one sum, a GPU adds them in any order, which moves the sum's last bits.)"""
        if pool.chunks is not None:  # a decode forward: chunk i's one token is row first[i]
            rows_t = pool.chunks if packed.last_rows is None else packed.last_rows.index_select(0, pool.chunks)
            pool.sums.index_add_(0, pool.slots, states.index_select(0, rows_t).to(pool.sums.dtype))
            return
        order, n_decode = packed.order, packed.n_decode
        start = [0] * len(order)  # each chunk's first row, by its index in the call: packed in
        row = 0                   # `order`, a decode chunk one token, a prefill chunk all of its
        for k, i in enumerate(order):
            start[i] = row
            row += 1 if k < n_decode else len(chunks[i].token_ids)
        rows, slots = [], []
        for i, lo, hi, slot in pool.items:
            rows.extend(range(start[i] + lo, start[i] + hi))
            slots.extend([slot] * (hi - lo))
        dev = states.device
        picked = states.index_select(0, torch.tensor(rows, dtype=torch.long, device=dev))
        pool.sums.index_add_(0, torch.tensor(slots, dtype=torch.long, device=dev), picked.to(pool.sums.dtype))

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

    def _decode_groups(self, chunks: list[Chunk], shared: bool) -> list[tuple[list[int], attention.AttentionGroup, "_Held"]]:
        """The decode chunks of one kind (`shared`: clusters of siblings, cascade attention;
        else one sequence per path, plain) in groups (ets/engine/groups.py), each with its
        kept gather buffers (workspace.DecodeKV): (the chunks' indices, in packing order,
        the group, and what `_advance` moves on from) per group. `chunks` come sorted by
        cluster.

        The buffers are reused while the groups are the last forward's sequences one step
        further, or fewer of them (the leavers' rows compacted away); past a cascade
        group's columns, every cascade group gathers its own columns anew, wider, and keeps
        its prefixes (`grow`). Newcomers to plain decode beside such groups gather into
        groups of their own (`_append`: only their contexts are read), while there is room
        and at most MAX_KEPT_GROUPS are live; any other change (a newcomer to the cascade,
        a plain group past its columns) cuts the groups afresh and rebuilds them all."""
        kind = self.decode_kv[shared]
        where = kind.route([c.uid for c in chunks])
        newcomers = [k for k, w in enumerate(where) if w < 0]
        mode, parts, reuse, held, fresh = "rebuild", [], {}, {}, set()
        if len(newcomers) < len(chunks) and (not newcomers or not shared):
            # the same sequences, or fewer, each in its group (and newcomers, plain only)
            parts = [[] for _ in range(max(where) + 1)]
            for k, w in enumerate(where):
                if w >= 0:
                    parts[w].append(k)
            for w, part in enumerate(parts):
                if part:
                    mine = [chunks[k] for k in part]
                    uids, starts, _, clusters = held[w] = self._held(mine, shared)
                    reuse[w] = kind.groups[w].plan(uids, starts, shared, self._need(mine, shared), clusters)
            found = list(reuse.values())
            if all(r is not None for r in found):
                grow = any(r.grow for r in found)
                mode = "reuse" if not grow else "grow" if all(r.keep is None for r in found) else "rebuild"
            if mode == "reuse" and newcomers:
                fresh = self._append(kind, parts, [chunks[k] for k in newcomers], newcomers)
                mode = "reuse" if fresh else "rebuild"
        if mode == "rebuild":  # cut afresh; `assign` keeps the leavers' uids till then (a uid is never reused)
            parts, reuse, held, fresh = self._cut(chunks, shared), {}, {}, set()
            kind.assign = {chunks[k].uid: w for w, part in enumerate(parts) for k in part}
        states = kind.ensure(len(parts))
        live = [(w, [chunks[k] for k in part]) for w, part in enumerate(parts) if part]
        if mode != "reuse":
            self._lay_out(kind, [states[w] for w, _ in live], [mine for _, mine in live], shared, mode)
        out = []
        for w, mine in live:
            group_mode = "rebuild" if w in fresh else mode
            out.append((parts[w], *self._decode_group(states[w], mine, shared, group_mode, reuse.get(w))))
            states[w].commit(*(held.get(w) or self._held(mine, shared)))
        return out

    def _append(self, kind: DecodeGroups, parts: list[list[int]], chunks: list[Chunk], index: list[int]) -> set[int]:
        """Newcomers to plain decode (`chunks`, at `index` in the forward's decode chunks) cut
        into groups of their own, appended to `parts` and placed after the kept groups'
        buffers (DecodeGroups.append), the others' buffers untouched; their numbers in
        `kind.assign`. Returns the new groups' numbers; empty (nothing changed): they do
        not fit, or more than MAX_KEPT_GROUPS groups would be live, and the caller
        rebuilds every group."""
        cuts = plain_decode_groups([c.start + 1 for c in chunks], HEADROOM)
        if sum(1 for p in parts if p) + len(cuts) > MAX_KEPT_GROUPS:
            return set()
        first = len(parts)
        states = kind.ensure(first + len(cuts))[first:first + len(cuts)]
        mine = [[chunks[k] for k in sorted(cut)] for cut in cuts]
        caps = [min(round_up(self._need(m, False) + HEADROOM, KEY_BLOCK), self.table.rows.shape[1]) for m in mine]
        per_column = self.kv_heads * self.head_dim
        rows = sum(len(p) for p in parts) + len(chunks)
        if not kind.append(states, "ctx", [cap * len(m) * per_column for cap, m in zip(caps, mine)],
                           self._slack(rows)):
            return set()
        for state, cap in zip(states, caps):
            state.cap = cap
        for g, cut in enumerate(cuts):
            parts.append([index[k] for k in sorted(cut)])
            for k in cut:
                kind.assign[chunks[k].uid] = first + g
        return set(range(first, first + len(cuts)))

    @staticmethod
    def _held(chunks: list[Chunk], shared: bool) -> tuple:
        """What a group's kept buffers hold: (uids, starts, mode, clusters)."""
        clusters = tuple(dict.fromkeys(c.cluster for c in chunks)) if shared else ()
        return tuple(c.uid for c in chunks), [c.start for c in chunks], shared, clusters

    @staticmethod
    def _need(chunks: list[Chunk], shared: bool) -> int:
        """Columns a group's buffers need now: plain, the whole context; cascade, the own part."""
        return max(c.start + 1 - (c.shared if shared else 0) for c in chunks)

    def _cut(self, chunks: list[Chunk], shared: bool) -> list[list[int]]:
        """A kind's decode chunks cut into groups (ets/engine/groups.py), as lists of their
        indices, each in the chunks' order (so sorted by cluster, as cascade.build needs)."""
        if not shared:
            return [sorted(part) for part in plain_decode_groups([c.start + 1 for c in chunks], HEADROOM)]
        first: dict[tuple, int] = {}  # cluster -> its index, in order of appearance
        members, prefixes, owns, of = [], [], [], []
        for c in chunks:
            if c.cluster not in first:
                first[c.cluster] = len(members)
                members.append(0)
                prefixes.append(c.shared)
                owns.append(0)
            i = first[c.cluster]
            members[i] += 1
            owns[i] = max(owns[i], c.start + 1 - c.shared)
            of.append(i)
        parts = cascade_decode_groups(members, prefixes, owns, self.min_members, HEADROOM)
        group_of = {c: g for g, part in enumerate(parts) for c in part}
        out: list[list[int]] = [[] for _ in parts]
        for k, c in enumerate(of):
            out[group_of[c]].append(k)
        return out

    def _lay_out(self, kind: DecodeGroups, states: list[DecodeKV], parts: list[list[Chunk]], shared: bool,
                 mode: str) -> None:
        """On a rebuild or a growth: each group's columns (`need` and HEADROOM more, a
        multiple of KEY_BLOCK; no headroom when that much would not be kept, for rebuilding
        a few steps sooner costs far less than gathering every layer at every step),
        whether the kind's buffers are kept per layer (workspace.DecodeGroups.keep: at most
        the pool's bytes), and where each group's regions lie (a growth moves only the
        own columns: the prefixes stay where they are)."""
        per_column = self.kv_heads * self.head_dim
        rows = sum(len(p) for p in parts)
        needs = [self._need(p, shared) for p in parts]
        fixed = [0] * len(parts)  # columns besides the own ones: the cascade's prefix regions
        if shared:
            fixed = [len({c.cluster for c in p}) * cascade.prefix_columns(
                max(c.shared for c in p), self.table.rows.shape[1], KEY_BLOCK) for p in parts]
        caps = [round_up(n + HEADROOM, KEY_BLOCK) for n in needs]
        room = kind.limit_elements(self._slack(rows)) // per_column
        if sum(f + cap * len(p) for f, cap, p in zip(fixed, caps, parts)) > room:
            caps = [round_up(n, KEY_BLOCK) for n in needs]
        if not shared:
            caps = [min(cap, self.table.rows.shape[1]) for cap in caps]
        own = [cap * len(p) * per_column for cap, p in zip(caps, parts)]
        kind.keep(sum(fixed) * per_column + sum(own), self._slack(rows))
        for state, cap in zip(states, caps):
            state.cap = cap
        if shared and mode == "rebuild":
            kind.lay_out(states, "pre", [f * per_column for f in fixed])
        kind.lay_out(states, "own" if shared else "ctx", own)

    def _decode_group(self, state: DecodeKV, chunks: list[Chunk], shared: bool, mode: str,
                      reuse) -> tuple[attention.AttentionGroup, "_Held"]:
        """One decode group over its kept buffers (`state`), in `mode`: "rebuild" (every
        layer gathers), "grow" (a cascade group gathers its own columns anew) or "reuse"
        (only the new tokens are written, after compacting `reuse.keep` when some left);
        and what the next forward of the same sequences starts from (`_advance`)."""
        dev = self.device
        rows = torch.tensor([c.row for c in chunks], dtype=torch.long, device=dev)
        starts = torch.tensor([c.start for c in chunks], dtype=torch.long, device=dev)
        if shared and mode == "reuse" and reuse.keep is None and state.last_cascade is not None:
            # the same sequences, each one token further: only their own lengths moved
            casc = state.last_cascade.advance()
        else:
            casc = self._cascade(chunks, rows, state.cap) if shared else None
        state.last_cascade = casc
        compact = None
        if reuse is not None and reuse.keep is not None:
            compact = attention.Compaction(torch.tensor(reuse.keep, device=dev), reuse.old_rows,
                                           torch.tensor(reuse.keep_clusters or [0], device=dev),
                                           reuse.old_clusters, state.pre_cols)
        l_max = max(c.start + 1 for c in chunks)  # a plain group's need too: its whole contexts
        held = _Held(state, shared, rows, starts, l_max, self._need(chunks, True) if shared else l_max,
                     torch.arange(len(chunks), device=dev))
        return self._decode_meta(held, casc, mode, compact), held

    def _decode_meta(self, h: "_Held", casc: cascade.CascadeMeta | None, mode: str,
                     compact: attention.Compaction | None) -> attention.AttentionGroup:
        """The attention group of decode group `h` (its cascade metadata `casc`), in `mode`."""
        state = h.state
        if casc is None:  # (the gather index only serves a gather: a rebuild, or buffers not kept per layer)
            gathers = mode == "rebuild" or not state.kept
            slots, cols = self.table.gather(h.rows, state.cap) if gathers else None, h.starts
        else:
            slots, cols = casc.own_slots, casc.own_cols
            state.pre_cols = casc.pre_slots.shape[1]
        meta = attention.DecodeMeta(state, mode == "rebuild", state.kept, state.cap, slots, cols, h.index, compact,
                                    mode == "grow")
        return attention.AttentionGroup(self.table.gather(h.rows, h.l_max), h.starts[:, None], None, h.index.numel(),
                                        casc, meta)

    def _slack(self, rows: int) -> int:
        """Elements per layer the kept buffers may hold beyond the pool's size: each row's
        rounding up to KEY_BLOCK columns (a group whose contexts fill the pool still fits)."""
        return rows * KEY_BLOCK * self.kv_heads * self.head_dim

    def _prefill_group(self, chunks: list[Chunk]) -> attention.AttentionGroup:
        dev = self.device
        rows = torch.tensor([c.row for c in chunks], dtype=torch.long, device=dev)
        lens = [len(c.token_ids) for c in chunks]
        starts = torch.tensor([c.start for c in chunks], dtype=torch.long, device=dev)
        l_max = max(c.start + n for c, n in zip(chunks, lens))
        # Keys padded to a multiple of KEY_BLOCK (masked): a query's sums run in the same
        # order whatever the longest sequence beside this one is (see invariant.py)
        kv_slots = self.table.gather(rows, min(round_up(l_max, KEY_BLOCK), self.table.rows.shape[1]))
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
