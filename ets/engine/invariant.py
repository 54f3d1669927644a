"""Batch invariance: a sequence's numbers do not depend on what else is in its forward.

Bit for bit, so a search's records depend on its problem and seed only, not on which
problems ran beside it, on `concurrency` or on the pool. Float sums round by the order
they run in, and kernels choose that order by the shape of the whole batch. What the
engine does about it, on the CPU (each rule found necessary by a test that failed
without it, tests/test_engine_batch_invariance.py):

- BLAS multiplies a matrix of fewer than ~16 rows another way: every forward runs at
  least MIN_ROWS rows, and as many kept logits rows (the runner's padding rows, dropped).
  A batched matmul (attention's products, per sequence or per cluster) computes a row the
  same way from some row count on, which `product_rows` measures on the machine (two
  rows were assumed on the AVX-512 CPU, with test models of two query heads per K/V head,
  which never made fewer; MKL on an AVX2 CPU needs 4, and a model whose query heads each
  have their own K/V, e.g. the demo's, scored its last 1-3 tokens alone, or decoded a
  cluster of 2 samples, otherwise than among more): a prefill block has at least that many query
  rows (padded when the chunk is shorter) and the cascade's clusters that many samples'
  rows (padded). The products that always take the same rows (plain decode, the
  cascade's own columns: a sequence's query heads) need no padding.
- A row's sums over keys are blocked by the row's length: keys (prefill, the cascade's
  prefix columns, the decode buffers' columns) are padded, masked, to a multiple of
  KEY_BLOCK, and the product of probabilities and values runs over fixed blocks of keys
  (`attend_values`), however many keys the batch's longest row has. How wide a block may
  be is the BLAS's business: within a block a row's padded keys must add exact zeros at
  the end of the same sum, which holds only up to the width at which the kernel splits a
  sum in two. On the AVX-512 CPU these rules were found on, blocks of 256 keys passed;
  on an AVX2 one (an AMD EPYC) MKL splits a sum at 128 keys for products of 4 rows or
  more, so a block of 256 gave a row another rounding beside a longer row (9 tests
  failed there). `value_block` measures it on the machine, once.
- Prefill attention is two batched matmuls on the CPU, not SDPA: SDPA splits queries into
  blocks sized by the batch's longest chunk (attention._attend_group).
- A decode step's attention is split where its own request's path ends, not where the
  cache happened to end, and it runs in the plain group (alone on its path) or the
  cascade group (with siblings) by its own request (scheduler._add_chunk, the runner).

Found equal bit for bit with one thread, and with two for the small test models, on an
AVX-512 and an AVX2 CPU (MKL). Not covered: several threads on larger models (BLAS may
split a matmul's sums by its size), GPU kernels (chosen by shape), sliding-window layers
(their path follows the batch's longest context), and KV recomputed after a preemption
(prefill arithmetic instead of decode). `Engine(batch_invariant=False)` drops the row padding (faster at a few
sequences).
"""

from __future__ import annotations

import functools

import torch

MIN_ROWS = 16
KEY_BLOCK = 16
# the widest value block tried (wider blocks, fewer matmuls: each one costs a call)
VALUE_BLOCK = 256


def round_up(n: int, block: int) -> int:
    """n rounded up to a multiple of `block`."""
    return -(-n // block) * block


def attend_values(probs: torch.Tensor, v: torch.Tensor, fixed_rows: bool = False) -> torch.Tensor:
    """probs [..., M, L] @ v [..., L, D], summed over blocks of `value_block` keys in order:
    one matmul over all L keys blocks its sum by L, so a row's result would change with
    the padded length of the batch's longest row (its own masked keys add exact zeros).
    `fixed_rows`: these sequences' rows are always multiplied M at a time (plain decode:
    the query heads of a kv head), so the block need only hold for M rows."""
    width = probs.shape[-1]
    rows = probs.shape[-2] if fixed_rows else None
    block = value_block(v.dtype, v.shape[-1], rows) if v.device.type == "cpu" else VALUE_BLOCK
    if width <= block:
        return torch.matmul(probs, v)
    out = torch.matmul(probs[..., :block], v[..., :block, :])
    for start in range(block, width, block):
        out += torch.matmul(probs[..., start:start + block], v[..., start:start + block, :])
    return out


def value_block(dtype: torch.dtype, dim: int, rows: int | None = None) -> int:
    """The widest block of keys (VALUE_BLOCK, halved down to KEY_BLOCK) within which this
    CPU's matmul sums a row of probabilities times values the same way whether the row
    ends at the block's end or earlier, its padding zero: measured on products of `rows`
    rows (None: of 1 to 16), for this dtype, head size `dim` and torch's thread count,
    once each. (MKL on an AVX2 CPU: 256 for one or two rows, 128 from four.)"""
    return _value_block(dtype, dim, torch.get_num_threads(), rows)


@functools.cache
def _value_block(dtype: torch.dtype, dim: int, threads: int, rows: int | None) -> int:
    gen = torch.Generator().manual_seed(0)
    block = VALUE_BLOCK
    while block > KEY_BLOCK and not all(_pads_exactly(block, m, keys, dim, dtype, gen)
                                        for m in ((1, 2, 4, 16) if rows is None else (rows,))
                                        for keys in (KEY_BLOCK, block // 2 + KEY_BLOCK, block - KEY_BLOCK)):
        block //= 2
    return block


def product_rows(dtype: torch.dtype, dim: int) -> int:
    """The fewest rows (a power of two, at most 32) from which this CPU's batched matmul gives each
    row the same result whatever the number of rows: measured on the shapes of attention's
    products (queries of head size `dim` against keys, probabilities against values), for
    this dtype and torch's thread count, once each."""
    return _product_rows(dtype, dim, torch.get_num_threads())


def least_per_product(dtype: torch.dtype, dim: int, rep: int) -> int:
    """How many queries (prefill) or samples (a cascade cluster) a product takes at least,
    each being `rep` rows (the query heads of a K/V head): product_rows, in those units."""
    return round_up(product_rows(dtype, dim), rep) // rep


@functools.cache
def _product_rows(dtype: torch.dtype, dim: int, threads: int) -> int:
    gen = torch.Generator().manual_seed(0)
    shapes = [(dim, n) for n in (KEY_BLOCK, 3 * KEY_BLOCK, 304)] + [(k, dim) for k in (KEY_BLOCK, 48, 128, VALUE_BLOCK)]
    unequal = 0  # the most rows found to compute a row otherwise than 64 rows do
    for inner, outer in shapes:
        a = torch.randn(3, 64, inner, generator=gen).to(dtype)
        b = torch.randn(3, inner, outer, generator=gen).to(dtype)
        full = torch.matmul(a, b)[:, :1]
        for rows in range(1, 17):
            if not torch.equal(torch.matmul(a[:, :rows], b)[:, :1], full):
                unequal = max(unequal, rows)
    return next(r for r in (1, 2, 4, 8, 16, 32) if r > unequal)


def _pads_exactly(block: int, rows: int, keys: int, dim: int, dtype: torch.dtype, gen: torch.Generator) -> bool:
    """A product over `keys` keys equals the same product padded to `block` keys (zero
    probabilities, values that are not zero), bit for bit."""
    probs = torch.rand(4, rows, block, generator=gen)
    probs[..., keys:] = 0
    values = torch.randn(4, block, dim, generator=gen)
    probs, values = probs.to(dtype), values.to(dtype)
    return torch.equal(torch.matmul(probs[..., :keys], values[:, :keys]), torch.matmul(probs, values))
