"""The baseline policy: plain `transformers` generation, no prefix sharing.

Every expansion re-encodes each sequence's whole path (prompt + steps) from scratch, as a
search built on `model.generate` would. It is kept as the correctness and speed baseline
that the engine (ets/engine) is measured against, and as the fallback for models the
engine cannot run.

Sampling is per row, so a request's samples do not depend on the batch: `generate` runs
greedily over the logits a `LogitsProcessor` (`_RowSampler`) leaves, which, for each row,
draws the next token with the engine's own sampling function (`ets.engine.sampling.sample`:
temperature, then top-k, then top-p, then an inverse-CDF draw) from that row's own random
stream, seeded like the engine's (`ets.engine.engine.sample_seed(request seed, j)` for
sample j) and read at the new token's position in its sequence, and masks every other
token. So sample j of a request depends only on (its seed, j) and the model, as on the
engine; and with equal logits both backends draw the same token (the logits of a padded
batch and of the engine's packed one agree only to float precision, so they may part where
a draw falls on a boundary). Temperature 0 is plain greedy decoding, with no processor.
Nothing is drawn from torch's global generator.

What it cannot promise: the logits of a padded batch move in their last bits with the
batch's shape (its width, its rows), so a draw that falls that close to a boundary, or a
greedy near-tie, can go another way when other requests share the batch: at another
`concurrency` or after a resume. Rare, and said once per run (`BATCH_NOTE`, logged at
INFO); the PRM's scores do not have this limit (rewards/backends.py, `batch_invariant`).

Step embeddings (`ExpandRequest.embed`, ETS's `search.embedder: policy`): the final norm's
output of each `generate` forward is read as it is computed (ets/engine/hidden.py; only
the last position of each, so a long prompt's states are not kept), and each row's step
embedding is the mean of the states its tokens were sampled from, as on the engine: no
extra forward. Like the logits, those states come from padded batches and move in their
last bits with what else is in flight.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from typing import Any, Hashable, NamedTuple

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from ets.config import PolicyConfig, SearchConfig
from ets.engine.engine import sample_seed
from ets.engine.hidden import final_hidden, final_norm, unit_rows
from ets.engine.sampling import SamplingParams, sample
from ets.models.load import load_causal_lm
from ets.policy.base import ExpandRequest, KVMemory, SamplingSettings, Step
from ets.policy.steps import PromptsAndSteps, StepCutter, at_context, model_context, new_token_cap


log = logging.getLogger(__name__)

# What this backend cannot promise, said once per run (docs/backends.md, "The transformers baseline").
BATCH_NOTE = ("policy.backend hf: generate computes a row's logits in a padded batch shaped by what else is in "
              "flight, and their last bits move with it; a draw that falls that close to a token's boundary (rare) "
              "can differ between runs of another concurrency or after a resume, and the records with it; the "
              "engine backend's logits are the same bit for bit whatever else is in the batch")


class _Row(NamedTuple):
    request: int       # index of its request in the call
    sample: int        # j: which of the request's samples
    path: list[int]    # the request's token path
    seed: int          # its stream's seed: sample_seed(request seed, j), as on the engine
    cap: int           # new tokens it may generate (max_step_tokens, or what the context leaves)
    embed: bool = False  # its step's embedding too


class _StepStop(StoppingCriteria):
    """Stops each row of a batch once its new tokens form a complete step or reach the
    row's own cap (what is left of the context)."""

    def __init__(self, cutter: StepCutter, prompt_len: int, caps: list[int]):
        self.cutter = cutter
        self.prompt_len = prompt_len
        self.caps = caps

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        rows = input_ids[:, self.prompt_len :].tolist()
        done = [len(r) >= cap or self.cutter.finished(r) for r, cap in zip(rows, self.caps)]
        return torch.tensor(done, device=input_ids.device)


class _RowSampler(LogitsProcessor):
    """Samples each row's next token from its own stream (the engine's sampling rule) and
    leaves only that token possible, so greedy decoding picks it."""

    def __init__(self, params: SamplingParams, seeds: list[int], lengths: list[int], width: int):
        self.params = params
        self.seeds = seeds
        self.lengths = lengths   # each row's path length (its tokens, without the padding)
        self.width = width       # the padded prompt width: columns after it are generated

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        done = input_ids.shape[1] - self.width  # tokens generated so far, in every row
        positions = [n + done for n in self.lengths]
        picked = torch.tensor(sample(scores, self.params, self.seeds, positions), device=scores.device)
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(scores.shape[0], device=scores.device), picked] = 0.0
        return out


