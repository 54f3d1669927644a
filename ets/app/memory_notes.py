"""What `ets run` says about KV memory: the split of a device's memory between the
policy's pool and a PRM's own (ets/engine/memory.py), measured in the run summary and
forecast by `--check` before any model loads."""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import torch

from ets.config import ConfigError, RunConfig
from ets.engine.engine import DEFAULT_KV_TOKENS
from ets.engine.linears import packs
from ets.engine.memory import ENGINE_MEMORY_MULTIPLE, free_bytes, plan_for, same_device
from ets.engine.pool import KVPool, PoolTooLarge, kv_storage_dtype
from ets.models.load import read_model_config, resolve_dtype


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def plan_line(report: dict, forecast: bool = False) -> str:
    """One line of a plan's report: the device, the fraction of its free memory, and each
    pool (tokens, and the most its engine takes with its buffers)."""
    pools = ", ".join(f"{name} {p['pool_tokens']:,} tokens ({_gib(p['engine_bytes_at_most'])} at most)"
                      for name, p in report["pools"].items())
    free = report["free_bytes"]
    measured = "about " if forecast else ""
    return (f"KV memory on {report['device']}: {report['memory_fraction']:g} of {measured}"
            f"{_gib(free) if free is not None else '?'} free{' once the models load' if forecast else ''}"
            f" -> {pools}")


def run_plans(policy, reward) -> list[dict]:
    """The reports of the plans the run's engines sized their pools in (one a device)."""
    engines = [getattr(policy, "engine", None), getattr(getattr(reward, "backend", None), "engine", None)]
    plans = dict.fromkeys(e.memory for e in engines if getattr(e, "memory", None) is not None)
    return [p.report() for p in plans]


def _weight_bytes(model: str, dtype: torch.dtype) -> int | None:
    """The bytes a model's weights take in `dtype`, from its safetensors headers (no
    tensor read); 0 for tiny:; None where unknown (a hub name, other formats)."""
    if model.startswith("tiny:"):
        return 0
    from safetensors import safe_open

    from ets.models.folder import local_path

    files = sorted(Path(local_path(model)).glob("*.safetensors"))
    if not files:
        return None
    count = 0
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            count += sum(math.prod(st.get_slice(name).get_shape()) for name in st.keys())
    return count * dtype.itemsize


def _reward_engine(config: RunConfig):
    """The PRM's options, when the run gives it an engine of its own (rewards/step_tag.py:
    scoring on an engine, not the policy's); else None."""
    from ets.rewards.step_tag import unshared_note, wants_engine

    options = step_tag_options(config)
    on_engine = config.policy.backend == "engine"
    if options is None or not wants_engine(options, on_engine):
        return None
    shared = options.share_policy_engine and unshared_note(options, on_engine, _same_model(config)) is None
    return None if shared else options


def step_tag_options(config: RunConfig):
    """The options of a PRM on step_tag's machinery (its engine, pool and device keys:
    step_tag, chat_judgement), parsed; None for another reward."""
    from ets.rewards.chat_judgement import ChatJudgementOptions
    from ets.rewards.options import parse_options
    from ets.rewards.step_tag import StepTagOptions

    options = {"step_tag": StepTagOptions, "chat_judgement": ChatJudgementOptions}.get(config.reward.name)
    return None if options is None else parse_options(options, config.reward.options, config.reward.name)


def unshared_engine_note(config: RunConfig) -> str | None:
    """`--check`'s line when the step-tag PRM is told to share the policy's engine and cannot."""
    from ets.rewards.step_tag import unshared_note

    options = step_tag_options(config)
    return None if options is None else unshared_note(options, config.policy.backend == "engine", _same_model(config))


def _same_model(config: RunConfig) -> bool:
    return config.reward.model in (None, config.policy.model)


class EngineSettings(NamedTuple):
    """One engine a run builds, with the settings it is built with."""
    name: str               # "policy" or "reward"
    model: str
    device: str
    dtype: str
    kv_dtype: str | None
    tokens: int | None      # its kv_budget_tokens
    multiple: int           # memory per pool byte (memory.ENGINE_MEMORY_MULTIPLE, or 1: scoring only)
    prepack: str
    compile: str


def run_engines(config: RunConfig) -> list[EngineSettings]:
    """The engines a run builds: the policy's with its own settings (none on another
    backend), and a PRM's own engine with its own (rewards/registry.py)."""
    from ets.rewards.registry import reward_prepack

    policy = config.policy
    if policy.backend != "engine":
        return []
    engines = [EngineSettings("policy", policy.model, policy.device, policy.dtype, policy.kv_dtype,
                              policy.kv_budget_tokens, ENGINE_MEMORY_MULTIPLE, policy.prepack, policy.compile)]
    reward = _reward_engine(config)
    if reward is not None:  # its device and dtype as step_tag resolves them: its own, else the policy's
        engines.append(EngineSettings("reward", config.reward.model or policy.model, reward.device or policy.device,
                                      reward.dtype or policy.dtype, None, reward.kv_budget_tokens, 1,
                                      reward_prepack(policy.prepack), reward.compile))
    return engines


def check_memory_notes(config: RunConfig) -> list[str]:
    """`--check`'s lines on KV memory: each engine's pool, fixed or forecast from the
    device's free memory now less the models' weights (read from their files; twice where
    the engine prepacks its linears, ets/engine/linears.py)."""
    engines = run_engines(config)
    if not engines:
        return []
    policy = config.policy
    plan = plan_for(policy.device, None, policy.memory_fraction, policy.reward_memory_share)
    fixed, weights = [], 0
    for name, model, device, dtype, kv_dtype, tokens, multiple, prepack, compile in engines:
        cfg = read_model_config(model)
        if cfg is None:
            return [f"KV memory: the config of {model!r} cannot be read here; the run summary shows the pools"]
        per_token = KVPool.bytes_per_token_for(cfg, kv_storage_dtype(kv_dtype, resolve_dtype(dtype)))
        on_plan = plan is not None and plan.device == same_device(device)
        if on_plan:
            plan.claim(name, per_token, multiple, tokens)
            w = _weight_bytes(model, resolve_dtype(dtype))
            # a prepacked engine keeps a copy of the linear layers' weights, most of a model's
            if w is not None and packs(prepack, compile, device, resolve_dtype(dtype)):
                w *= 2
            weights = None if weights is None or w is None else weights + w
        else:
            pool = DEFAULT_KV_TOKENS if tokens is None else tokens
            most = f"; {_gib(pool * per_token * multiple)} at most with its buffers" if multiple > 1 else ""
            fixed.append(f"{name} {pool:,} tokens on {device} ({_gib(pool * per_token)}{most})"
                         + (" (the default; policy.memory_fraction sizes the pools from free memory instead)"
                            if tokens is None else ""))
    fixed = [f"KV memory, fixed pools: {', '.join(fixed)}"] if fixed else []
    if plan is None or not plan.claims:
        return fixed
    free = free_bytes(plan.device)
    if free is None or weights is None:
        return fixed + [f"KV memory on {plan.device}: {plan.fraction:g} of the free memory once the models load "
                        "(their size cannot be read here; the run summary shows the pools)"]
    try:
        plan.resolve(max(0, free - weights))
    except PoolTooLarge as exc:
        raise ConfigError(f"policy.memory_fraction: {exc}") from None
    return fixed + [plan_line(plan.report(), forecast=True)]
