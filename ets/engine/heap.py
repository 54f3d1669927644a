"""The process's heaps during a search: Python's cycle collector kept off the objects a
process loads once, and the C heap kept from handing freed memory back to the kernel.

A decode step allocates a few Python objects per sequence (its chunk, lists, tensor
views), so the collector runs every few steps, and each of its full passes walks every
tracked object. After importing torch and transformers and loading a tokenizer a process
holds about 400,000, none of which will ever be garbage: at 512 sequences those passes
took about a sixth of a decode. Frozen (`gc.freeze`), they are never walked again, while
everything made later is collected as usual.

Measured here (demo policy, 1 thread, 512 distinct contexts decoding 65 tokens, two runs
each): 4.86 / 4.99 s as the collector is, 3.96 / 4.30 s with the startup objects frozen,
3.99 / 4.14 s with the collector off.

A step also makes tensors of tens of megabytes and frees them at its end: the logits of
the sampled rows (128 rows of a 49,152-word vocabulary: 25 MB), sampling's float64
copies, attention's scores. glibc's malloc maps each block over its mmap threshold (32 MB
at most) from the kernel anew and unmaps it when freed, so every step pays a page fault
on each of its pages (a float64 cumsum of [128, 49152]: 25 ms, 3 ms in reused memory).
`keep_freed_memory` has glibc serve every block from its heap and keep what is freed for
the next step (docs/results.md has what it bought).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import os
from collections.abc import Iterator

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
# the free memory at the heap's top that glibc still gives back, once there is this much
TRIM_BYTES = 1 << 30
# the environment's own malloc settings: where any is set, the user's choice stands
MALLOC_ENV = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
# ETS_KEEP_FREED_MEMORY=0: glibc's malloc as it is (e.g. to measure the difference: scripts/bench_threads.py --heaps)
OPT_OUT = "ETS_KEEP_FREED_MEMORY"


def freeze_loaded() -> None:
    """Collect what is garbage now, then move every object that survives to the collector's
    permanent generation, where it is never scanned again; and `keep_freed_memory`. Call
    once the models are loaded, before the search; it changes no result. Cyclic garbage
    among those objects is never freed afterwards: for a search that ends before the
    process does, use `frozen_loaded`."""
    gc.collect()
    gc.freeze()
    keep_freed_memory()


@functools.cache
def keep_freed_memory() -> bool:
    """Have glibc's malloc serve large blocks from its heap, not fresh mappings, and keep
    freed memory for reuse (returning the heap's top only past TRIM_BYTES free); for the
    rest of the process. Whether it applied: not where the C library is not glibc, nor
    where the environment sets malloc's parameters itself (MALLOC_ENV) or OPT_OUT is 0. The KV pools are
    mappings of their own (pool.anonymous_zeros), untouched by this."""
    if any(name in os.environ for name in MALLOC_ENV) or os.environ.get(OPT_OUT) == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt, Windows)
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES))


@contextlib.contextmanager
def frozen_loaded() -> Iterator[None]:
    """`freeze_loaded` for the length of a block, then everything back under the collector.

    A process that runs one search after another (a sweep's worker, a notebook) must not
    keep the frozen objects frozen: the last run's models and KV pools sit in reference
    cycles, and frozen cycles are never freed. Measured: a sweep worker kept every run's
    ~2 GB of pools and grew to 11-12 GB on its third 200-problem W=64 run. (`gc.unfreeze`
    also releases what a caller froze before; it is collected again as usual.)"""
    freeze_loaded()
    try:
        yield
    finally:
        gc.unfreeze()
