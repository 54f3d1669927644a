"""The last layer's hidden states a forward computes anyway, read where the model makes them.

A step embedding (`search.embedder: policy` or `prm`, lp/clustering.py) is the mean of a
model's final hidden states over a step's tokens, L2-normalised. The state read is the
output of the model's final norm: what its head (the LM head, a classification or value
head) reads. Every token is at one scale there, so the mean is not dominated by the few
residual-stream dimensions that grow large on some tokens before the norm.

`final_hidden(model)` hooks that norm for the forwards run inside it, so the states come
out of the forward the caller runs anyway (the engine's decode steps, a PRM's scoring
forward), with nothing recomputed and no change to what the forward returns.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, NamedTuple

import torch


class Pooling(NamedTuple):
    """Hidden states a forward adds to running sums (step embeddings): for each (chunk, lo,
    hi, slot) of `items`, the final hidden states of the chunk's tokens lo..hi-1 (offsets
    in the chunk) are added to row `slot` of `sums`. A decode run's step names them as
    tensors instead: chunks `chunks` add their one token's state to rows `slots`."""
    sums: torch.Tensor                        # [slots, hidden], float32, on the model's device
    items: list[tuple[int, int, int, int]]
    chunks: torch.Tensor | None = None
    slots: torch.Tensor | None = None


# Where decoder bodies keep their final norm: Llama, Qwen, Mistral, Gemma (norm); Phi
# (final_layernorm); GPT-2 and GPT-J (ln_f); Mamba-style (norm_f).
FINAL_NORM_NAMES = ("norm", "final_layernorm", "ln_f", "norm_f")


def final_norm(model) -> torch.nn.Module | None:
    """The final norm of `model`'s body (a causal LM, a classifier, a bare body, or a
    wrapper that keeps its body as `body`); None when there is none to find."""
    seen = set()
    for part in (getattr(model, "base_model", None), getattr(getattr(model, "body", None), "base_model", None),
                 getattr(model, "body", None), model):
        if part is None or id(part) in seen:
            continue
        seen.add(id(part))
        for name in FINAL_NORM_NAMES:
            norm = getattr(part, name, None)
            if isinstance(norm, torch.nn.Module):
                return norm
    return None


def model_name(model) -> str:
    return getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__


@contextlib.contextmanager
def final_hidden(model, keep: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Iterator[list[torch.Tensor]]:
    """A list that receives, for every forward of `model` run inside the block, its final
    hidden states ([batch, tokens, hidden]), or `keep` of them (e.g. the last position
    only, so that a long prompt's states are not held). Raises ValueError when the model
    has no final norm to read (`final_norm`)."""
    norm = final_norm(model)
    if norm is None:
        raise ValueError(f"the model ({model_name(model)}) has no final norm to read its hidden states from")
    captured: list[torch.Tensor] = []

    def hook(module, inputs, output):
        out = output[0] if isinstance(output, tuple) else output
        captured.append(out if keep is None else keep(out))

    handle = norm.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


def unit_rows(sums: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Each row of `sums` divided by its count (a mean) and L2-normalised; float32. A row
    with no count stays zero."""
    means = sums.float() / counts.clamp(min=1).to(sums.device, torch.float32)[:, None]
    return torch.nn.functional.normalize(means, dim=-1)
