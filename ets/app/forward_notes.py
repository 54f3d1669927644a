"""What `ets run --check` says about how each engine runs its model's forward: compiled or
eager (`policy.compile`, and what `auto` picks on the device), and on which linear layers
(`policy.prepack`), before any model loads."""

from __future__ import annotations

import torch

from ets.app.memory_notes import run_engines
from ets.config import RunConfig
from ets.engine import compiled
from ets.engine.linears import packs
from ets.models.load import resolve_dtype


def forward_note(name: str, device: str, compile: str, prepack: str, dtype: str) -> str:
    """One line: how `name`'s engine will run its forward on `device` (`compile` its
    setting: the policy's `policy.compile`, a PRM's own engine's `reward.options.compile`)."""
    device_t = torch.device(device)
    key = "policy.compile" if name == "policy" else "reward.options.compile"
    setting = f"{key}: {compile}"
    if compiled.enabled(compile, device_t):
        how = (f"compiled by torch.compile, its pieces between the attention ops replayed as CUDA graphs in "
               f"forwards of up to {compiled.CUDAGRAPH_MAX_ROWS} rows"
               if compiled.cudagraph_options(device_t) else "compiled by torch.compile")
        fallback = ("a compiled forward that fails runs again eagerly, as do all after it, with a warning"
                    if compile == "auto" else f"{key}: off runs it eagerly")
        return f"{name} forward on {device}: {how} ({setting}): its first forwards compile, seconds to minutes; {fallback}"
    linears = ", linear layers on oneDNN's prepacked weights" if packs(prepack, compile, device_t,
                                                                        resolve_dtype(dtype)) else ""
    why = "; auto compiles on cuda only" if compile == "auto" else ""
    return f"{name} forward on {device}: eager{linears} ({setting}{why})"


def check_forward_notes(config: RunConfig) -> list[str]:
    """`--check`'s lines on the forwards of the run's engines: the policy's, and a PRM's own."""
    return [forward_note(e.name, e.device, e.compile, e.prepack, e.dtype) for e in run_engines(config)]
