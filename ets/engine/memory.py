"""KV memory with one owner on a device: the pools of the engines a run puts there, sized
together from the memory the device has free once the models are loaded.

A run may put two engines on one device: the policy's and a PRM's own (rewards/step_tag.py).
Each engine's memory is its KV pool and what its runner keeps besides it, the decode
groups' gather buffers (ets/engine/runner.py: each of the two kinds at most the pool's
bytes again), so an engine that decodes may take up to ENGINE_MEMORY_MULTIPLE times its
pool; an engine that only scores (prefill forwards) takes its pool alone.

    free  = the device's free memory, measured when the first pool is needed (both models
            are loaded by then: pools are created lazily, ets/engine/engine.py)
    share = fraction x free, split between the engines: by `reward_share`, or (None) so
            that every pool holds the same number of tokens (a PRM scores the paths the
            policy's pool holds)
    pool  = share / (multiple x bytes per token), in tokens

An engine given its size in tokens (`kv_budget_tokens`) takes no part. On the CPU `free`
is the kernel's MemAvailable; on CUDA `torch.cuda.mem_get_info`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ets.engine.pool import PoolTooLarge, available_bytes

# A pool plus the two kinds of kept decode buffers its runner may hold, each at most the
# pool's bytes (runner.py, workspace.DecodeGroups)
ENGINE_MEMORY_MULTIPLE = 3
# The share of a GPU's free memory the pools take when no fraction is given (vLLM's default
# `gpu_memory_utilization`); the rest is the forwards' activations and the allocator's slack
DEFAULT_CUDA_FRACTION = 0.9


def default_fraction(fraction: float | None, device) -> float | None:
    """The fraction in force: the one given, else DEFAULT_CUDA_FRACTION on CUDA; None on
    the CPU (and MPS): there each engine's pool is a fixed size (the engine's default), so
    a run's throughput does not depend on what else the machine holds at the time."""
    if fraction is not None:
        return fraction
    return DEFAULT_CUDA_FRACTION if torch.device(device).type == "cuda" else None


def free_bytes(device) -> int | None:
    """The memory `device` can still give: CUDA's free memory (after returning torch's
    cached blocks), the CPU's MemAvailable; None where unknown (MPS)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        return available_bytes()
    return None


def same_device(device) -> torch.device:
    """`device` with its index ("cuda" is the current GPU's): two names of one device compare equal."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def plan_for(device, plan: "MemoryPlan | None", fraction: float | None,
             reward_share: float | None = None) -> "MemoryPlan | None":
    """The plan an engine on `device` sizes its pool in: `plan` (the policy engine's) when
    it is on that device, else a plan of its own from `fraction` (default_fraction); None:
    a fixed pool."""
    if plan is not None and plan.device == same_device(device):
        return plan
    fraction = default_fraction(fraction, device)
    return None if fraction is None else MemoryPlan(device, fraction, reward_share)


@dataclass
class Claim:
    """One engine's part of a plan: filled in when the plan is resolved."""

    name: str                   # "policy" or "reward": the key the report and errors use
    bytes_per_token: int        # the pool's, K and V of every layer
    multiple: int               # memory per pool byte (ENGINE_MEMORY_MULTIPLE, or 1: scoring only)
    tokens: int | None = None   # the pool, once resolved
    free_bytes: int | None = None   # the device's free memory it was sized from
    fixed: bool = False         # sized by its own key (kv_budget_tokens): its memory is set aside

    def as_dict(self) -> dict:
        pool = (self.tokens or 0) * self.bytes_per_token
        return {"pool_tokens": self.tokens, "bytes_per_token": self.bytes_per_token, "pool_bytes": pool,
                "engine_bytes_at_most": pool * self.multiple}


