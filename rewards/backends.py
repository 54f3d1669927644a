"""Where a PRM's forward pass runs: a plain batched forward, or the engine's `score` call.

Both answer the same question, "the output rows at these positions of these sequences":

    logits_at(sequences, positions) -> [tensor[len(positions[i]), len(columns)] for each i]

where `columns` are the output columns the PRM reads (e.g. the ids of "+" and "-"), so
neither path keeps a vocabulary-wide tensor per step; `columns=None` reads every column
(a PRM that needs its LM's log-probabilities: rewards/surprise.py). Both count what they computed:
`computed_tokens` (tokens run through the model) and `cache_hit_tokens` (tokens whose
KV came from a prefix cache instead; always 0 for the plain forward).

Both can also pool, from the same forwards, the model's final hidden states over a span
of each sequence (a step embedding for ETS's `search.embedder: prm`, ets/engine/hidden.py):

    logits_and_pooled(sequences, positions, spans) -> (rows as above, [sequences, hidden])

`pools_hidden_states` says whether the model has the final norm they are read from;
`embedded_steps` and `embed_seconds` in `stats()` count the vectors and the host time
their pooling took.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import sys
import time
from array import array
from bisect import bisect_left
from collections import OrderedDict
from itertools import chain
from typing import Any, Protocol, Sequence

import torch

from ets.config import ConfigError
from ets.engine.engine import PoolTooSmall
from ets.engine.hidden import final_hidden, final_norm
from ets.engine.prefix import prefix_levels

log = logging.getLogger(__name__)

_AFTER_ANY_TOKEN = sys.maxsize    # sorts after every token id


Span = tuple[int, int]   # positions lo..hi-1 of a sequence, whose final hidden states are pooled


class ScoringBackend(Protocol):
    def logits_at(self, sequences: list[list[int]], positions: list[list[int]]) -> list[torch.Tensor]: ...

    def stats(self) -> dict[str, int]: ...


class ForwardBackend:
    """Plain `model(...)` calls; no cache, every token recomputed.

    `batch_invariant` (the default): one sequence per forward, unpadded, with only its own
    rows kept, so a sequence's scores are the same bit for bit whatever else is scored in
    the call: a problem's records do not depend on `concurrency`, on what else is in flight,
    or on a resume. A padded batch cannot promise that: kernels sum a row over the batch's
    padded width and pick their blocking by the batch's shape, so a sequence's scores move
    in the last bits with its batch-mates (up to 3e-8 on the tiny config, where 2 of 4
    records differed between concurrency 1 and 4), which a near-tied selection can turn
    into another record. On the CPU one sequence per forward costs little or nothing: no
    padded tokens, no attention over them. Measured interleaved, one thread, against padded
    batches: a round of 16 sequences of 60-200 tokens took 1.36x as long on the 2-layer,
    64-wide tiny model (its forwards are mostly call overhead), 0.89x on the demo's 4-layer
    PRM, 0.62x on an 8-layer, 512-wide one; rounds of 64 sequences of 100-400 tokens
    1.05x / 0.62x / 0.49x; `ets run`'s reward phase 2.04x on the tiny config (width 16),
    0.89x on the demo's. On a GPU, where a batch keeps the device busy, padded batches
    may be faster: `batch_invariant=False`, at the price above.

    With `batch_invariant=False`, one padded call per micro-batch. Padding (here `p`; `x`
    real tokens), for a batch of lengths 3 and 5:
        right:  x x x p p        left:  p p x x x
                x x x x x               x x x x x
    Position ids count real tokens only (`cumsum(mask) - 1`), so left padding gives each
    token the same position it has unpadded; pads are masked out of attention. Sequences
    are grouped longest-first into micro-batches of at most `max_batch_tokens` padded
    tokens (one sequence per batch if it is longer than that).
    """

    def __init__(self, model, columns: Sequence[int] | None, pad_id: int, padding_side: str = "right",
                 max_batch_tokens: int = 8192, batch_invariant: bool = True):
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
        self.model = model
        self.columns = _columns(columns)
        self.pad_id = pad_id
        self.padding_side = padding_side
        self.max_batch_tokens = max_batch_tokens
        self.batch_invariant = batch_invariant
        # Causal LMs can project only the rows we read (saves a [B, T, vocab] tensor).
        self._keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._stats = {"computed_tokens": 0, "padded_tokens": 0, "cache_hit_tokens": 0, "forward_calls": 0,
                       "embedded_steps": 0, "embed_seconds": 0.0}

    @property
    def pools_hidden_states(self) -> bool:
        """Whether the model has the final norm step embeddings are read from."""
        return final_norm(self.model) is not None

    @classmethod
    def for_tokenizer(cls, model, tokenizer, columns: Sequence[int] | None, padding_side: str | None = None,
                      max_batch_tokens: int = 8192, batch_invariant: bool = True) -> "ForwardBackend":
        """Padding as the tokenizer does it (its pad id, else EOS; its side unless given)."""
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return cls(model, columns, pad_id=pad if pad is not None else 0,
                   padding_side=padding_side or tokenizer.padding_side or "right", max_batch_tokens=max_batch_tokens,
                   batch_invariant=batch_invariant)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def logits_at(self, sequences, positions):
        return self.logits_and_pooled(sequences, positions, None)[0]

    def logits_and_pooled(self, sequences, positions, spans: list[Span] | None):
        """The rows of `logits_at`, and with `spans` each sequence's pooled final hidden
        states over its span ([sequences, hidden], float32, CPU), from the same forwards."""
        out: list[torch.Tensor | None] = [None] * len(sequences)
        pooled: list[torch.Tensor | None] = [None] * len(sequences)
        for batch in self._micro_batches([len(s) for s in sequences]):
            rows, vectors = self._forward([sequences[i] for i in batch], [positions[i] for i in batch],
                                          None if spans is None else [spans[i] for i in batch])
            for k, (i, r) in enumerate(zip(batch, rows)):
                out[i] = r
                if vectors is not None:
                    pooled[i] = vectors[k]
        return out, (torch.stack(pooled) if spans is not None and sequences else None)

    def _micro_batches(self, lengths: list[int]) -> list[list[int]]:
        if self.batch_invariant:
            return [[i] for i in range(len(lengths))]
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        batches: list[list[int]] = []
        for i in order:
            # Longest first: the first sequence of a batch sets its padded width.
            if batches and lengths[batches[-1][0]] * (len(batches[-1]) + 1) <= self.max_batch_tokens:
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    @torch.inference_mode()
    def _forward(self, seqs: list[list[int]], poss: list[list[int]],
                 spans: list[Span] | None = None) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        n = len(seqs)
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        width = int(lengths.max())
        # Where each sequence starts in its padded row (padded index = real index + shift).
        shift = width - lengths if self.padding_side == "left" else torch.zeros(n, dtype=torch.long)
        # Every real token's (row, column), in one scatter instead of one copy per row.
        rows, cols = _flat_index(lengths, shift)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        ids[rows, cols] = torch.tensor(list(chain.from_iterable(seqs)), dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        mask[rows, cols] = 1
        pos_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        # Every position asked for, flattened: its row and its padded index.
        counts = [len(p) for p in poss]
        want_rows = torch.repeat_interleave(torch.arange(n), torch.tensor(counts, dtype=torch.long))
        want_cols = torch.tensor(list(chain.from_iterable(poss)), dtype=torch.long) + shift[want_rows]
        kwargs: dict[str, Any] = {}
        if self._keep_arg:
            keep = torch.unique(want_cols)
            kwargs["logits_to_keep"] = keep.to(self.device)
            want_cols = torch.searchsorted(keep, want_cols)
        dev = self.device
        with final_hidden(self.model) if spans is not None else contextlib.nullcontext() as states:
            out = self.model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos_ids.to(dev),
                             use_cache=False, **kwargs)
        vectors = None
        if spans is not None:
            t0 = time.perf_counter()
            hidden = states[-1]                                           # [B, T, hidden]
            means = torch.stack([hidden[b, lo + int(shift[b]): hi + int(shift[b])].float().mean(0)
                                 for b, (lo, hi) in enumerate(spans)])
            vectors = torch.nn.functional.normalize(means, dim=-1).cpu()
            self._stats["embedded_steps"] += len(spans)
            self._stats["embed_seconds"] += time.perf_counter() - t0
        logits = out.logits if hasattr(out, "logits") else out[0]     # [B, T or K, V]
        # One gather of the rows asked for, then the columns read: [N, C].
        picked = logits[want_rows.to(logits.device), want_cols.to(logits.device)]
        picked = _read_columns(picked, self.columns)
        real = int(lengths.sum())
        self._stats["computed_tokens"] += real
        self._stats["padded_tokens"] += ids.numel() - real
        self._stats["forward_calls"] += 1
        return list(picked.split(counts)), vectors


def forward_backend(model, tokenizer, columns: Sequence[int] | None, options) -> ForwardBackend:
    """The forward backend a PRM's options ask for (`padding_side`, `max_batch_tokens`,
    `batch_invariant`); a padded one says, once, that its scores depend on the batch."""
    backend = ForwardBackend.for_tokenizer(model, tokenizer, columns, options.padding_side, options.max_batch_tokens,
                                           options.batch_invariant)
    if not options.batch_invariant:
        log.info("reward option batch_invariant: false: steps are scored in padded batches, and a step's score moves "
                 "in its last bits with what else is in the batch, so records can differ between runs of another "
                 "concurrency or after a resume (batch_invariant: true scores each sequence alone)")
    return backend


def _columns(columns: Sequence[int] | None) -> torch.Tensor | None:
    return None if columns is None else torch.tensor(list(columns), dtype=torch.long)


def _read_columns(rows: torch.Tensor, columns: torch.Tensor | None) -> torch.Tensor:
    """The columns read of every row ([N, V] -> [N, C]; all of them when None), in fp32 on the CPU."""
    if columns is not None:
        rows = rows.index_select(-1, columns.to(rows.device))
    return rows.float().cpu()


def _flat_index(lengths: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of every element of rows of `lengths` elements starting at `shift`,
    row by row: lengths [2, 3], shift [1, 0] -> rows [0 0 1 1 1], columns [1 2 0 1 2]."""
    rows = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    starts = torch.cumsum(lengths, 0) - lengths          # each row's first flat index
    cols = torch.arange(int(lengths.sum())) - starts[rows] + shift[rows]
    return rows, cols


