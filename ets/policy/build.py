"""The policy backend a `PolicyConfig` names: `engine` (the default), `hf` (the baseline) or
`vllm` (vLLM in-process, ets/policy/vllm.py)."""

from __future__ import annotations

from ets.config import PolicyConfig, SearchConfig
from ets.policy.base import Policy


def check_backend(policy: PolicyConfig, *, local: bool = True) -> None:
    """Raise ConfigError where the policy's backend cannot run (ets/policy/vllm.py's
    `check_usable`), before anything is read or loaded. `local`: the run's models load on
    this machine (not on a Ray cluster's, whose Python may have what this one lacks)."""
    if policy.backend == "vllm":
        from ets.policy.vllm import check_usable

        check_usable(policy, installed=local)


def build_policy(policy: PolicyConfig, search: SearchConfig) -> Policy:
    if policy.backend == "hf":
        from ets.policy.hf import HFPolicy

        return HFPolicy.from_config(policy, search)
    if policy.backend == "vllm":
        from ets.policy.vllm import VLLMPolicy

        return VLLMPolicy.from_config(policy, search)
    from ets.policy.engine import EnginePolicy

    return EnginePolicy.from_config(policy, search)
