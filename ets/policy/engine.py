"""`EnginePolicy`: the search controller's `ets.policy.base.Policy` on the engine.

Prompt formatting and step cutting are shared with the `transformers` baseline
(ets/policy/steps.py), so both backends produce the same `Step` for the same tokens.

Each step carries the engine handle that locks its path (prompt + steps, cached in the
radix tree); the controller releases every handle exactly once (ets/policy/base.py), so the
locked KV is exactly the paths of the live search nodes.

Memory: the engine's pool is the policy's KV capacity (`memory().capacity_tokens`), and
its locks are the live KV. `policy.kv_budget_tokens` sizes the pool; None (the default)
is the engine's own default, `ets.engine.DEFAULT_KV_TOKENS`.

Sampling and seeds: each request's own seed goes to the engine (`Engine.expand` samples
request r's sample j from (seed, j) alone), and its `SamplingSettings` decide temperature,
top-p, top-k and the step length. The engine takes one set of sampling parameters per
call, so requests are grouped by (settings, new-token cap) into one engine call each;
since every sample depends only on its own seed, the grouping changes no sample. A request
without a seed gets one drawn from this policy's own stream (seeded by the build-time
`SearchConfig.seed`).

Context: `context_tokens` is `policy.max_context`, else the model's
`max_position_embeddings`. A request's new tokens are capped at what is left of the
context (ets/policy/steps.py), so no position past it is ever decoded.

Step embeddings (`ExpandRequest.embed`, ETS's `search.embedder: policy`): the engine pools
each continuation's final hidden states on the device while it decodes it (no extra
forward: ets/engine/hidden.py) and hands out one vector a step; `stats()` counts them
(`embedded_steps`) and the host time their pooling took (`embed_seconds`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Hashable

from ets.config import ConfigError, PolicyConfig, SearchConfig
from ets.engine.engine import Engine
from ets.engine.hidden import final_norm
from ets.engine.memory import plan_for
from ets.engine.pool import PoolTooLarge
from ets.policy.base import ExpandRequest, KVMemory, SamplingSettings, Step
from ets.policy.steps import PromptsAndSteps, at_context, model_context, new_token_cap


@dataclass(eq=False)
class ExpandTicket:
    """One `EnginePolicy.submit`: its requests, one engine ticket per sampling group
    (`parts`), and once `done` the steps per request, as `expand` returns them."""
    requests: list[ExpandRequest]
    steps: list[list[Step]]
    parts: list[tuple[Any, SamplingSettings, list[int]]] = field(default_factory=list)
    finished: int = 0
    done: bool = False
    failed: bool = False


class EnginePolicy(PromptsAndSteps):
    def __init__(self, engine: Engine, policy: PolicyConfig, search: SearchConfig):
        if engine.tokenizer is None:
            raise ValueError("EnginePolicy needs an engine built with a tokenizer (for the step delimiter)")
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.config = policy
        self.search = search
        self.sampling = SamplingSettings.from_search(search)  # for requests that carry none
        self.context_tokens = model_context(engine.model.config, policy.max_context)
        self._rng = random.Random(search.seed)  # seeds for requests that carry none
        self._held: set[int] = set()            # handles given out and not yet released
        self._stats = {"generated_tokens": 0, "expand_calls": 0}
        self._owner: dict[Any, ExpandTicket] = {}  # engine tickets in flight -> the expansion they serve
        self._live_sum = 0
        # step embeddings need the final norm's output (every decoder the engine runs has one)
        self.embeds_steps = final_norm(engine.model) is not None

    @classmethod
    def from_config(cls, policy: PolicyConfig, search: SearchConfig) -> "EnginePolicy":
        # The device's memory plan (ets/engine/memory.py): without kv_budget_tokens it sizes
        # this pool once the PRM has loaded too (None on the CPU by default: the engine's
        # own fixed pool, ets.engine.DEFAULT_KV_TOKENS); a PRM's own engine joins it.
        plan = plan_for(policy.device, None, policy.memory_fraction, policy.reward_memory_share)
        try:
            engine = Engine.from_pretrained(
                policy.model, kv_budget_tokens=policy.kv_budget_tokens, device=policy.device,
                dtype=policy.dtype, max_batch_tokens=policy.max_batch_tokens, seed=search.seed,
                kv_dtype=policy.kv_dtype, memory=plan, compile=policy.compile,
                prepack=policy.prepack,
            )
        except PoolTooLarge as exc:
            raise ConfigError(f"policy.kv_budget_tokens: {exc}") from None
        return cls(engine, policy, search)

    def expand(self, requests: list[ExpandRequest]) -> list[list[Step]]:
        ticket = self.submit(requests)
        while not ticket.done:
            self.poll()
        return ticket.steps

    # Expansions in flight together (Engine.submit): the search loop submits each problem's
    # round on its own and takes it back as soon as its steps end, so one problem's long
    # step does not hold up the others' next rounds (ets/loop/controller.py).
    def submit(self, requests: list[ExpandRequest]) -> "ExpandTicket":
        """Start `expand(requests)` without waiting; `poll` until the ticket is `done`,
        then its `steps` are `expand`'s result."""
        ticket = ExpandTicket(requests, [[] for _ in requests])
        groups: dict[tuple[SamplingSettings, int, bool], list[int]] = {}
        seeds = []
        for i, req in enumerate(requests):
            sampling = req.sampling or self.sampling
            seeds.append(req.seed if req.seed is not None else self._rng.getrandbits(62))
            cap = new_token_cap(len(req.token_ids), self.context_tokens, sampling.max_step_tokens)
            if cap == 0:  # the path fills the context already: nothing more can be decoded
                ticket.steps[i] = [Step("", [], "context") for _ in range(req.n)]
                continue
            groups.setdefault((sampling, cap, req.embed), []).append(i)
        try:
            for (sampling, cap, embed), members in groups.items():
                part = self.engine.submit(
                    [(requests[i].token_ids, requests[i].n, seeds[i]) for i in members], max_new_tokens=cap,
                    temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                    stop=[self.config.step_delimiter], embed=embed,
                )
                ticket.parts.append((part, sampling, members))
                self._owner[part] = ticket
        except BaseException:  # nothing of this call ran yet: its parts are taken back
            for part, _, _ in ticket.parts:
                self.engine.withdraw(part)
            self._drop(ticket)
            raise
        self._stats["expand_calls"] += 1
        if not ticket.parts:
            ticket.done = True
        return ticket

    def poll(self) -> list["ExpandTicket"]:
        """One forward of everything submitted; the tickets that finished with it. An
        error fails every ticket in flight (no handle of theirs goes out)."""
        try:
            finished = self.engine.step()
        except BaseException:
            for ticket in set(self._owner.values()):
                self._drop(ticket)
            raise
        done = []
        for part in finished:
            ticket = self._owner.pop(part)
            ticket.finished += 1
            if ticket.finished == len(ticket.parts):
                self._hand_out(ticket)
                done.append(ticket)
        return done

    def abandon(self) -> None:
        """Drop every expansion in flight (a search stopped by an error): the engine stops
        their sequences; nothing of theirs stays locked."""
        self.engine.abort()
        for ticket in set(self._owner.values()):
            self._drop(ticket)

    def _hand_out(self, ticket: "ExpandTicket") -> None:
        """A finished ticket's continuations, cut into steps, their handles held."""
        requests = ticket.requests
        for part, sampling, members in ticket.parts:
            cutter = self.cutter(sampling.max_step_tokens)
            for i, req_conts in zip(members, self.engine.collect(part)):
                path_len = len(requests[i].token_ids)
                for c in req_conts:
                    step = at_context(cutter.cut(c.token_ids), path_len, self.context_tokens)
                    embedding = None if c.embedding is None else c.embedding.numpy()
                    ticket.steps[i].append(step._replace(handle=c.handle, embedding=embedding))
                    self._held.add(c.handle)
                    self._stats["generated_tokens"] += len(c.token_ids)
        ticket.done = True
        # Right after a round every child holds its path: the live KV of the search.
        self._live_sum += self.engine.stats()["locked_kv_tokens"]

    def _drop(self, ticket: "ExpandTicket") -> None:
        """Forget a ticket that failed: its parts still in flight were aborted by the
        engine (or withdrawn); those that had ended are collected and their paths released."""
        for part, _, _ in ticket.parts:
            self._owner.pop(part, None)
            if part.done:
                self.engine.release([c.handle for per in self.engine.collect(part) for c in per])
        ticket.failed = True

    def release(self, handles: list[Hashable | None]) -> None:
        mine = [h for h in handles if h is not None]
        if mine:
            self._held.difference_update(mine)
            self.engine.release(mine)

    def release_all(self) -> None:
        """Drop every lock this policy still holds (e.g. when a caller stops early)."""
        self.release(list(self._held))

    def memory(self) -> KVMemory:
        """The engine's pool (capacity) and the paths its handles lock (live)."""
        s = self.engine.stats()
        calls = self._stats["expand_calls"]
        return KVMemory(
            capacity_tokens=s["pool_kv_tokens"],
            live_tokens=s["locked_kv_tokens"],
            peak_live_tokens=s["peak_live_kv_tokens"],
            mean_live_tokens=self._live_sum / calls if calls else 0.0,
        )

    def stats(self) -> dict[str, Any]:
        """The engine's counters, plus `mean_kv_tokens`: the locked (live) KV tokens after
        each round, averaged over rounds."""
        return {**self.engine.stats(), **self._stats, "mean_kv_tokens": self.memory().mean_live_tokens}
