"""The baseline policy: plain `transformers` generation, no prefix sharing.

Every expansion re-encodes each sequence's whole path (prompt + steps) from scratch, as a
search built on `model.generate` would. It is kept as the correctness and speed baseline
that the engine (ets/engine) is measured against, and as the fallback for models the
engine cannot run.
"""

from __future__ import annotations

from typing import Any, Hashable

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from ets.config import PolicyConfig, SearchConfig
from ets.models.load import load_causal_lm
from ets.policy.base import ExpandRequest, KVMemory, Prompt, Step
from ets.policy.steps import StepCutter, format_prompt


class _StepStop(StoppingCriteria):
    """Stops each row of a batch once its new tokens form a complete step."""

    def __init__(self, cutter: StepCutter, prompt_len: int):
        self.cutter = cutter
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        rows = input_ids[:, self.prompt_len :].tolist()
        return torch.tensor([self.cutter.finished(r) for r in rows], device=input_ids.device)


class HFPolicy:
    """`ets.policy.base.Policy` on `model.generate` (left-padded batches, sampled per row)."""

    def __init__(self, model, tokenizer, policy: PolicyConfig, search: SearchConfig, max_rows: int = 64):
        self.model = model
        self.tokenizer = tokenizer
        self.config = policy
        self.search = search
        self.max_rows = max_rows
        self.cutter = StepCutter(tokenizer, policy.step_delimiter, search.max_step_tokens)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        torch.manual_seed(search.seed)  # generate() samples from the global generator
        self._stats = {"generated_tokens": 0, "computed_tokens": 0, "expand_calls": 0, "peak_kv_tokens": 0}

    @classmethod
    def from_config(cls, policy: PolicyConfig, search: SearchConfig) -> "HFPolicy":
        model, tokenizer = load_causal_lm(policy.model, policy.device, policy.dtype, seed=search.seed)
        return cls(model, tokenizer, policy, search)

    def format_prompt(self, question: str) -> Prompt:
        return Prompt(*format_prompt(self.tokenizer, self.config.prompt_template, question))

    def expand(self, requests: list[ExpandRequest]) -> list[list[Step]]:
        rows = [(i, req.token_ids) for i, req in enumerate(requests) for _ in range(req.n)]
        # Similar lengths together: less padding per batch.
        order = sorted(range(len(rows)), key=lambda r: len(rows[r][1]))
        out: list[list[Step]] = [[] for _ in requests]
        steps_by_row: dict[int, Step] = {}
        for start in range(0, len(order), self.max_rows):
            chunk = order[start : start + self.max_rows]
            for r, step in zip(chunk, self._generate([rows[r][1] for r in chunk])):
                steps_by_row[r] = step
        for r, (i, _) in enumerate(rows):
            out[i].append(steps_by_row[r])
        self._stats["expand_calls"] += 1
        return out

    def release(self, handles: list[Hashable | None]) -> None:
        """Nothing is cached between calls (every handle is None): nothing to release."""

    def memory(self) -> KVMemory:
        """Nothing is kept between calls: no capacity for admission to respect, nothing
        live. (The KV of one `generate` batch exists only during the call; `stats()`
        estimates its peak as `peak_kv_tokens`.)"""
        return KVMemory(capacity_tokens=None, live_tokens=0, peak_live_tokens=None, mean_live_tokens=None)

    def stats(self) -> dict[str, Any]:
        return dict(self._stats)

    @torch.no_grad()
    def _generate(self, paths: list[list[int]]) -> list[Step]:
        width = max(len(p) for p in paths)
        # Left padding: every row's last real token sits at column width-1.
        ids = torch.full((len(paths), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(paths), width), dtype=torch.long)
        for r, p in enumerate(paths):
            ids[r, width - len(p) :] = torch.tensor(p)
            mask[r, width - len(p) :] = 1
        device = self.model.device
        sampling = self.search.temperature > 0
        output = self.model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=self.search.max_step_tokens,
            do_sample=sampling,
            temperature=self.search.temperature if sampling else None,
            top_p=self.search.top_p if sampling else None,
            top_k=self.search.top_k if sampling else None,
            pad_token_id=self.pad_id,
            stopping_criteria=StoppingCriteriaList([_StepStop(self.cutter, width)]),
        )
        steps = [self.cutter.cut(row) for row in output[:, width:].tolist()]
        generated = sum(len(s.token_ids) for s in steps)
        self._stats["generated_tokens"] += generated
        self._stats["computed_tokens"] += sum(len(p) for p in paths) + generated
        # Without sharing, every row holds its whole path's KV while it decodes.
        self._stats["peak_kv_tokens"] = max(self._stats["peak_kv_tokens"], len(paths) * (width + max(len(s.token_ids) for s in steps)))
        return steps