class MemoryPlan:
    """The KV pools of the engines on one device, sized together (see the module doc).

    Engines register a `claim` when they are built and ask for their `tokens` when they
    first need their pool: the first ask measures the free memory once and sizes every
    claim registered by then. A claim registered after that (an engine built once another
    already holds its pool) is sized from what is free at its own ask, with the same
    fraction and its weight among the claims."""

    def __init__(self, device, fraction: float, reward_share: float | None = None):
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"memory_fraction must be in (0, 1], got {fraction}")
        if reward_share is not None and not 0.0 < reward_share < 1.0:
            raise ValueError(f"reward_memory_share must be in (0, 1), got {reward_share}")
        self.device = same_device(device)
        self.fraction = fraction
        self.reward_share = reward_share
        self.claims: list[Claim] = []

    def claim(self, name: str, bytes_per_token: int, multiple: int = ENGINE_MEMORY_MULTIPLE,
              tokens: int | None = None) -> Claim:
        """An engine's part; with `tokens` (its own kv_budget_tokens) a fixed one: its
        memory is set aside before the others are sized, and the report shows it."""
        c = Claim(name, bytes_per_token, multiple, tokens, fixed=tokens is not None)
        self.claims.append(c)
        return c

    def _set_aside(self) -> int:
        """The bytes fixed pools will take beyond what the device counts as used now: their
        buffers, and on the CPU their pools too (taken as they fill: pool.lazy_zeros)."""
        taken_now = 0 if self.device.type == "cpu" else 1
        return sum(c.tokens * c.bytes_per_token * (c.multiple - taken_now) for c in self.claims if c.fixed)

    def resolve(self, free: int | None = None) -> None:
        """Size every claim registered so far (measuring the free memory once, unless
        `free` says it: a forecast); the pools are still created when first used. Raises
        PoolTooLarge as `tokens` does."""
        open_claims = [c for c in self.claims if c.tokens is None]
        if open_claims:
            self._resolve(open_claims, free)

    def tokens(self, claim: Claim) -> int:
        """The pool of `claim`, in tokens (the plan resolved for it and the other open
        claims on first ask). Raises PoolTooLarge when the share holds not one token."""
        self.resolve()
        return claim.tokens

    def _weights(self, claims: list[Claim]) -> list[float]:
        names = {c.name for c in self.claims if not c.fixed}
        if self.reward_share is not None and names == {"policy", "reward"}:
            return [self.reward_share if c.name == "reward" else 1.0 - self.reward_share for c in claims]
        # every pool the same number of tokens: memory in proportion to a token's
        per_token = [c.bytes_per_token * c.multiple for c in self.claims if not c.fixed]
        return [c.bytes_per_token * c.multiple / sum(per_token) for c in claims]

    def _resolve(self, claims: list[Claim], free: int | None = None) -> None:
        free = free_bytes(self.device) if free is None else free
        if free is not None:
            free = max(0, free - self._set_aside())
        if free is None:
            raise PoolTooLarge(f"the free memory of {self.device} cannot be read; set policy.kv_budget_tokens "
                               "(and reward.options.kv_budget_tokens) instead of policy.memory_fraction")
        for c, weight in zip(claims, self._weights(claims)):
            c.free_bytes = free
            c.tokens = int(self.fraction * free * weight) // (c.bytes_per_token * c.multiple)
            if c.tokens < 1:
                raise PoolTooLarge(
                    f"{self.fraction:g} of the {free / 2**30:.2f} GiB free on {self.device} holds no {c.name} KV "
                    f"token ({c.bytes_per_token * c.multiple:,} bytes each with the engine's buffers); raise "
                    "policy.memory_fraction or free memory")

    def report(self) -> dict:
        """What the run summary shows: the device, the fraction, the free memory measured
        and each engine's pool (tokens, bytes, the engine's most with its buffers)."""
        measured = [c.free_bytes for c in self.claims if c.free_bytes is not None]
        return {"device": str(self.device), "memory_fraction": self.fraction, "reward_share": self.reward_share,
                "free_bytes": measured[0] if measured else None,
                "pools": {c.name: c.as_dict() for c in self.claims if c.tokens is not None}}
