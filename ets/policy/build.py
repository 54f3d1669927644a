"""The policy backend a `PolicyConfig` names: `engine` (the default) or `hf` (the baseline)."""

from __future__ import annotations

from ets.config import PolicyConfig, SearchConfig
from ets.policy.base import Policy


def build_policy(policy: PolicyConfig, search: SearchConfig) -> Policy:
    if policy.backend == "hf":
        from ets.policy.hf import HFPolicy

        return HFPolicy.from_config(policy, search)
    from ets.policy.engine import EnginePolicy

    return EnginePolicy.from_config(policy, search)
