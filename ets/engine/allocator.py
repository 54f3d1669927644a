"""Free-slot bookkeeping for the KV pool: a stack of free slot ids on the pool's device.

Invariant: `free_slots()` holds each free slot exactly once; a slot handed out by
`alloc` is owned by its caller until given back with `free`. The allocator never looks
into the pool and never evicts: the scheduler asks the radix tree to evict first.

    _stack: [ free ids ... | stale ... ]
              0        n_free      num_slots      (alloc takes from the top, n_free down)

Slots come back sorted within each `free` (lowest on top), so the next `alloc` hands out
neighbours: a new pool is handed out in order, and so is whatever one eviction or one
`evict()` freed. Why it matters: each new token's K and V are written to its slot in
every layer, and scattered slots (the order in which evicted leaves come back) made those
writes, one cache line per kv head on another page each, 2-4x slower. Sorting what one
call frees costs O(k log k) for its k slots, never a pass over the whole free stack.
"""

from __future__ import annotations

import torch


class SlotAllocator:
    def __init__(self, num_slots: int, device: torch.device | str):
        self.num_slots = num_slots
        # Reversed so that alloc() hands out low ids first (nicer to read in tests).
        self._stack = torch.arange(num_slots - 1, -1, -1, dtype=torch.long, device=device)
        self.n_free = num_slots

    def alloc(self, n: int) -> torch.Tensor:
        """`n` slot ids (int64, on the pool device). Asking for more than `n_free` is a
        caller bug (the scheduler evicts or preempts first)."""
        assert n <= self.n_free, f"asked for {n} KV slots, {self.n_free} free"
        self.n_free -= n
        return self._stack[self.n_free:self.n_free + n].flip(0).clone()

    def free(self, slots: torch.Tensor) -> None:
        n = slots.numel()
        if n == 0:
            return
        assert self.n_free + n <= self.num_slots, "freed more slots than the pool has"
        self._stack[self.n_free:self.n_free + n] = torch.sort(slots.reshape(-1), descending=True).values
        self.n_free += n

    def free_slots(self) -> torch.Tensor:
        return self._stack[: self.n_free]

    @property
    def n_used(self) -> int:
        return self.num_slots - self.n_free
