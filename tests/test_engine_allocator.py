"""The slot allocator hands out slots freed together side by side, lowest first."""

import torch

from ets.engine.allocator import SlotAllocator


def test_slots_freed_together_come_back_in_order():
    alloc = SlotAllocator(16, "cpu")
    assert alloc.alloc(4).tolist() == [0, 1, 2, 3]
    taken = alloc.alloc(10)                                   # 4..13
    alloc.free(taken[torch.tensor([7, 2, 9, 0, 5])])          # 11, 6, 13, 4, 9 come back scattered
    assert alloc.n_free == 7
    assert alloc.alloc(3).tolist() == [4, 6, 9]               # in order, whatever order they were freed in
    assert alloc.alloc(4).tolist() == [11, 13, 14, 15]
    assert alloc.n_free == 0
    alloc.free(torch.tensor([15, 0, 7]))
    free = sorted(alloc.free_slots().tolist())
    assert free == [0, 7, 15]                                  # each free slot exactly once
    assert alloc.alloc(3).tolist() == [0, 7, 15]
