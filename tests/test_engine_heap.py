"""freeze_loaded: what exists is frozen out of the cycle collector's way, what comes later
is still collected; keep_freed_memory: the C heap reuses what a step frees."""

import gc
import os
import subprocess
import sys
import weakref

import pytest

from ets.engine import freeze_loaded, frozen_loaded


class _Node:
    pass


def test_freeze_loaded_freezes_what_exists_and_later_cycles_are_still_collected():
    try:
        freeze_loaded()
        assert gc.get_freeze_count() > 0
        # a cycle made after the freeze is garbage the collector still finds
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()  # the rest of the test session as it was


def test_frozen_loaded_frees_cycles_made_before_it_once_the_block_ends():
    """A run's models sit in reference cycles; frozen for the search, they must be
    collectable after it, or a process running one search after another keeps them all."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a "model" that lives in a cycle, loaded before the search
    gone = weakref.ref(a)
    with frozen_loaded():
        assert gc.get_freeze_count() > 0
        del a, b
        gc.collect()
        assert gone() is not None  # frozen: the collector leaves it alone during the search
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None


_FAULTS = """
import resource, sys, torch
from ets.engine.heap import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def steps(n):  # a step's large tensor (64 MiB of float32) and a small one, made, touched and freed
    for i in range(n):
        big, small = torch.ones(64 << 18), torch.ones((1 + i % 3) << 18)
        del big, small
steps(8)  # the heap settles
before = faults()
steps(4)
print(applied, faults() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_kept_memory_serves_the_next_large_tensor_without_page_faults():
    """A step's large tensors (logits, sampling's copies) are made and freed every step: with
    `keep_freed_memory` the next one reuses the heap's pages instead of faulting in new
    ones (16,384 pages of 4 KiB for 64 MiB, four times). Each case in a process of its own: the setting
    is the process's."""
    def run(mode, env=None):
        out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True,
                             env={**os.environ, **(env or {})}).stdout.split()
        return out[0] == "True", int(out[1])

    applied, kept = run("keep")
    assert applied and kept < 1000
    _, mapped = run("default")
    assert mapped > 10_000
    # the environment's own malloc settings stand, and the opt-out
    for env in ({"MALLOC_MMAP_MAX_": "65536"}, {"ETS_KEEP_FREED_MEMORY": "0"}):
        applied, _ = run("keep", env)
        assert not applied, env
