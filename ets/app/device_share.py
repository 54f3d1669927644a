"""Runs that share one GPU: `ets sweep --jobs N` (N processes, each on the default GPU) and
Ray workers given a fraction of a GPU (`run_distributed(..., gpus_per_worker=0.5)`).

A run sizes its engines' KV pools from the memory its device has free once its models are
loaded (`policy.memory_fraction`, ets/engine/memory.py). Runs that start together on one
GPU would each find nearly all of it free and each take 0.9 of it: the later ones would run
out of memory. So each of them sizes its pools from its share of the fraction instead: N
runs, each taking share x fraction of what it finds free, take together at most the
fraction of what was free before any of them started.

A run whose policy pool is set in tokens (`policy.kv_budget_tokens`) is left as it is: its
memory is the user's to split. So are runs on the CPU without `policy.memory_fraction`,
whose pools are a fixed size, and vLLM's, which sizes its own
(`policy.vllm.gpu_memory_utilization`, of the whole GPU).
"""

from __future__ import annotations

import dataclasses

from ets.config import RunConfig
from ets.engine.memory import default_fraction


def share_device(config: RunConfig, share: float) -> RunConfig:
    """`config` for one of the runs sharing its GPU, each given `share` of it (1: alone)."""
    policy = config.policy
    if not 0 < share < 1 or policy.backend != "engine" or policy.kv_budget_tokens is not None:
        return config
    fraction = default_fraction(policy.memory_fraction, policy.device)
    if fraction is None:  # not a GPU: fixed pools
        return config
    return dataclasses.replace(config, policy=dataclasses.replace(policy, memory_fraction=fraction * share))
