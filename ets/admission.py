"""Admission of problems under a KV budget: many searches on one engine's pool.

The throughput of a search method at a fixed KV budget is decided here: a method that
keeps a smaller tree leaves room for more problems in flight, so more work shares every
batched forward. A new problem is admitted only while the projected KV tokens of all
active searches, plus the newcomer's, fit the budget:

    projected(search)  = KV of the paths it keeps (the paper's metric over its allocation)
                         + children it will generate next round x mean step length
    projected(new)     = prompt tokens + W x mean step length

The mean step length is measured as the run goes (it starts at half of max_step_tokens).
At least one problem is always in flight, so a budget smaller than one search slows the
run (the engine evicts and recomputes) but never stops it.
"""

from __future__ import annotations

from typing import Iterable

from ets.tree import Node, kv_size


class KVAdmission:
    def __init__(self, budget_tokens: int | None, width: int, max_step_tokens: int):
        self.budget = budget_tokens
        self.width = width
        self._steps = 0
        self._step_tokens = 0
        self._prior = max(1, max_step_tokens // 2)

    @property
    def mean_step_tokens(self) -> float:
        return self._step_tokens / self._steps if self._steps else self._prior

    def observe(self, new_nodes: Iterable[Node]) -> None:
        for node in new_nodes:
            self._steps += 1
            self._step_tokens += node.num_tokens

    def projected(self, kept: list[Node], children: int) -> float:
        return kv_size(kept) + children * self.mean_step_tokens

    def admits(self, active_projection: float, prompt_tokens: int, n_active: int) -> bool:
        if self.budget is None or n_active == 0:
            return True
        return active_projection + prompt_tokens + self.width * self.mean_step_tokens <= self.budget
