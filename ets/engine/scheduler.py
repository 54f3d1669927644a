"""The scheduler: admits sequences, plans each step's chunks, and makes every memory decision.

It only plans and books; the engine runs the model and samples (ets/engine/engine.py):

    while scheduler.has_work:
        plan = scheduler.schedule()                      # 1-2 below -> Plan(chunks, owners, to_sample)
        outputs = runner.forward(plan.chunks)            # the model
        tokens = sample_rows(...)                        # one per plan.to_sample (sampling.py)
        scheduler.postprocess(plan, outputs, tokens)     # 3 below

1. admit waiting sequences: match their longest cached prefix and lock it; admission stops
   while the pool (free + evictable) could not hold the newcomer's uncached tokens plus
   one token per running sequence;
2. schedule chunks, oldest sequence first, up to `max_batch_tokens` new tokens (a step of
   the same decoding sequences as the last, none admitted or ended since, is the next
   step of their decode run, planned without a pass over them: decode_run.py): a decode
   sequence gets 1 token, a prefilling one the rest of its uncomputed tokens (or what the
   budget leaves). Slots come from the allocator (and go into the sequence's slot-table
   row, which the runner reads); when it runs short the radix tree evicts unlocked LRU
   leaves; when nothing is evictable the youngest running sequence is preempted: its
   computed KV is handed to the tree (unlocked, so it may survive and be reused on
   re-admission) and it goes back to the front of the queue; when nothing can run and
   locks fill the pool, `relieve` (the engine spills handles), else EngineMemoryError;
3. postprocess: advance each sequence's computed length, keep scoring outputs, append the
   sampled tokens and check stops; finish sequences that are done: insert their path into
   the tree, free duplicate slots, lock the result if asked (expand), unlock the prefix.
A sequence never reads a slot it does not hold a lock on or own, so preemption and
eviction cannot corrupt another sequence's cache.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Callable, MutableMapping, NamedTuple, Sequence

import torch

from ets.engine.allocator import SlotAllocator
from ets.engine.decode_run import DecodeRun, DecodeStep
from ets.engine.radix import RadixNode, RadixTree
from ets.engine.sequence import Chunk, Seq
from ets.engine.table import SlotTable


class EngineMemoryError(RuntimeError):
    """The pool cannot make progress: locked paths (unreleased handles) fill it."""


class Plan(NamedTuple):
    """One step, as the scheduler decided it: chunk i computes tokens of `owners[i]` (a
    sequence appears at most once); `to_sample` are the indices of the chunks that end
    their sequence's tokens, so their last output is sampled. Empty: nothing to run this
    step (admission finished everything, or locks were spilled): ask again."""
    chunks: Sequence[Chunk]   # a list, or a decode run's step (decode_run.DecodeStep)
    owners: list[Seq]
    to_sample: Sequence[int]


class Scheduler:
    def __init__(self, allocator: SlotAllocator, tree: RadixTree, table: SlotTable,
                 max_batch_tokens: int, counters: MutableMapping[str, int], runs: bool = True):
        self.allocator, self.tree, self.table = allocator, tree, table
        self.max_batch_tokens = max_batch_tokens
        self.counters = counters
        # The decode steps since the running sequences last changed (decode_run.py; None:
        # the next step is planned sequence by sequence). `runs` False: never kept.
        self.runs = runs
        self._run: DecodeRun | None = None
        # Eviction frees at least this much: each evict() heaps the tree's unlocked leaves
        # (its LRU index, not the whole tree), and once the pool is full every decoding
        # sequence asks for one slot a step: evicting one slot at a time would heap per token.
        self.evict_chunk = max(1, allocator.num_slots // 64)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        # Called when the pool is full of locked paths and nothing can run: frees some locks
        # (the engine spills its newest handles) and says whether it did.
        self.relieve: Callable[[], bool] | None = None
        # The plan whose slots are allocated but not yet booked (between schedule and
        # postprocess): what `abort` must give back beyond each sequence's computed KV.
        self._unbooked: Plan | None = None
        self._uids = itertools.count()
        self._finished: list[Seq] = []  # ended since take_finished (Engine.step reads them)

    def add(self, seqs: Sequence[Seq]) -> None:
        """Queue `seqs` (they run after those already waiting)."""
        self.waiting.extend(seqs)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ------------------------------------------------------------------ plan
    def schedule(self) -> Plan:
        """Admit what fits and plan this step's chunks (allocating, evicting, preempting)."""
        self._admit()
        if not self.running and not self.waiting:  # admission finished everything
            return Plan([], [], [])
        plan = self._schedule()
        if plan.chunks:
            return plan
        if self.relieve is not None and self.relieve():
            return plan  # locks were spilled to make room: schedule again next step
        raise EngineMemoryError(
            f"the KV pool ({self.allocator.num_slots} tokens) is full of locked paths "
            f"({self.tree.locked_tokens} tokens): release handles or raise kv_budget_tokens"
        )

    # ----------------------------------------------------------- postprocess
    def postprocess(self, plan: Plan, outputs: Sequence[torch.Tensor], tokens: Sequence[int]) -> None:
        """Book a step's results: `outputs[i]` are chunk i's outputs at its `keep` offsets,
        `tokens[k]` the token sampled for chunk `plan.to_sample[k]`."""
        assert len(outputs) == len(plan.chunks) and len(tokens) == len(plan.to_sample)
        self._unbooked = None  # booked: an abort from here on must not free the plan's slots again
        if isinstance(plan.chunks, DecodeStep):  # one generated token each; stop checks where they may end
            self.counters["computed_tokens"] += len(tokens)
            self.counters["generated_tokens"] += len(tokens)
            for seq, tok in zip(plan.owners, tokens):
                seq.kv_len += 1
                seq.tokens.append(tok)
            ending = plan.chunks.ending
            for i in range(len(tokens)) if ending is None else ending:
                seq = plan.owners[i]
                seq.finish = seq.stopper.finish(seq.tokens, seq.n_prompt)
                if seq.finish is not None:
                    self._finish(seq)  # (which ends the run)
            return
        computed = 0
        for seq, chunk in zip(plan.owners, plan.chunks):
            n = len(chunk.token_ids)
            seq.kv_len += n
            computed += n
        self.counters["computed_tokens"] += computed
        self.counters["generated_tokens"] += len(tokens)
        for i, seq in enumerate(plan.owners):
            if seq.params is None:  # (not the `scoring` property: this runs per sequence per step)
                seq.outputs.append(outputs[i])
                if seq.kv_len == len(seq.tokens):
                    self._finish(seq)
        for i, tok in zip(plan.to_sample, tokens):
            seq = plan.owners[i]
            seq.tokens.append(tok)
            seq.finish = seq.stopper.finish(seq.tokens, seq.n_prompt)
            if seq.finish is not None:
                self._finish(seq)

    # ------------------------------------------------------------- admission
    def _admit(self) -> None:
        while self.waiting:
            seq = self.waiting[0]
            node, slots = self.tree.match(seq.tokens[: seq.match_limit()])
            self.tree.lock(node)
            need = len(seq.tokens) - slots.numel() + len(self.running)
            if self.running and need > self.allocator.n_free + self.tree.evictable_tokens:
                self.tree.unlock(node)
                return
            self.waiting.popleft()
            growth = 0 if seq.scoring else seq.params.max_new_tokens
            seq.row = self.table.acquire(len(seq.tokens) + growth)
            seq.uid = next(self._uids)
            self.table.write(seq.row, 0, slots)
            seq.prefix_node, seq.prefix_len, seq.kv_len = node, slots.numel(), slots.numel()
            # Its decode steps split their attention at the end of its request's path,
            # whatever was cached when it was admitted (which depends on what else ran): its
            # numbers are then its own (ets/engine/invariant.py). Its cluster: the sequences
            # whose KV before that point is the same slots (one locked node); a path computed
            # in part by itself is alone.
            split = seq.n_prompt - 1
            seq.cluster = (id(node), split) if split <= seq.prefix_len else (-1 - seq.uid, split)
            seq.outputs = []
            self.counters["cache_hit_tokens"] += slots.numel()
            self.running.append(seq)
            self._run = None
            if seq.kv_len == len(seq.tokens):  # prefill-only and fully cached: done
                self._finish(seq)

    # ------------------------------------------------------------ scheduling
    def _schedule(self) -> Plan:
        run = self._run
        if run is not None and len(run.seqs) <= min(self.max_batch_tokens, self.allocator.n_free):
            # The last step's sequences, each one token on: one allocation and one table
            # write, no pass over them (and no eviction or preemption needed)
            step = run.next_step()
            self.table.write_many(run.rows, run.starts, self._take(len(run.seqs)))
            plan = self._unbooked = Plan(step, run.seqs, range(len(run.seqs)))
            return plan
        self._run = None
        plan = self._unbooked = Plan([], [], [])
        wants, budget = [], self.max_batch_tokens
        decode = True  # all generating, each with its last token to compute (not a prefill cut to one token)
        for seq in self.running:  # oldest first, until the token budget is spent
            if budget <= 0:
                break
            left = len(seq.tokens) - seq.kv_len
            n = min(left, budget)
            wants.append((seq, n))
            budget -= n
            decode = decode and left == 1 and seq.params is not None
        sizes = [n for _, n in wants]
        total = sum(sizes)
        if total <= self.allocator.n_free:
            # Enough free slots for everyone: one allocation and one table write for the
            # whole step (per sequence, they were most of the scheduler's time at a few
            # hundred decoding sequences). The slots are those the per-sequence path would
            # hand out, in the same order.
            slots = self._take(total)
            dev = slots.device
            rows = torch.tensor([seq.row for seq, _ in wants], dtype=torch.long, device=dev)
            starts = torch.tensor([seq.kv_len for seq, _ in wants], dtype=torch.long, device=dev)
            if total == len(wants):  # one token each (a decode step): at its sequence's start
                self.table.write_many(rows, starts, slots)
                if decode:
                    seqs = [seq for seq, _ in wants]
                    run = DecodeRun(seqs, rows, starts)
                    if self.runs and len(seqs) == len(self.running):  # all of them: the next steps may follow
                        self._run = run
                    plan = self._unbooked = Plan(DecodeStep(run), seqs, range(len(seqs)))
                    return plan
            else:
                ns = torch.tensor(sizes, dtype=torch.long, device=dev)
                # position of each new token: its sequence's start + its offset in the chunk
                skip = torch.repeat_interleave(torch.cumsum(ns, 0) - ns - starts, ns, output_size=total)
                self.table.write_many(torch.repeat_interleave(rows, ns, output_size=total),
                                      torch.arange(total, device=dev) - skip, slots)
            for seq, n in wants:
                self._add_chunk(plan, seq, n)
            return plan
        # Short of slots: sequence by sequence, evicting and then preempting the youngest
        # (which leave `running`, so the loop reads it afresh).
        budget, i = self.max_batch_tokens, 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            own = self._alloc(min(len(seq.tokens) - seq.kv_len, budget), seq)
            if own is None:  # `seq` itself was preempted; everyone after it too
                break
            self.table.write(seq.row, seq.kv_len, own)  # positions kv_len..kv_len+n of its row
            self._add_chunk(plan, seq, own.numel())
            budget -= own.numel()
            i += 1
        return plan

    @staticmethod
    def _add_chunk(plan: Plan, seq: Seq, n: int) -> None:
        """Plan `seq`'s next `n` tokens (their slots already in its row). Called per
        sequence per step: a decode step of a few hundred sequences spends its Python here."""
        start = seq.kv_len
        if seq.params is None:  # scoring: the outputs at its positions, nothing sampled
            keep, sample = seq.scored_offsets(start, n), False
        else:  # generating: its last token's output, to sample what follows
            sample = start + n == len(seq.tokens)
            keep = [n - 1] if sample else []
        if sample:
            plan.to_sample.append(len(plan.chunks))
        plan.chunks.append(Chunk(seq.row, start, seq.tokens[start:start + n], keep, seq.cluster, seq.n_prompt - 1,
                                 seq.uid, sample and n == 1))
        plan.owners.append(seq)

    def _take(self, n: int) -> torch.Tensor:
        """n free slots (there are), with the peak counters updated."""
        slots = self.allocator.alloc(n)
        used = self.allocator.n_used
        self.counters["peak_kv_tokens"] = max(self.counters["peak_kv_tokens"], used)
        # what had to be resident: locked paths + running sequences (not the LRU cache)
        live = used - self.tree.evictable_tokens
        self.counters["peak_live_kv_tokens"] = max(self.counters["peak_live_kv_tokens"], live)
        return slots

    def _alloc(self, n: int, seq: Seq) -> torch.Tensor | None:
        """n slots for `seq`, evicting and then preempting younger sequences as needed."""
        while True:
            short = n - self.allocator.n_free
            if short > 0:
                freed = self.tree.evict(max(short, self.evict_chunk))
                self.allocator.free(freed)
                self.counters["evicted_tokens"] += freed.numel()
            if self.allocator.n_free >= n:
                return self._take(n)
            if self.running[-1] is not seq:  # younger sequences give way to older ones
                self._preempt(self.running[-1])
                continue
            if len(self.running) > 1:  # `seq` is the youngest: it waits
                self._preempt(seq)
                return None
            # Alone and still short: a partial chunk if anything is free; else only
            # releasing handles can help (the caller raises).
            return self.allocator.alloc(self.allocator.n_free) if self.allocator.n_free else None

    def _preempt(self, seq: Seq) -> None:
        self._hand_to_tree(seq)
        seq.kv_len = seq.prefix_len = 0
        seq.outputs = []
        self.waiting.appendleft(seq)
        self.counters["preempted"] += 1

    # ---------------------------------------------------------------- finish
    def _finish(self, seq: Seq) -> None:
        node = self._hand_to_tree(seq)
        if seq.lock_result:
            self.tree.lock(node)
            seq.result_node = node
        self._finished.append(seq)

    def take_finished(self) -> list[Seq]:
        """The sequences that ended since the last call, in the order they ended."""
        out, self._finished = self._finished, []
        return out

    def _hand_to_tree(self, seq: Seq) -> RadixNode:
        """Cache `seq`'s computed tokens in the tree, drop its lock and row; returns the
        node ending at its computed length (unlocked)."""
        slots = self.table.rows[seq.row, : seq.kv_len].clone()  # the row is reused later
        node, existing = self.tree.insert(seq.tokens[: seq.kv_len], slots)  # InsertResult
        if existing > seq.prefix_len:  # computed here, but cached meanwhile by a sibling
            self.allocator.free(slots[seq.prefix_len:existing])
        self.tree.lock(node)  # keep the new path safe while the prefix lock moves
        self.tree.unlock(seq.prefix_node)
        self.tree.unlock(node)
        self.table.release(seq.row)
        self.running.remove(seq)
        self._run = None
        seq.row, seq.prefix_node = -1, None
        return node

    def abort(self) -> None:
        """After an error: give back every slot, lock and row held by unfinished sequences
        (the slots of a step planned but not booked too)."""
        if self._unbooked is not None:
            for chunk in self._unbooked.chunks:
                self.allocator.free(self.table.rows[chunk.row, chunk.start:chunk.start + len(chunk.token_ids)].clone())
            self._unbooked = None
        for seq in list(self.running):
            self.allocator.free(self.table.rows[seq.row, seq.prefix_len: seq.kv_len].clone())
            self.tree.unlock(seq.prefix_node)
            self.table.release(seq.row)
            seq.row, seq.prefix_node = -1, None
        self.running.clear()
        self._run = None
        self.waiting.clear()
        self._finished.clear()

    def in_use_slots(self) -> list[torch.Tensor]:
        """Slots owned by running sequences (not in the tree, not free)."""
        return [self.table.rows[s.row, s.prefix_len: s.kv_len] for s in self.running]

    def lock_targets(self) -> list[RadixNode]:
        """The node each running sequence holds a lock on (its cached prefix)."""
        return [s.prefix_node for s in self.running]
