"""`EnginePolicy`: the search controller's `ets.policy.Policy` on the engine.

Prompt formatting and step cutting are shared with the `transformers` baseline
(ets/steps.py), so both backends produce the same `Step` for the same tokens.

Which KV stays locked. Each child a call returns holds an engine handle on its path. The
controller names nodes by keys the policy only learns when a node is expanded, so:
- a child handle is found by its path when the child is expanded, and from then on is
  known by the request's key; `release(keys)` releases it;
- the controller sends one batched `expand` per round for every active problem, so a
  child that the next call does not expand will never be expanded: its handle is released
  at the start of that call, before anything is generated (completed and pruned children).
If a caller expands problems in separate calls, the second rule only costs cache hits
(recomputation), never correctness: a released path may be evicted, not corrupted.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any, Hashable

from ets.config import PolicyConfig, SearchConfig
from ets.engine.engine import Engine
from ets.policy import ExpandRequest, Step
from ets.steps import StepCutter, format_prompt


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
        self._children: dict[tuple[int, ...], list[int]] = defaultdict(list)  # path -> handles
        self._by_key: dict[Hashable, int] = {}
        self._stats = {"generated_tokens": 0, "expand_calls": 0}

    @classmethod
    def from_config(cls, policy: PolicyConfig, search: SearchConfig) -> "EnginePolicy":
        engine = Engine.from_pretrained(
            policy.model, kv_budget_tokens=policy.kv_budget_tokens, device=policy.device,
            dtype=policy.dtype, max_batch_tokens=policy.max_batch_tokens, seed=search.seed,
        )
        return cls(engine, policy, search)

    def format_prompt(self, question: str) -> tuple[str, list[int]]:
        return format_prompt(self.tokenizer, self.config.prompt_template, question)

    def expand(self, requests: list[ExpandRequest]) -> list[list[Step]]:
        # Children of the last call that are not expanded now never will be.
        wanted = Counter(tuple(req.token_ids) for req in requests)
        reuse: dict[tuple[int, ...], list[int]] = {}
        for path, handles in self._children.items():
            self.engine.release(handles[wanted[path]:])
            reuse[path] = handles[: wanted[path]]
        self._children = defaultdict(list)
        for req in requests:
            handles = reuse.get(tuple(req.token_ids))
            if handles:
                if req.key in self._by_key:  # expanded again: the old lock is the same path
                    self.engine.release([self._by_key[req.key]])
                self._by_key[req.key] = handles.pop()

        s = self.search
        conts = self.engine.expand(
            [(req.token_ids, req.n) for req in requests], max_new_tokens=s.max_step_tokens,
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
            stop=[self.config.step_delimiter], seed=self._rng.getrandbits(62),
        )
        out = []
        for req, req_conts in zip(requests, conts):
            steps = []
            for c in req_conts:
                step = self.cutter.cut(c.token_ids)
                self._children[tuple(req.token_ids) + tuple(step.token_ids)].append(c.handle)
                steps.append(step)
                self._stats["generated_tokens"] += len(c.token_ids)
            out.append(steps)
        self._stats["expand_calls"] += 1
        return out

    def release(self, keys: list[Hashable]) -> None:
        """Release the handles of expanded nodes; keys never expanded are unknown here and
        are released at the next `expand` (see the module docstring)."""
        handles = [self._by_key.pop(k) for k in keys if k in self._by_key]
        if handles:
            self.engine.release(handles)

    def release_all(self) -> None:
        """Drop every lock this policy holds (e.g. when a run is over)."""
        handles = list(self._by_key.values()) + [h for hs in self._children.values() for h in hs]
        self._by_key.clear()
        self._children.clear()
        self.engine.release(handles)

    def stats(self) -> dict[str, Any]:
        return {**self.engine.stats(), **self._stats}
