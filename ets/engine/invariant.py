"""Batch invariance: a sequence's numbers do not depend on what else is in its forward.

Bit for bit, so a search's records depend on its problem and seed only, not on which
problems ran beside it, on `concurrency` or on the pool. Float sums round by the order
they run in, and kernels choose that order by the shape of the whole batch. What the
engine does about it, on the CPU (each rule found necessary by a test that failed
without it, tests/test_engine_batch_invariance.py):

- BLAS multiplies a matrix of fewer than ~16 rows another way (a batched matmul: of one
  row): every forward runs at least MIN_ROWS rows, and as many kept logits rows (the
  runner's padding rows, dropped); a prefill group's queries are at least two.
- A row's sums over keys are blocked by the row's length: keys (prefill, the cascade's
  prefix columns, the decode buffers' columns) are padded, masked, to a multiple of
  KEY_BLOCK, and the product of probabilities and values runs over fixed blocks of
  VALUE_BLOCK keys (`attend_values`), however many keys the batch's longest row has.
- Prefill attention is two batched matmuls on the CPU, not SDPA: SDPA splits queries into
  blocks sized by the batch's longest chunk (attention._attend_group).
- A decode step's attention is split where its own request's path ends, not where the
  cache happened to end, and it runs in the plain group (alone on its path) or the
  cascade group (with siblings) by its own request (scheduler._add_chunk, the runner).

Found equal bit for bit on this CPU with one thread, and with two for the small test
models. Not covered: several threads on larger models (BLAS may split a matmul's sums by
its size), GPU kernels (chosen by shape), sliding-window layers (their path follows the
batch's longest context), and KV recomputed after a preemption (prefill arithmetic instead
of decode). `Engine(batch_invariant=False)` drops the row padding (faster at a few
sequences).
"""

from __future__ import annotations

import torch

MIN_ROWS = 16
KEY_BLOCK = 16
VALUE_BLOCK = 256


def round_up(n: int, block: int) -> int:
    """n rounded up to a multiple of `block`."""
    return -(-n // block) * block


def attend_values(probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """probs [..., M, L] @ v [..., L, D], summed over blocks of VALUE_BLOCK keys in order:
    one matmul over all L keys blocks its sum by L, so a row's result would change with
    the padded length of the batch's longest row (its own masked keys add exact zeros)."""
    width = probs.shape[-1]
    if width <= VALUE_BLOCK:
        return torch.matmul(probs, v)
    out = torch.matmul(probs[..., :VALUE_BLOCK], v[..., :VALUE_BLOCK, :])
    for start in range(VALUE_BLOCK, width, VALUE_BLOCK):
        out += torch.matmul(probs[..., start:start + VALUE_BLOCK], v[..., start:start + VALUE_BLOCK, :])
    return out
