"""The engine's public face: generate, expand/release, score, stats, check.

It wires the parts together (pool -> allocator -> radix tree -> scheduler -> runner),
turns calls into `Seq`s and runs the step loop (`_run`): the scheduler plans, the runner
computes, sampling picks tokens, the scheduler books the results. Each call runs to
completion before returning; the only state that survives a call is the KV cache (the
radix tree) and the handles `expand` returned.
"""

from __future__ import annotations

import operator
import time
from typing import NamedTuple, Sequence

import torch

from ets.engine.allocator import SlotAllocator
from ets.engine import linears
from ets.engine.attention import check_supported
from ets.engine.decode_run import DecodeStep
from ets.engine.hidden import Pooling, unit_rows
from ets.engine.memory import ENGINE_MEMORY_MULTIPLE, MemoryPlan
from ets.engine.pool import KVPool, kv_storage_dtype
from ets.engine.prefix import shared_prefixes
from ets.engine.radix import RadixNode, RadixTree
from ets.engine.runner import ModelRunner, Outputs
from ets.engine.sampling import SamplingParams, StopChecker, sample_rows
from ets.engine.scheduler import Plan, Scheduler
from ets.engine.sequence import Seq
from ets.engine.table import SlotTable
from ets.models.load import eos_token_ids


DEFAULT_KV_TOKENS = 65536        # the pool (the whole KV budget) when none is given
DEFAULT_MAX_BATCH_TOKENS = 8192  # new tokens per forward when none is given

COUNTERS = ("cache_hit_tokens", "computed_tokens", "generated_tokens", "evicted_tokens", "preempted",
            "peak_kv_tokens", "peak_live_kv_tokens", "spilled_handles", "embedded_steps", "steps", "advanced_steps")
# Where a step's wall time goes, in `stats()` as `<phase>_seconds`: the scheduler's plan,
# the runner's metadata for the forward (prepare), the model's own code (on a GPU: mostly
# launching its kernels), sampling (on a GPU: also the wait for the device) and the
# scheduler's booking of the results.
STEP_PHASES = ("plan", "prepare", "model", "sample", "book")
# the engine's own host work among them: what no faster kernel shortens
HOST_PHASES = ("plan", "prepare", "book")


class Continuation(NamedTuple):
    handle: int              # keeps this path cached until `Engine.release([handle])`
    token_ids: list[int]     # the new tokens (an EOS or stop text that ended them included)
    finish: str              # "eos", "stop" or "length"
    # expand(embed=True): the mean of the final hidden states its tokens were sampled from
    # (the path's last token's, then each new token's but the last), L2-normalised,
    # float32 on the CPU ([hidden]); None otherwise
    embedding: torch.Tensor | None = None


class Ticket:
    """One `Engine.submit`'s continuations in flight: `done` once every sequence ended
    (then `Engine.collect` hands them out). `stages` run one after another: levels of
    prefixes its requests share, prefilled first, then its own sequences."""

    def __init__(self, requests: list["Request"], seqs: list[Seq], stages: list[list[Seq]]):
        self.requests, self.seqs, self.stages = requests, seqs, stages
        self.waiting = 0        # sequences of the running stage not ended yet
        self.failed = False
        self.collected = False  # its continuations were handed out (Engine.collect: once)

    @property
    def done(self) -> bool:
        return not self.stages and self.waiting == 0 and not self.failed


class Request(NamedTuple):
    """What `Engine.expand` takes: `n` continuations of `token_ids`. With a `seed` of its
    own, sample j depends only on (seed, j); without, on the call's seed and its place in
    the call. A plain `(token_ids, n)` pair is read as a Request without a seed."""
    token_ids: Sequence[int]
    n: int
    seed: int | None = None


def sample_seed(seed: int, k: int) -> int:
    """The stream seed of sample k under `seed` (k: the sample's index in its request
    when the request has its own seed, else in the whole call)."""
    return (seed * 1_000_003 + k) % 2**63



class PoolTooSmall(ValueError):
    """One sequence of `tokens` needs more than the pool's `capacity`: no eviction can make
    room. Its caller knows which setting sized the pool, and says so."""

    def __init__(self, tokens: int, capacity: int):
        super().__init__(f"a sequence of up to {tokens} tokens cannot fit a KV pool of {capacity} tokens; "
                         f"raise kv_budget_tokens")
        self.tokens, self.capacity = tokens, capacity

