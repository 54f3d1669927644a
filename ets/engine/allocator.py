"""Free-slot bookkeeping for the KV pool: a stack of free slot ids on the pool's device.

Invariant: `free_slots()` holds each free slot exactly once; a slot handed out by
`alloc` is owned by its caller until given back with `free`. The allocator never looks
into the pool and never evicts: the scheduler asks the radix tree to evict first.

    _stack: [ free ids, highest first ... lowest | stale ... ]
              0                              n_free      num_slots

`alloc` hands out the lowest free ids, so slots taken together are neighbours in the pool
wherever the free space allows. Freed slots come back in any order (evicted leaves, a
finished sequence's duplicates); the stack is sorted again at the next `alloc` after a
`free`, which in steady decode (allocations only) never happens. Why it matters: each
new token's K and V are written to its slot in every layer, and scattered slots made
those writes (one cache line per kv head, each on another page) 2-4x slower than
neighbouring ones.
"""

from __future__ import annotations

import torch


class SlotAllocator:
    def __init__(self, num_slots: int, device: torch.device | str):
        self.num_slots = num_slots
        # Reversed so that alloc() hands out low ids first (nicer to read in tests).
        self._stack = torch.arange(num_slots - 1, -1, -1, dtype=torch.long, device=device)
        self.n_free = num_slots
        self._sorted = True  # the free ids are in descending order (the lowest on top)

    def alloc(self, n: int) -> torch.Tensor:
        """`n` slot ids (int64, on the pool device). Asking for more than `n_free` is a
        caller bug (the scheduler evicts or preempts first)."""
        assert n <= self.n_free, f"asked for {n} KV slots, {self.n_free} free"
        if not self._sorted:
            free = self._stack[: self.n_free]
            free.copy_(torch.sort(free, descending=True).values)
            self._sorted = True
        self.n_free -= n
        return self._stack[self.n_free:self.n_free + n].flip(0).clone()

    def free(self, slots: torch.Tensor) -> None:
        n = slots.numel()
        if n == 0:
            return
        assert self.n_free + n <= self.num_slots, "freed more slots than the pool has"
        self._stack[self.n_free:self.n_free + n] = slots.flip(0)
        self.n_free += n
        self._sorted = False

    def free_slots(self) -> torch.Tensor:
        return self._stack[: self.n_free]

    @property
    def n_used(self) -> int:
        return self.num_slots - self.n_free