class HFPolicy(PromptsAndSteps):
    """`ets.policy.base.Policy` on `model.generate` (left-padded batches, sampled per row)."""

    def __init__(self, model, tokenizer, policy: PolicyConfig, search: SearchConfig, max_rows: int = 64):
        self.model = model
        self.tokenizer = tokenizer
        self.config = policy
        self.search = search
        self.sampling = SamplingSettings.from_search(search)  # for requests that carry none
        self.context_tokens = model_context(model.config, policy.max_context)
        self.max_rows = max_rows
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._rng = random.Random(search.seed)  # seeds for requests that carry none
        self._stats = {"generated_tokens": 0, "computed_tokens": 0, "expand_calls": 0, "peak_kv_tokens": 0,
                       "embedded_steps": 0, "embed_seconds": 0.0}
        self.embeds_steps = final_norm(model) is not None

    @classmethod
    def from_config(cls, policy: PolicyConfig, search: SearchConfig) -> "HFPolicy":
        model, tokenizer = load_causal_lm(policy.model, policy.device, policy.dtype, seed=search.seed)
        log.info(BATCH_NOTE)
        return cls(model, tokenizer, policy, search)

    def expand(self, requests: list[ExpandRequest]) -> list[list[Step]]:
        # One row per sample, grouped by sampling settings (one generate() call per group).
        groups: dict[SamplingSettings, list[_Row]] = {}
        out: list[list[Step | None]] = [[] for _ in requests]
        for i, req in enumerate(requests):
            sampling = req.sampling or self.sampling
            seed = req.seed if req.seed is not None else self._rng.getrandbits(62)
            cap = new_token_cap(len(req.token_ids), self.context_tokens, sampling.max_step_tokens)
            out[i] = [None] * req.n
            for j in range(req.n):
                if cap == 0:  # the path fills the context already
                    out[i][j] = Step("", [], "context")
                else:
                    groups.setdefault(sampling, []).append(
                        _Row(i, j, list(req.token_ids), sample_seed(seed, j), cap, req.embed))
        for sampling, rows in groups.items():
            # Similar lengths together: less padding per batch (each row samples from its own
            # stream, so which rows share a batch changes no token).
            rows = sorted(rows, key=lambda r: len(r.path))
            for start in range(0, len(rows), self.max_rows):
                chunk = rows[start : start + self.max_rows]
                for row, step in zip(chunk, self._generate(chunk, sampling)):
                    out[row.request][row.sample] = step
        self._stats["expand_calls"] += 1
        return out  # type: ignore[return-value]

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
    def _generate(self, rows: list[_Row], sampling: SamplingSettings) -> list[Step]:
        """One `generate` over `rows`, each sampled from its own stream."""
        paths = [r.path for r in rows]
        caps = [r.cap for r in rows]
        width = max(len(p) for p in paths)
        # Left padding: every row's last real token sits at column width-1.
        ids = torch.full((len(paths), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(paths), width), dtype=torch.long)
        for r, p in enumerate(paths):
            ids[r, width - len(p) :] = torch.tensor(p)
            mask[r, width - len(p) :] = 1
        device = self.model.device
        cutter = self.cutter(sampling.max_step_tokens)
        processors = LogitsProcessorList()
        if sampling.temperature > 0:
            params = SamplingParams(max(caps), sampling.temperature, sampling.top_p, sampling.top_k)
            processors.append(_RowSampler(params, [r.seed for r in rows], [len(p) for p in paths], width))
        embed = any(r.embed for r in rows)
        seconds = [0.0]

        def last_state(states: torch.Tensor) -> torch.Tensor:  # each forward's states: the last position's
            t0 = time.perf_counter()
            out = states[:, -1].float()
            seconds[0] += time.perf_counter() - t0
            return out

        with final_hidden(self.model, keep=last_state) if embed else contextlib.nullcontext() as states:
            output = self.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max(caps),
                do_sample=False,          # the row sampler has drawn each token already
                temperature=None, top_p=None, top_k=None,
                pad_token_id=self.pad_id,
                logits_processor=processors,
                stopping_criteria=StoppingCriteriaList([_StepStop(cutter, width, caps)]),
            )
        new = output[:, width:].tolist()
        steps = [at_context(cutter.cut(row[:cap]), len(p), self.context_tokens)
                 for row, cap, p in zip(new, caps, paths)]
        if embed:
            steps = self._with_embeddings(steps, rows, states, seconds[0])
        generated = sum(len(s.token_ids) for s in steps)
        self._stats["generated_tokens"] += generated
        self._stats["computed_tokens"] += sum(len(p) for p in paths) + generated
        # Without sharing, every row holds its whole path's KV while it decodes.
        self._stats["peak_kv_tokens"] = max(self._stats["peak_kv_tokens"], len(paths) * (width + max(len(s.token_ids) for s in steps)))
        return steps

    def _with_embeddings(self, steps: list[Step], rows: list[_Row], states: list[torch.Tensor],
                         seconds: float) -> list[Step]:
        """Each step of a row that asked, with its embedding: the mean of the states (one
        [rows, hidden] per forward, forward k sampling new token k) its tokens were sampled
        from, the EOS that ended it included."""
        t0 = time.perf_counter()
        every = torch.stack(states)                                   # [forwards, rows, hidden]
        counts = torch.tensor([min(len(s.token_ids) + (s.finish == "eos"), every.shape[0]) for s in steps])
        upto = torch.arange(every.shape[0])[:, None] < counts[None, :]     # [forwards, rows]
        sums = (every * upto[..., None].to(every.device, every.dtype)).sum(0)
        vectors = unit_rows(sums, counts).cpu().numpy()
        out = [s._replace(embedding=v) if r.embed and s.token_ids else s for s, r, v in zip(steps, rows, vectors)]
        self._stats["embedded_steps"] += sum(1 for s in out if s.embedding is not None)
        self._stats["embed_seconds"] += seconds + time.perf_counter() - t0
        return out
