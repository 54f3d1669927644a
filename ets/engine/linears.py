"""The model's linear layers on oneDNN prepacked weights, on the CPU (`Engine(prepack=...)`,
`policy.prepack`).

On the CPU most of a forward's time is its linear layers. torch runs `nn.Linear` as a
BLAS matmul that reads the weight in its stored layout every call; oneDNN can reorder a
weight once into the blocked layout its kernels read fastest, and then multiply with it
directly (the op inductor itself uses for CPU linears). On SmolLM2-135M's shapes in float32 on
a 2-core AMD EPYC that made the projections 1.2-1.6x and the tied 49,152-row output layer
1.7-2.4x faster at 32-128 rows (`scripts/bench_engine.py --prepack on,off` measures a whole
engine). The reordered weights are a copy: while the engine lives, the model's linear
weights take twice their memory (`prepack="off"` where that matters more).

The copy is the engine's own: its forwards route the model's `nn.Linear`s through it
(`PackedLinears.routed`, like the paged attention), and the model itself is left as it
was, so plain `transformers` code on the same model (a baseline, `generate`) runs as
before.

Batch invariance (invariant.py): a row's output is the same whatever else is in the
product from two rows on (checked on the projections and output layer of SmolLM2 and
Qwen2.5's shapes, 2 to 600 rows, 1 and 2 threads); one row alone runs another kernel,
which the engine's MIN_ROWS padding never lets happen.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn

MODES = ("auto", "on", "off")
# the dtypes oneDNN's prepacked linear takes
DTYPES = (torch.float32, torch.bfloat16)
# the row count the weights are laid out for (oneDNN's hint; any count runs)
ROWS_HINT = 32


def enabled(mode: str | bool, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `prepack` (auto | on | off, or a bool) packs a model of `dtype` on `device`.
    auto: on the CPU, for float32 and bfloat16 weights, where this torch has oneDNN; on
    raises where it cannot."""
    if isinstance(mode, bool):
        mode = "on" if mode else "off"
    if mode not in MODES:
        raise ValueError(f"prepack={mode!r}: use auto, on or off")
    if mode == "off":
        return False
    usable = torch.device(device).type == "cpu" and dtype in DTYPES and available()
    if mode == "on" and not usable:
        raise ValueError(f"prepack=on: oneDNN prepacked linears run on the CPU for float32 and bfloat16 weights "
                         f"with a torch built with oneDNN, not {dtype} on {torch.device(device)}; use prepack=off")
    return usable


def packs(prepack: str | bool, compile: str | bool, device, dtype: torch.dtype) -> bool:
    """Whether an engine built with these `prepack` and `compile` settings packs a model of
    `dtype` on `device`. A compiled forward keeps torch's linears (inductor lays them out):
    prepack=on with it raises."""
    from ets.engine import compiled

    device = torch.device(device)
    if compiled.enabled(compile, device):
        if prepack in ("on", True):
            raise ValueError("prepack=on and compile=on: a compiled forward lays out its linears itself; "
                             "use prepack=auto or off")
        return False
    return enabled(prepack, device, dtype)


@functools.cache
def available() -> bool:
    """Whether this torch has oneDNN's prepacked linear, and it agrees with `nn.Linear`
    on a small product (a torch that moved or dropped the private ops: plain linears)."""
    ops = getattr(torch.ops, "mkldnn", None)
    try:
        if not torch.backends.mkldnn.is_available() or ops is None:
            return False
        gen = torch.Generator().manual_seed(0)
        weight, x = torch.randn(24, 40, generator=gen), torch.randn(16, 40, generator=gen)
        bias = torch.randn(24, generator=gen)
        return torch.allclose(_linear(x, _pack(weight), bias), nn.functional.linear(x, weight, bias), atol=1e-4)
    except (RuntimeError, AttributeError):
        return False


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)


def _linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinears:
    """Every `nn.Linear` of `model` with its weight reordered for oneDNN: exactly that
    class (quantized and other linears keep their own forward), and not one whose forward
    something already replaced on the module itself (accelerate's hooks do): that stays."""

    def __init__(self, model: nn.Module):
        self.layers = [(m, _pack(m.weight), None if m.bias is None else m.bias.detach())
                       for m in model.modules() if type(m) is nn.Linear and "forward" not in vars(m)]
        # each layer's attributes and its packed forward, made once: routing is then a dict
        # write a layer (through nn.Module's __setattr__ it was ~3 us a layer, every forward)
        self._routes = [(vars(m), functools.partial(_linear, packed=packed, bias=bias))
                        for m, packed, bias in self.layers]

    @contextlib.contextmanager
    def routed(self):
        """For the duration: each layer's forward multiplies with its packed weight."""
        for attrs, forward in self._routes:
            attrs["forward"] = forward
        try:
            yield
        finally:
            for attrs, _ in self._routes:
                del attrs["forward"]
