"""`EnginePolicy`: the search controller's `ets.policy.base.Policy` on the engine.

Prompt formatting and step cutting are shared with the `transformers` baseline
(ets/policy/steps.py), so both backends produce the same `Step` for the same tokens.

Each step carries the engine handle that locks its path (prompt + steps, cached in the
radix tree); the controller releases every handle exactly once (ets/policy/base.py), so the
locked KV is exactly the paths of the live search nodes.

Memory: the engine's pool is the policy's KV capacity (`memory().capacity_tokens`), and
its locks are the live KV. `policy.kv_budget_tokens` sizes the pool; None (the default)
is the engine's own default, `ets.engine.DEFAULT_KV_TOKENS`.
"""

from __future__ import annotations

import random
from typing import Any, Hashable

from ets.config import PolicyConfig, SearchConfig
from ets.engine.engine import Engine
from ets.policy.base import ExpandRequest, KVMemory, Prompt, Step
from ets.policy.steps import StepCutter, format_prompt


class EnginePolicy:
    def __init__(self, engine: Engine, policy: PolicyConfig, search: SearchConfig):
        if engine.tokenizer is None:
            raise ValueError("EnginePolicy needs an engine built with a tokenizer (for the step delimiter)")
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.config = policy
        self.search = search
        self.cutter = StepCutter(self.tokenizer, policy.step_delimiter, search.max_step_tokens)
        self._rng = random.Random(search.seed)  # one fresh seed per call
        self._held: set[int] = set()            # handles given out and not yet released
        self._stats = {"generated_tokens": 0, "expand_calls": 0}
        self._live_sum = 0

    @classmethod
    def from_config(cls, policy: PolicyConfig, search: SearchConfig) -> "EnginePolicy":
        # None: the engine's own default pool (ets.engine.DEFAULT_KV_TOKENS), written there once.
        engine = Engine.from_pretrained(
            policy.model, kv_budget_tokens=policy.kv_budget_tokens, device=policy.device,
            dtype=policy.dtype, max_batch_tokens=policy.max_batch_tokens, seed=search.seed,
        )
        return cls(engine, policy, search)

    def format_prompt(self, question: str) -> Prompt:
        return Prompt(*format_prompt(self.tokenizer, self.config.prompt_template, question))

    def expand(self, requests: list[ExpandRequest]) -> list[list[Step]]:
        s = self.search
        conts = self.engine.expand(
            [(req.token_ids, req.n) for req in requests], max_new_tokens=s.max_step_tokens,
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
            stop=[self.config.step_delimiter], seed=self._rng.getrandbits(62),
        )
        out = []
        for req_conts in conts:
            steps = []
            for c in req_conts:
                steps.append(self.cutter.cut(c.token_ids)._replace(handle=c.handle))
                self._held.add(c.handle)
                self._stats["generated_tokens"] += len(c.token_ids)
            out.append(steps)
        self._stats["expand_calls"] += 1
        # Right after a round every child holds its path: the live KV of the search.
        self._live_sum += self.engine.stats()["locked_kv_tokens"]
        return out

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
