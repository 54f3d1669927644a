"""The KV pool: preallocated key/value tensors, one pair per layer, indexed by slot.

A *slot* holds one token's keys and values for every layer. The pool only stores; it
does not know which slots are in use (the allocator does) nor what they mean (the radix
tree and the running sequences do). Its size is the engine's whole KV memory budget:
nothing else allocates KV.

    k[layer]: [num_kv_heads, num_slots, head_dim]   (v[layer] the same)

Heads first: a gather of slots along dim 1 gives [Hkv, B, L, D], already batched by kv head
for the attention matmuls (no permute copy), and K^T is a free transposed view.

K/V may be stored narrower than the model computes (`kv_dtype`, e.g. bfloat16 under a
float32 model): half the bytes per token, so twice the tokens in the same memory, and
decode attention, which at large batches is bound by reading K/V, reads half as much.
Decode attention then multiplies in that dtype (queries rounded to it, softmax in float32;
small CPU buffers are widened first, see `operands`), so the logits move by about
bfloat16's precision: an option, not the default.
"""

from __future__ import annotations

import math
import mmap

import torch

KV_DTYPES = ("float32", "bfloat16", "float16")


def kv_storage_dtype(kv_dtype: str | torch.dtype | None, model_dtype: torch.dtype) -> torch.dtype:
    """The pool's dtype: `kv_dtype` (a name in KV_DTYPES or a torch dtype), None: the model's."""
    if kv_dtype is None:
        return model_dtype
    name = str(kv_dtype).removeprefix("torch.")
    if name not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)} (or None: the model's dtype), "
                         f"got {kv_dtype!r}")
    return getattr(torch, name)


# Below this many elements, a K (or V) buffer stored narrower than the queries is widened
# before the decode matmuls, on the CPU: there a bfloat16 matmul pays a fixed ~40 us per
# call that a float32 one does not (a buffer of 4 x 160 x 32, both matmuls: 54 us narrow,
# 18 us widened; even at ~160K elements; from 330K narrow wins, as reading half the bytes
# is what large batches are bound by).
NARROW_MIN_ELEMENTS = 1 << 17


def operands(k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V as decode attention multiplies them: in their stored dtype, or widened to
    `dtype` (the queries') when they are small CPU buffers (see NARROW_MIN_ELEMENTS). The
    scores and probabilities then take the operands' dtype, the softmax float32."""
    if k.dtype == dtype or k.device.type != "cpu" or k.numel() >= NARROW_MIN_ELEMENTS:
        return k, v
    return k.to(dtype), v.to(dtype)


def lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """torch.zeros, but on the CPU from fresh anonymous memory (`anonymous_zeros`): its
    pages are zeroed by the kernel when first touched, so a pool costs no time to create and
    takes memory as tokens are written into it. torch.zeros writes every byte at once: for
    the demo's two 262,144-token pools, 2.6 GB and 2-4 s per run, most of it pages never used.
    Masked columns read stale or unwritten slots, so they must hold finite values (zeros),
    not whatever memory held before (a NaN there would reach the output through 0 * NaN)."""
    if torch.device(device).type != "cpu" or not hasattr(mmap, "MAP_PRIVATE"):  # (Windows: at once)
        return torch.zeros(shape, dtype=dtype, device=device)
    # bytes, then viewed as `dtype`: all-zero bytes are 0.0 in every float format
    return anonymous_zeros(math.prod(shape) * dtype.itemsize).view(dtype).view(shape)


def anonymous_zeros(nbytes: int) -> torch.Tensor:
    """`nbytes` zero bytes (uint8) of private anonymous memory (mmap: whole pages, so it
    starts on a cache line, as torch's own allocator's blocks do), in the kernel's ordinary
    4 KB pages.

    Not numpy's zeros (calloc), which the pool was before: numpy advises its large blocks as
    transparent huge pages, and a pool is touched sparsely, a token's K and V a 128-byte row
    per layer and kv head, each in its own region, so its first writes took a 2 MB page each,
    zeroed (and compacted for) on the spot: on an AVX-512 Xeon VM 2.4 ms per huge page
    against 0.7 us per small one, and the demo's `ets run` (rebase, W=8, 10 problems)
    searched in 8.2-8.6 s with them against 7.5-7.6 s in small pages, records identical.
    Private: a shared anonymous mapping would be written by a forked child as by its parent."""
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # small pages also where huge ones are the default
        region.madvise(mmap.MADV_NOHUGEPAGE)
    return torch.frombuffer(region, dtype=torch.uint8)  # keeps `region` mapped while it lives


class PoolTooLarge(ValueError):
    """The pool asked for is larger than the memory this machine has available."""


def available_bytes() -> int | None:
    """The memory the kernel says it can still give (MemAvailable, Linux); None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def model_kv_shape(config) -> tuple[int, int, int]:
    """(layers, kv heads, head dim) of a `transformers` decoder config (the text config of
    composite models)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers, kv_heads, head_dim


class KVPool:
    def __init__(self, num_layers: int, num_slots: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        if num_slots < 1:
            raise ValueError(f"kv_budget_tokens must be >= 1, got {num_slots}")
        # keys + values, every layer, for one token
        self.bytes_per_token = 2 * num_layers * num_kv_heads * head_dim * dtype.itemsize
        if torch.device(device).type == "cpu":
            # The pool's pages are taken as it fills (lazy_zeros): a pool the machine cannot
            # hold would fail only when full, killed mid-run. Refused here instead.
            free = available_bytes()
            need = (num_slots + 1) * self.bytes_per_token
            if free is not None and need > free:
                raise PoolTooLarge(
                    f"a KV pool of {num_slots:,} tokens takes {need / 2**30:.1f} GiB and this machine has "
                    f"{free / 2**30:.1f} GiB available; lower kv_budget_tokens (here at most about "
                    f"{free // self.bytes_per_token:,} tokens)")
        # One slot more than the budget: `scratch_slot`, never handed out, where the runner's
        # padding rows (invariant.MIN_ROWS) write K/V nothing reads.
        shape = (num_kv_heads, num_slots + 1, head_dim)
        self.k = [lazy_zeros(shape, dtype, device) for _ in range(num_layers)]
        self.v = [lazy_zeros(shape, dtype, device) for _ in range(num_layers)]
        self.num_slots = num_slots
        self.scratch_slot = num_slots
        self.device = torch.device(device)

    @classmethod
    def for_model(cls, config, num_slots: int, dtype: torch.dtype, device) -> "KVPool":
        """A pool shaped for a `transformers` decoder config (text config of composite models)."""
        layers, kv_heads, head_dim = model_kv_shape(config)
        return cls(layers, num_slots, kv_heads, head_dim, dtype, device)

    @staticmethod
    def bytes_per_token_for(config, dtype: torch.dtype) -> int:
        """The bytes a token takes in a pool for this config (K and V, every layer)."""
        layers, kv_heads, head_dim = model_kv_shape(config)
        return 2 * layers * kv_heads * head_dim * dtype.itemsize

    @property
    def num_bytes(self) -> int:
        return self.num_slots * self.bytes_per_token