class EngineBackend:
    """The engine's forward-only `score` call, with two caches on top of its KV cache.

    Why more than `engine.score`: an output row at a position needs that position's token
    computed, so the engine reuses cached KV only up to the *first* position asked for.
    A trajectory asks for a row at every step's tag, so its history would be recomputed
    every round. But a causal model's row at position p depends only on tokens[:p+1]:

    1. rows are memoised by a digest of tokens[:p+1] (an LRU of `max_cached_rows` rows),
       so the history's tags, scored when those steps were new, are not asked for again,
       and the engine reuses the whole cached history and computes only the newest step;
    2. sequences of one call that share a prefix with rows still to score inside it (a
       history none of them has had scored) would each compute those rows; such shared
       prefixes (branch points of the call's token trie) are scored first, shortest
       first, so each row is computed once. What sequences share without a row wanted
       inside it (the question, a scored history, the first tokens of siblings' new
       steps) is the engine's to compute once: its `score` prefills each shared prefix
       it has not cached before the call (ets/engine/prefix.py), skipping cached ones.
       (Scoring every branch point here, rows or not, cost a forward per level of the
       trie, each recomputing one token per prefix for a row nobody needed: on the demo,
       119 forwards for 19 rounds instead of 40, the PRM's phase 1.26x as long.)
    Both are exact: the rows are the engine's own, computed once, and the same bit for
    bit however the forwards are cut (ets/engine/invariant.py).

    A sequence with a span to pool (`logits_and_pooled`) runs in the last pass even when
    its rows are memoised (once for identical ones), with its span's tokens computed
    there (`Engine.score_pooled`): the states come from that forward, nothing else is
    recomputed.

    `stats()` also reports the engine's memory: `pool_kv_tokens` (its pool) and
    `peak_kv_tokens` (the most it held); `owns_engine` is False when the engine is the
    policy's (share_policy_engine), whose figures then count the policy too.
    """

    def __init__(self, engine, columns: Sequence[int] | None, max_cached_rows: int = 1 << 16, min_shared_tokens: int = 8,
                 owns_engine: bool = True):
        self.engine = engine
        self.owns_engine = owns_engine
        self.columns = _columns(columns)
        self.max_cached_rows = max_cached_rows
        self.min_shared_tokens = min_shared_tokens
        self._rows: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._stats = {"computed_tokens": 0, "cache_hit_tokens": 0, "forward_calls": 0, "memo_rows": 0,
                       "embedded_steps": 0, "embed_seconds": 0.0}

    @property
    def pools_hidden_states(self) -> bool:
        """Whether the model has the final norm step embeddings are read from."""
        return final_norm(self.engine.model) is not None

    def clear_cache(self) -> None:
        """Forget every memoised row and the engine's unlocked cache (when the engine is
        this backend's own) and zero the counters: the next call starts cold, as a fresh
        backend would (benchmarks that repeat a workload on one object)."""
        self._rows.clear()
        self._stats = dict.fromkeys(self._stats, 0)
        if self.owns_engine:
            self.engine.evict()
            self.engine.reset_stats()

    def stats(self) -> dict[str, Any]:
        s = self.engine.stats()
        # its own engine's forwards and what compiling them cost (a shared engine's are the policy's)
        own = {k: s[k] for k in ("steps", "compiled_graphs", "compile_seconds", "cudagraph_skips", "compile_failed")} \
            if self.owns_engine else {}
        return {**self._stats, "pool_kv_tokens": int(s["pool_kv_tokens"]), "peak_kv_tokens": int(s["peak_kv_tokens"]),
                "owns_engine": self.owns_engine, **own}

    def logits_at(self, sequences, positions):
        return self.logits_and_pooled(sequences, positions, None)[0]

    def logits_and_pooled(self, sequences, positions, spans: list[Span] | None):
        """The rows of `logits_at`, and with `spans` each sequence's pooled final hidden
        states over its span ([sequences, hidden], float32, CPU), from the same forwards."""
        keys = [dict(zip(p, prefix_digests(s, p))) for s, p in zip(sequences, positions)]
        rows = {k: self._rows[k] for ks in keys for k in ks.values() if k in self._rows}
        self._stats["memo_rows"] += len(rows)

        def missing(i: int, below: int | None = None) -> list[int]:
            return sorted(p for p, k in keys[i].items() if k not in rows and (below is None or p < below))

        # Tokens after the last wanted position cannot change its row: leave them out.
        todo = {i: list(sequences[i][: m[-1] + 1]) for i in range(len(sequences)) if (m := missing(i))}
        # Sorted, the sequences that start with a prefix are found by two bisections
        # (`_starting_with`), not by comparing the prefix with every sequence.
        order = sorted(todo, key=todo.__getitem__)
        ordered = [todo[i] for i in order]
        for level in prefix_levels(list(todo.values()), self.min_shared_tokens):
            prefixes, wanted = [], []
            for prefix in level:
                sharing = (order[j] for j in _starting_with(ordered, prefix))
                # The rows inside a shared prefix are the same for all who share it.
                inside = sorted({p for i in sharing for p in missing(i, len(prefix))})
                if inside:
                    prefixes.append(prefix)
                    wanted.append(inside)
            if prefixes:
                self._score(prefixes, wanted, rows)
        todo = {i: s for i, s in todo.items() if missing(i)}
        pool_of, first_of = self._pooling(sequences, spans, todo, missing)
        vectors: dict[int, torch.Tensor] = {}
        if todo:
            pooled = self._score(list(todo.values()), [missing(i) for i in todo], rows,
                                 [pool_of.get(i) for i in todo] if pool_of else None)
            vectors = dict(zip(todo, pooled)) if pooled is not None else {}
        for k, row in rows.items():
            self._remember(k, row)
        embeddings = None
        if first_of:
            embeddings = torch.stack([vectors[j] for j in first_of])
            self._stats["embedded_steps"] += len(first_of)
        counts = [len(p) for p in positions]
        if not sum(counts):
            width = self.engine.model.config.vocab_size if self.columns is None else len(self.columns)
            return [torch.zeros((0, width)) for _ in positions], embeddings
        # One stack of every row asked for, split per sequence.
        flat = torch.stack([rows[ks[p]] for ks, pos in zip(keys, positions) for p in pos])
        return list(flat.split(counts)), embeddings

    @staticmethod
    def _pooling(sequences, spans, todo: dict[int, list[int]], missing) -> tuple[dict[int, Span], list[int]]:
        """The spans to pool in the last pass, by sequence: one sequence of each identical
        (tokens up to the span's end, span), added to `todo` (cut after its span or its
        last missing row, whichever is later) if its rows needed no pass; and for every
        sequence, the one whose vector it takes."""
        if not spans:
            return {}, []
        pool_of: dict[int, Span] = {}
        first: dict[tuple, int] = {}
        first_of = []
        for i, (lo, hi) in enumerate(spans):
            j = first.setdefault((tuple(sequences[i][:hi]), lo), i)
            first_of.append(j)
            if j == i:
                pool_of[i] = (lo, hi)
                rows = missing(i)
                todo[i] = list(sequences[i][: max(hi, rows[-1] + 1 if rows else 0)])
        return pool_of, first_of

    def _score(self, sequences, positions, rows: dict[bytes, torch.Tensor],
               spans: list[Span | None] | None = None) -> torch.Tensor | None:
        """Run the engine; put each row into `rows` under its prefix digest. With `spans`,
        the pooled vectors (`Engine.score_pooled`) of the sequences, in order."""
        # The engine may be shared with the policy: count only this call's work.
        before = self._engine_counts()
        try:
            if spans is None:
                out, pooled = self.engine.score(sequences, positions, hidden_states=False), None
            else:
                seconds = self.engine.embed_seconds
                out, pooled = self.engine.score_pooled(sequences, positions, spans)
                self._stats["embed_seconds"] += self.engine.embed_seconds - seconds
        except PoolTooSmall as exc:
            raise self._pool_error(exc) from None
        after = self._engine_counts()
        for key in before:
            self._stats[key] += after[key] - before[key]
        self._stats["forward_calls"] += 1
        scored = [(seq, pos, o) for seq, pos, o in zip(sequences, positions, out) if pos]
        if scored:
            # The columns read, for every row of the call at once: [N, C].
            flat = _read_columns(torch.cat([o for _, _, o in scored]), self.columns)
            digests = [d for seq, pos, _ in scored for d in prefix_digests(seq, pos)]
            rows.update(zip(digests, flat.unbind(0)))
        return pooled

    def _pool_error(self, exc: PoolTooSmall) -> ConfigError:
        """One line naming the setting that sized the pool: the PRM's own, or the policy's
        where the PRM scores on the policy's engine."""
        key = "reward.options.kv_budget_tokens" if self.owns_engine else "policy.kv_budget_tokens"
        whose = "the PRM's KV pool" if self.owns_engine else "the policy's KV pool, which the PRM shares,"
        return ConfigError(f"{key}: {whose} of {exc.capacity:,} tokens cannot hold a sequence the PRM scores "
                           f"({exc.tokens:,} tokens: a question and a trajectory as the PRM reads them); set {key} "
                           f">= {exc.tokens}, more for longer questions (the problems finished so far are kept: "
                           f"the same command resumes)")

    def _engine_counts(self) -> dict[str, int]:
        s = self.engine.stats()
        return {"computed_tokens": int(s["computed_tokens"]), "cache_hit_tokens": int(s["cache_hit_tokens"])}

    def _remember(self, key: bytes, row: torch.Tensor) -> None:
        self._rows[key] = row
        self._rows.move_to_end(key)
        while len(self._rows) > self.max_cached_rows:
            self._rows.popitem(last=False)


def _starting_with(ordered: list[list[int]], prefix: list[int]) -> range:
    """The indices of the sequences in `ordered` (sorted) that start with `prefix`: in
    lexicographic order they are one run, from `prefix` itself to `prefix + [after any token]`."""
    lo = bisect_left(ordered, prefix)
    return range(lo, bisect_left(ordered, prefix + [_AFTER_ANY_TOKEN], lo))


def prefix_digests(tokens: list[int], positions: list[int]) -> list[bytes]:
    """A digest of tokens[:p+1] for each p (one incremental pass over the tokens)."""
    h = hashlib.blake2b(digest_size=16)
    out, done = {}, 0
    for p in sorted(set(positions)):
        h.update(array("q", tokens[done:p + 1]).tobytes())
        done = p + 1
        out[p] = h.copy().digest()
    return [out[p] for p in positions]

