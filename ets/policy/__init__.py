"""The policy: what proposes the next reasoning steps, behind one small interface.

    base.py     the `Policy` protocol the search loop talks to (`ExpandRequest` with its seed and
                `SamplingSettings`, `Step`, `Prompt`, `KVMemory`, `PromptTooLong`)
    steps.py    prompt formatting and step cutting, shared by every backend
    engine.py   `EnginePolicy`: the policy on the prefix-sharing engine (ets/engine)
    hf.py       `HFPolicy`: plain `transformers` generate, the correctness and speed baseline
    build.py    `build_policy`: the backend a `PolicyConfig` names

Backends are imported from their modules (they load torch and transformers).
"""

from ets.policy.base import ExpandRequest, KVMemory, Policy, Prompt, PromptTooLong, SamplingSettings, Step

__all__ = ["ExpandRequest", "KVMemory", "Policy", "Prompt", "PromptTooLong", "SamplingSettings", "Step"]