class Engine:
    def __init__(self, model, tokenizer=None, kv_budget_tokens: int | None = None,
                 max_batch_tokens: int | None = None, kv_dtype: str | torch.dtype | None = None,
                 batch_invariant: bool = True, cascade: bool = True, compile: str | bool = "auto",
                 memory: MemoryPlan | None = None, memory_name: str = "policy", scoring_only: bool = False,
                 prepack: str | bool = "auto", advance: bool = True):
        """kv_budget_tokens: the pool, in tokens (None: sized by `memory`, else DEFAULT_KV_TOKENS); max_batch_tokens:
        new tokens per forward, longer prefills are chunked (None: DEFAULT_MAX_BATCH_TOKENS);
        kv_dtype: how K/V are stored (None: the model's dtype; see pool.py);
        batch_invariant: pad small forwards so that a sequence's logits do not depend on
        its batch-mates (invariant.py; False: faster at a few sequences, not invariant);
        cascade: decode sequences with siblings read their shared prefix once (cascade.py;
        False: every sequence attends its whole context plainly, e.g. to measure what the
        cascade buys on a device, `scripts/bench_engine.py --cascade on,off`);
        compile: "on": the model's forward runs under torch.compile, attention an opaque op
        (compiled.py); "off": eagerly; "auto": compiled on CUDA, eager on the CPU
        (compiled.enabled says why); under "auto" a compiled forward that fails runs again
        eagerly, and so does every later one (a warning; `stats()["compile_failed"]`), where
        "on" raises;
        prepack: "on": on the CPU the model's linear layers run on a copy of their weights
        reordered for oneDNN (linears.py: faster, the copy's memory again); "off": as torch
        runs them; "auto": on where it can be (the CPU, float32 or bfloat16) unless compiled
        (inductor lays out a compiled forward's linears itself);
        advance: decode steps of the same sequences, one token further each time, run as a
        decode run (decode_run.py: planned, sampled and booked without a pass over the
        sequences) and move the last forward's metadata on (runner.py) rather than being
        planned afresh (False: every step is planned, e.g. to measure what that saves,
        `scripts/bench_engine.py --advance on,off`; the tokens are the same either way);
        memory: without `kv_budget_tokens`, the pool is sized by this plan (memory.py) from
        the device's free memory when it is first needed, as `memory_name`'s part
        (`scoring_only`: an engine that never decodes keeps no decode buffers)."""
        if kv_budget_tokens is None and memory is None:
            kv_budget_tokens = DEFAULT_KV_TOKENS
        max_batch_tokens = DEFAULT_MAX_BATCH_TOKENS if max_batch_tokens is None else max_batch_tokens
        if max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
        check_supported(model.config)
        self.model = model.eval()
        self.tokenizer = tokenizer
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.kv_dtype = kv_storage_dtype(kv_dtype, self.dtype)
        self.tree = RadixTree(self.device)
        self.table = SlotTable(self.device)
        self.counters = dict.fromkeys(COUNTERS, 0)
        # host seconds spent pooling step embeddings (the index lists, the adds, the one
        # transfer a call); on a GPU the adds themselves run beside the forwards
        self.embed_seconds = 0.0
        self.step_seconds = dict.fromkeys(STEP_PHASES, 0.0)
        # before the memory plan measures what is free: the packed copy is the model's memory
        self.linears = linears.PackedLinears(model) if linears.packs(prepack, compile, self.device, self.dtype) else None
        self._layout = (batch_invariant, cascade, max_batch_tokens, compile, advance)
        # In the device's plan: sized by it, when first needed (`__getattr__`), or, with
        # `kv_budget_tokens`, set aside in it and shown in its report
        self.memory, self.memory_claim = memory, None
        if memory is not None:
            self.memory_claim = memory.claim(memory_name, KVPool.bytes_per_token_for(model.config, self.kv_dtype),
                                             1 if scoring_only else ENGINE_MEMORY_MULTIPLE, tokens=kv_budget_tokens)
        if kv_budget_tokens is not None:
            self._build_pool(kv_budget_tokens)
        self.handles: dict[int, RadixNode] = {}
        # Handles whose lock was spilled under memory pressure: still valid to release,
        # their path merely recomputes (from its tokens) when next extended.
        self.spilled: set[int] = set()
        self._next_handle = 0
        self._tickets: list[Ticket] = []    # submitted expansions in flight, in submission order
        self._ticket_sums: torch.Tensor | None = None  # their pooling sequences' sums (a row each)
        self._free_sums: list[int] = []
        self.eos_ids = eos_token_ids(model, tokenizer)
        # the ids the model can read: one past its embedding's rows is an index error on the
        # CPU, and on CUDA a device-side assert that ends the process
        self.vocab_rows = model.get_input_embeddings().num_embeddings

    def _build_pool(self, tokens: int) -> None:
        """The pool of `tokens` and what is shaped by it: allocator, runner, scheduler."""
        batch_invariant, cascade, max_batch_tokens, compile, advance = self._layout
        self.pool = KVPool.for_model(self.model.config, tokens, self.kv_dtype, self.device)
        self.allocator = SlotAllocator(tokens, self.device)
        self.runner = ModelRunner(self.model, self.pool, self.table, batch_invariant, cascade, compile,
                                  clock=self.step_seconds, counters=self.counters, linears=self.linears,
                                  advance=advance)
        self.scheduler = Scheduler(self.allocator, self.tree, self.table, max_batch_tokens, self.counters,
                                   runs=advance)
        self.scheduler.relieve = self._spill_newest

    def __getattr__(self, name: str):
        # Reached only while the pool is not built yet (a memory plan sizes it): the first
        # use of any of these builds it, at its size in the plan.
        if name in ("pool", "allocator", "runner", "scheduler") and self.__dict__.get("memory_claim") is not None:
            self._build_pool(self.memory.tokens(self.memory_claim))
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def from_pretrained(cls, path_or_model, kv_budget_tokens: int | None = None, device: str = "cpu",
                        dtype: str | torch.dtype = "float32", tokenizer=None, max_batch_tokens: int | None = None,
                        seed: int = 0, kv_dtype: str | torch.dtype | None = None,
                        batch_invariant: bool = True, cascade: bool = True, compile: str | bool = "auto",
                        memory: MemoryPlan | None = None, memory_name: str = "policy",
                        scoring_only: bool = False, prepack: str | bool = "auto") -> "Engine":
        """From a path, hub name or `tiny:<arch>` (loaded with its tokenizer), or from a
        built model (then `device`/`dtype` are its own; pass `tokenizer` for stop strings)."""
        if isinstance(path_or_model, str):
            from ets.models.load import load_causal_lm

            model, loaded_tok = load_causal_lm(path_or_model, device, dtype, seed=seed)
            tokenizer = tokenizer or loaded_tok
        else:
            model = path_or_model
        return cls(model, tokenizer, kv_budget_tokens, max_batch_tokens, kv_dtype, batch_invariant, cascade,
                   compile, memory, memory_name, scoring_only, prepack)

    # ------------------------------------------------------------- generation
    def generate(self, prompts: list[list[int]], max_new_tokens: int = 64, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, stop: Sequence[str | int] = (), seed: int | None = None,
                 ignore_eos: bool = False, seeds: Sequence[int | None] | None = None) -> list[list[int]]:
        """New tokens for each prompt (prompts may share prefixes; their KV stays cached).
        `seeds`: one per prompt (None entries use `seed`), as a Request's own seed."""
        params = self._params(max_new_tokens, temperature, top_p, top_k, stop, ignore_eos)
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"generate: {len(seeds)} seeds for {len(prompts)} prompts")
        requests = [_request((p, 1, None if seeds is None else seeds[i])) for i, p in enumerate(prompts)]
        seqs = self._seqs(requests, params, seed, lock=False)
        self._prefill_shared([(tuple(p), len(p) - 1, 1) for p in prompts])
        self._run(seqs)
        return [s.new_tokens for s in seqs]

    def expand(self, requests: Sequence[Request | tuple], max_new_tokens: int = 64, temperature: float = 1.0,
               top_p: float = 1.0, top_k: int = 0, stop: Sequence[str | int] = (), seed: int | None = None,
               ignore_eos: bool = False, embed: bool = False) -> list[list[Continuation]]:
        """`n` continuations of each `(token_ids, n)` or `(token_ids, n, seed)` (a `Request`);
        each keeps its path (`token_ids` + new tokens, except the last new token, whose KV
        is not computed yet) locked in the cache until its handle is released. With
        `embed`, each also carries its `embedding` (Continuation): pooled on the device
        from the states the decode steps compute anyway, one vector a continuation.
        (`submit` + `step` until it is done + `collect`: the same, in one call; other
        submitted expansions that end meanwhile are `done`, for their owners to collect.)"""
        ticket = self.submit(requests, max_new_tokens, temperature, top_p, top_k, stop, seed, ignore_eos, embed)
        while not ticket.done:
            self.step()
        return self.collect(ticket)

    # ------------------------------------------------- expansions in flight together
    # A search decodes a step of every live path, then scores and selects before the next:
    # a round waits for its longest step. Submitted expansions share every forward instead,
    # and each is collected as soon as its own sequences end, while the others decode on
    # (ets/loop/controller.py runs each problem's rounds this way). A sequence's tokens do
    # not depend on what it shares its forwards with (its own seed; invariant.py).
    def submit(self, requests: Sequence[Request | tuple], max_new_tokens: int = 64, temperature: float = 1.0,
               top_p: float = 1.0, top_k: int = 0, stop: Sequence[str | int] = (), seed: int | None = None,
               ignore_eos: bool = False, embed: bool = False) -> "Ticket":
        """Start `expand`'s continuations without waiting for them: they run in the
        forwards `step` makes, beside every other submitted expansion; `collect` the
        ticket once it is `done`. Shared prefixes are prefilled first, as in `expand`."""
        if self.scheduler.has_work and not self._tickets:
            raise RuntimeError("submit: a synchronous engine call is running")
        params = self._params(max_new_tokens, temperature, top_p, top_k, stop, ignore_eos)
        requests = [_request(r) for r in requests]
        seqs = self._seqs(requests, params, seed, lock=True)
        if embed:
            for seq in seqs:  # from the state that samples the first new token
                seq.pool_from = seq.n_prompt - 1
        items = [(tuple(r.token_ids), len(r.token_ids) - 1, r.n) for r in requests]
        ticket = Ticket(requests, seqs, [*self._shared_stages(items), seqs])
        self._tickets.append(ticket)
        self._start_stage(ticket)
        return ticket

    def step(self) -> list["Ticket"]:
        """One forward of every submitted sequence that is running (admitting waiting ones
        first); the tickets whose sequences all ended with it, now ready to `collect`.
        An error aborts every ticket in flight (their finished paths are unlocked)."""
        try:
            plan = self._schedule()
            if plan.chunks:
                self._compute(plan, self._ticket_sums)
        except BaseException:
            self.abort()
            raise
        done = []
        for seq in self.scheduler.take_finished():
            ticket = seq.ticket
            ticket.waiting -= 1
            if ticket.waiting == 0:
                if ticket.stages:
                    self._start_stage(ticket)
                else:
                    done.append(ticket)
        for ticket in done:
            self._tickets.remove(ticket)
        return done

    def abort(self) -> None:
        """Stop every submitted expansion in flight: they fail, their sequences' slots and
        locks are given back (done tickets not yet collected stay the caller's)."""
        self.scheduler.abort()
        for ticket in self._tickets:
            for seq in ticket.seqs:
                if seq.result_node is not None:
                    self.tree.unlock(seq.result_node)
                    seq.result_node = None
            ticket.stages, ticket.waiting, ticket.failed = [], 0, True
        self._free_sums.extend(s.pool_slot for t in self._tickets for s in t.seqs if s.pool_slot >= 0)
        self._tickets = []

    def withdraw(self, ticket: "Ticket") -> None:
        """Take back a ticket submitted since the last `step` (nothing of it ran yet), e.g.
        when a later submit of the same caller fails."""
        queued = [s for s in self.scheduler.waiting if s.ticket is ticket]
        if ticket not in self._tickets or len(queued) != ticket.waiting:  # a sequence of its stage was admitted
            raise RuntimeError("withdraw: the ticket has started running")
        for seq in queued:
            self.scheduler.waiting.remove(seq)
        self._free_sums.extend(s.pool_slot for s in ticket.seqs if s.pool_slot >= 0)
        self._tickets.remove(ticket)
        ticket.stages, ticket.waiting, ticket.failed = [], 0, True

    def collect(self, ticket: "Ticket") -> list[list[Continuation]]:
        """A done ticket's continuations, per request (`expand`'s result); their handles
        now hold the paths."""
        if not ticket.done or ticket.collected:
            why = "failed" if ticket.failed else "was collected already" if ticket.collected else "is not done"
            raise RuntimeError(f"collect: the ticket {why}")
        ticket.collected = True
        seqs = ticket.seqs
        pooling = [s for s in seqs if s.pool_slot >= 0]
        embeddings = None
        if pooling:
            rows = torch.tensor([s.pool_slot for s in pooling], device=self.device)
            embeddings = self._embeddings(self._ticket_sums.index_select(0, rows), pooling)
            self._free_sums.extend(s.pool_slot for s in pooling)
        out, it = [], iter(seqs)
        rows = iter(embeddings) if embeddings is not None else None
        for req in ticket.requests:
            conts = []
            for seq in (next(it) for _ in range(req.n)):
                handle, self._next_handle = self._next_handle, self._next_handle + 1
                if seq.result_node is None:     # its lock was spilled during this call
                    self.spilled.add(handle)
                else:
                    self.handles[handle] = seq.result_node
                conts.append(Continuation(handle, seq.new_tokens, seq.finish, next(rows) if rows else None))
            out.append(conts)
        return out

    def release(self, handles: Sequence[int]) -> None:
        """Unlock these paths: their KV becomes evictable (LRU), not freed at once."""
        for h in handles:
            if h in self.spilled:
                self.spilled.discard(h)
                continue
            node = self.handles.pop(h, None)
            if node is None:
                raise KeyError(f"unknown or already released handle {h}")
            self.tree.unlock(node)

    def _start_stage(self, ticket: "Ticket") -> None:
        """Queue a ticket's next stage (a level of shared prefixes, or its own sequences),
        its pooling sequences given rows of the tickets' sums."""
        stage = ticket.stages.pop(0)
        for seq in stage:
            seq.ticket = ticket
        pooling = [s for s in stage if s.pool_from >= 0]
        if pooling:
            self._pool_rows(pooling)
        ticket.waiting = len(stage)
        self.scheduler.add(stage)

    def _pool_rows(self, seqs: list[Seq]) -> None:
        """A zeroed row of the tickets' sums for each pooling sequence (grown as needed;
        rows are given back by `collect`)."""
        hidden = self.model.config.hidden_size
        if len(self._free_sums) < len(seqs):
            old = self._ticket_sums
            size = 0 if old is None else old.shape[0]
            grown = max(2 * size, size + len(seqs) - len(self._free_sums), 64)
            self._ticket_sums = torch.zeros((grown, hidden), dtype=torch.float32, device=self.device)
            if old is not None:
                self._ticket_sums[:size] = old
            self._free_sums.extend(range(size, grown))
        for seq in seqs:
            seq.pool_slot = self._free_sums.pop()
            self._ticket_sums[seq.pool_slot] = 0

    def _shared_stages(self, items: list[tuple[tuple[int, ...], int, int]]) -> list[list[Seq]]:
        """The uncached prefixes that several of a call's sequences share, as stages to
        prefill one after another (`_prefill_shared`'s order: what they share, first)."""
        prefixes = [p for p in shared_prefixes(items) if self.tree.match(list(p)).slots.numel() < len(p)]
        if not prefixes:
            return []
        return [*self._shared_stages([(p, len(p), 1) for p in prefixes]), [Seq(list(p), len(p)) for p in prefixes]]

    def _schedule(self) -> Plan:
        """The scheduler's next step, its time on the `plan` clock."""
        t0 = time.perf_counter()
        plan = self.scheduler.schedule()
        self.step_seconds["plan"] += time.perf_counter() - t0
        return plan

    def _compute(self, plan: Plan, sums: torch.Tensor | None, hidden: bool = False) -> None:
        """One planned step: the runner computes it (adding pooled states to `sums`),
        sampling picks the next tokens, the scheduler books the results."""
        pool = None
        if sums is not None:
            t0 = time.perf_counter()
            pool = self._pooling(plan, sums)
            self.embed_seconds += time.perf_counter() - t0
        if pool is None:
            outputs = self.runner.forward(plan.chunks, hidden=hidden)
        else:
            outputs = self.runner.forward(plan.chunks, hidden=hidden, pool=pool)
        clock = self.step_seconds
        t0 = time.perf_counter()
        tokens = self._sample(plan, outputs)
        t1 = time.perf_counter()
        self.scheduler.postprocess(plan, outputs, tokens)
        clock["sample"] += t1 - t0
        clock["book"] += time.perf_counter() - t1
        self.counters["steps"] += 1

    def _run(self, seqs: list[Seq], hidden: bool = False) -> torch.Tensor | None:
        """Run `seqs` to completion (results are left on each `Seq`): the scheduler plans
        each step, the runner computes it, sampling picks the next tokens, the scheduler
        books the results. Returns, when some of `seqs` pool (`Seq.pool_from`), their
        embeddings in their order ([pooling seqs, hidden], float32, CPU: one transfer), else None.
        Not while submitted expansions are in flight (`submit`)."""
        if self._tickets:
            raise RuntimeError("a synchronous engine call (generate, score) while submitted expansions are in "
                               "flight: collect them first")
        scheduler = self.scheduler
        pooling = [s for s in seqs if s.pool_from >= 0]
        sums = None
        if pooling:
            for slot, seq in enumerate(pooling):
                seq.pool_slot = slot
            sums = torch.zeros((len(pooling), self.model.config.hidden_size), dtype=torch.float32, device=self.device)
        scheduler.add(seqs)
        try:
            while scheduler.has_work:
                plan = self._schedule()
                if plan.chunks:
                    self._compute(plan, sums, hidden)
        except BaseException:
            scheduler.abort()
            raise
        finally:
            scheduler.take_finished()
        return None if sums is None else self._embeddings(sums, pooling)

    def _embeddings(self, sums: torch.Tensor, pooling: list[Seq]) -> torch.Tensor:
        """The pooling sequences' embeddings from their rows of sums ([len(pooling),
        hidden], in their order): means, L2-normalised, on the CPU (one transfer); the
        host time counted in `embed_seconds`."""
        t0 = time.perf_counter()
        counts = torch.tensor([s.pooled_count for s in pooling])
        out = unit_rows(sums, counts).cpu()
        self.embed_seconds += time.perf_counter() - t0 + self.runner.take_pool_seconds()
        self.counters["embedded_steps"] += len(pooling)
        return out

    @staticmethod
    def _pooling(plan: Plan, sums: torch.Tensor) -> Pooling | None:
        """What this step's forward adds to the pooling sequences' sums: each one's
        positions not pooled yet (Seq.pool_range), booked as pooled here."""
        if isinstance(plan.chunks, DecodeStep):
            return plan.chunks.run.pooling(sums)
        items = []
        for i, (seq, chunk) in enumerate(zip(plan.owners, plan.chunks)):
            if seq.pool_slot < 0:
                continue
            lo, hi = seq.pool_range(chunk.start, len(chunk.token_ids))
            if hi > lo:
                items.append((i, lo - chunk.start, hi - chunk.start, seq.pool_slot))
                seq.pooled_upto = hi
                seq.pooled_count += hi - lo
        return Pooling(sums, items) if items else None

    @staticmethod
    def _sample(plan: Plan, outputs: Outputs) -> list[int]:
        """The next token of each chunk in `plan.to_sample`, from its last output (logits)."""
        if isinstance(plan.chunks, DecodeStep):  # a decode step: what its run keeps, no list a row
            return plan.chunks.sample(outputs.last(plan.to_sample))
        seqs = [plan.owners[i] for i in plan.to_sample]
        # each draw is read at the new token's position in its sequence
        return sample_rows(outputs.last(plan.to_sample), [s.params for s in seqs],
                           [s.seed for s in seqs], [len(s.tokens) for s in seqs])

    def _spill_newest(self) -> bool:
        """Out of memory with every slot locked: unlock the newest live handle, so its path
        becomes evictable. The handle stays valid; extending that path later recomputes it
        (the caller passes tokens, not handles), so a search slows down instead of failing.
        With no handle left, this expand() call's finished results are spilled, those of its
        last requests first (a call whose own results outgrow the pool, e.g. many wide
        searches at once).

        Newest, because a search extends its paths in the order it was given them: the
        newest is needed last, so it is the one to lose (Belady's rule). Spilling the oldest
        lost the path the next call extends first, whose recomputation then pushed out the
        one after it, round after round: REBASE at W=64 in a 10k-token pool computed 1.95
        tokens per token generated that way, 1.29 this way (docs/results.md, "Throughput
        under a KV budget")."""
        if not self.handles:
            for seq in (s for t in reversed(self._tickets) for s in reversed(t.seqs)):
                if seq.result_node is not None:
                    self.tree.unlock(seq.result_node)
                    seq.result_node = None
                    self.counters["spilled_handles"] += 1
                    return True
            return False
        newest = max(self.handles)
        self.tree.unlock(self.handles.pop(newest))
        self.spilled.add(newest)
        self.counters["spilled_handles"] += 1
        return True

    def _prefill_shared(self, items: list[tuple[tuple[int, ...], int, int]]) -> None:
        """Compute, once each, the uncached prefixes that several of a call's sequences
        share (see ets/engine/prefix.py); items are (tokens, cacheable length, count)."""
        for stage in self._shared_stages(items):
            self._run(stage)

    def _params(self, max_new_tokens, temperature, top_p, top_k, stop, ignore_eos) -> SamplingParams:
        stop = [stop] if isinstance(stop, (str, int)) else list(stop or ())
        return SamplingParams(
            max_new_tokens, float(temperature), float(top_p), int(top_k),
            frozenset(s for s in stop if isinstance(s, int)), tuple(s for s in stop if isinstance(s, str)),
            ignore_eos,
        )

    def _seqs(self, requests: list[Request], params: SamplingParams, seed: int | None, lock: bool) -> list[Seq]:
        if seed is None and any(r.seed is None for r in requests):  # reproducible under torch.manual_seed
            seed = int(torch.randint(0, 2**31 - 1, ()).item())
        stopper = StopChecker(params, self.eos_ids, self.tokenizer)
        seqs = []
        for token_ids, n, own_seed in requests:
            if not token_ids:
                raise ValueError("cannot continue an empty token list: start prompts with at least one token (e.g. BOS)")
            self._check_length(len(token_ids) + params.max_new_tokens)
            self._check_ids(token_ids)
            for j in range(n):
                if params.greedy:
                    stream = None
                else:  # sample j of this request: by its own seed, else by its place in the call
                    stream = sample_seed(seed, len(seqs)) if own_seed is None else sample_seed(own_seed, j)
                seqs.append(Seq(list(token_ids), len(token_ids), params, stopper, stream, lock_result=lock))
        return seqs

    def _check_length(self, n: int) -> None:
        if n > self.pool.num_slots:
            raise PoolTooSmall(n, self.pool.num_slots)

    def _check_ids(self, token_ids: Sequence[int]) -> None:
        if isinstance(token_ids, str) or not hasattr(token_ids[0], "__index__"):
            raise ValueError(f"the engine reads token ids, got {type(token_ids[0]).__name__}s "
                             f"({str(token_ids)[:40]!r}): encode text first, tokenizer(text).input_ids")
        low, high = min(token_ids), max(token_ids)
        if low < 0 or high >= self.vocab_rows:
            raise ValueError(f"token id {low if low < 0 else high} is outside the model's vocabulary (ids 0.."
                             f"{self.vocab_rows - 1}): the tokens come from another model's tokenizer")

    # ---------------------------------------------------------------- scoring
    def score(self, sequences: list[list[int]], positions: list[list[int]],
              hidden_states: bool = False) -> list[torch.Tensor]:
        """For each sequence, the logits [len(positions), V] (or final hidden states
        [len(positions), hidden]) at the given positions (0-based; position p is the output
        after reading token p). Cached prefixes are reused; the sequences stay cached."""
        return self._score(sequences, positions, hidden_states, None)[0]

    def score_pooled(self, sequences: list[list[int]], positions: list[list[int]],
                     spans: list[tuple[int, int] | None]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """`score`'s logits, and for each sequence with a span [lo, hi) the mean of the
        final hidden states of positions lo..hi-1, L2-normalised, from the same forwards
        ([sequences, hidden], float32, CPU; zero rows where the span is None). A sequence
        with a span may ask for no positions; its tokens from `lo` on are computed even if
        cached, for their states."""
        if len(spans) != len(sequences):
            raise ValueError("score_pooled: one span (or None) per sequence")
        return self._score(sequences, positions, False, spans)

    def _score(self, sequences, positions, hidden_states: bool, spans) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        if len(sequences) != len(positions):
            raise ValueError("score: one list of positions per sequence")
        seqs = []
        for i, (tokens, pos) in enumerate(zip(sequences, positions)):
            span = spans[i] if spans is not None else None
            if (not pos and span is None) or (pos and (min(pos) < 0 or max(pos) >= len(tokens))):
                raise ValueError(f"score: positions {pos} must be non-empty and within 0..{len(tokens) - 1}")
            if span is not None and not 0 <= span[0] < span[1] <= len(tokens):
                raise ValueError(f"score: span {span} must lie within 0..{len(tokens)} and hold a position")
            self._check_length(len(tokens))
            self._check_ids(tokens)
            seq = Seq(list(tokens), len(tokens), positions=list(pos))
            if span is not None:
                seq.pool_from, seq.pool_to = span
            seqs.append(seq)
        self._prefill_shared([(tuple(s.tokens), s.match_limit(), 1) for s in seqs])
        pooled = self._run(seqs, hidden=hidden_states)
        out = []
        for seq in seqs:
            if not seq.positions:
                out.append(torch.empty(0))
                continue
            stacked = torch.cat(seq.outputs)  # rows in order of sorted(set(positions))
            order = {p: i for i, p in enumerate(sorted(set(seq.positions)))}
            out.append(stacked[[order[p] for p in seq.positions]])
        if spans is None:
            return out, None
        every = torch.zeros((len(seqs), self.model.config.hidden_size))
        which = [i for i, span in enumerate(spans) if span is not None]
        if which:
            every[which] = pooled
        return out, every

    # ------------------------------------------------------------- accounting
    def evict(self) -> int:
        """Drop every unlocked cache entry now; returns how many tokens were freed."""
        freed = self.tree.evict(self.tree.evictable_tokens)
        self.allocator.free(freed)
        self.counters["evicted_tokens"] += freed.numel()
        return freed.numel()

    def reset_stats(self) -> None:
        """Zero the counters; peaks restart from what is resident now."""
        for key in COUNTERS:
            self.counters[key] = 0
        self.embed_seconds = 0.0
        self.step_seconds.update(dict.fromkeys(STEP_PHASES, 0.0))
        self.counters["peak_kv_tokens"] = self.allocator.n_used
        self.counters["peak_live_kv_tokens"] = self.tree.locked_tokens

    def stats(self) -> dict[str, int | float]:
        """resident_* = everything the pool holds (locked paths, running sequences and
        unlocked LRU cache); locked_kv_tokens = the paths held by live handles;
        peak_live_kv_tokens = the most that had to be resident (locked + running);
        embedded_steps / embed_seconds = step embeddings pooled (expand(embed=True),
        score_pooled) and the host time their pooling took; steps = forwards (of which
        advanced_steps moved the last forward's metadata one token on: the same decode
        sequences, nothing planned per sequence: runner.ModelRunner._advance), and
        <phase>_seconds their wall time by phase (STEP_PHASES); compiled_graphs /
        compile_seconds = the graphs a compiled forward compiled since the engine was built
        and the seconds of the forwards that compiled them (0 when eager); cudagraph_skips =
        the times a compiled forward on CUDA ran without the CUDA graphs it asked for
        (compiled.CompiledModel); compile_failed = 1 when a compiled forward failed and the
        engine runs eagerly (compile="auto")."""
        resident = self.allocator.n_used
        compiled_model = self.runner.compiled
        return {
            "resident_kv_tokens": resident,
            "resident_kv_bytes": resident * self.pool.bytes_per_token,
            "locked_kv_tokens": self.tree.locked_tokens,
            "evictable_kv_tokens": self.tree.evictable_tokens,
            "pool_kv_tokens": self.pool.num_slots,
            "pool_kv_bytes": self.pool.num_bytes,
            "live_handles": len(self.handles),
            **self.counters,
            "embed_seconds": self.embed_seconds,
            **{f"{phase}_seconds": seconds for phase, seconds in self.step_seconds.items()},
            "compiled_graphs": compiled_model.graphs if compiled_model else 0,
            "compile_seconds": compiled_model.compile_seconds if compiled_model else 0.0,
            "cudagraph_skips": compiled_model.cudagraph_skips if compiled_model else 0,
            "compile_failed": int(self.runner.compile_failed),
        }

    def check(self) -> None:
        """Raise AssertionError if an invariant is broken: every pool slot is free, cached or
        in use exactly once; ref counts are what the live locks imply (never negative);
        every locked path is reachable from the root."""
        n = self.pool.num_slots
        parts = [self.allocator.free_slots(), self.tree.all_slots(), *self.scheduler.in_use_slots()]
        every = torch.cat(parts)
        assert every.numel() == n, f"{every.numel()} slots accounted for, pool has {n}"
        counts = torch.bincount(every, minlength=n)
        assert counts.numel() == n and bool((counts == 1).all()), "a slot is held twice or lost"
        self.tree.check(locks=[*self.handles.values(), *self.scheduler.lock_targets()])


def _request(r) -> Request:
    """A Request from a `Request`, `(token_ids, n)` or `(token_ids, n, seed)`."""
    if isinstance(r, Request):
        return r
    if not isinstance(r, (tuple, list)) or len(r) not in (2, 3):
        raise ValueError(f"a request is (token_ids, n) or (token_ids, n, seed), got {r!r}")
    token_ids, n, *seed = r
    own = seed[0] if seed else None
    if own is not None:
        try:
            own = operator.index(own)
        except TypeError:
            raise TypeError(f"a request's seed must be an int or None, got {own!r}") from None
    return Request(token_ids, n, own)
