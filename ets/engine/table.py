"""Per-sequence slot rows: which pool slot holds token j of a running sequence.

Each running sequence owns one row; `rows[r, j]` is the slot of its token at position j,
for j < its computed length (entries beyond that are stale but always valid slot ids,
so a padded gather never reads out of bounds; the attention mask hides them).

    rows[r]: [ cached prefix slots | own computed slots | stale ...... ]
              0            prefix_len           kv_len          width

The table grows (rows and columns, doubling) on demand; nothing in it is KV memory.
"""

from __future__ import annotations

import torch


class SlotTable:
    def __init__(self, device: torch.device | str, rows: int = 64, width: int = 256):
        self.device = torch.device(device)
        self.rows = torch.zeros((rows, width), dtype=torch.long, device=self.device)
        self._free_rows = list(range(rows - 1, -1, -1))

    def acquire(self, length: int) -> int:
        """A free row able to hold `length` positions."""
        if not self._free_rows:
            old = self.rows.shape[0]
            self._grow(old * 2, self.rows.shape[1])
            self._free_rows = list(range(2 * old - 1, old - 1, -1))
        self.ensure_width(length)
        return self._free_rows.pop()

    def release(self, row: int) -> None:
        self._free_rows.append(row)

    def ensure_width(self, length: int) -> None:
        width = self.rows.shape[1]
        if length > width:
            while width < length:
                width *= 2
            self._grow(self.rows.shape[0], width)

    def gather(self, rows: torch.Tensor, width: int) -> torch.Tensor:
        """[len(rows), width]: the first `width` positions of these rows (on the CPU 4x
        faster than `self.rows[rows, :width]`, which indexes element by element).
        Each forward gathers its groups' rows this way."""
        return self.rows[:, :width].index_select(0, rows)

    def write(self, row: int, start: int, slots: torch.Tensor) -> None:
        self.rows[row, start:start + slots.numel()] = slots

    def write_many(self, rows: torch.Tensor, cols: torch.Tensor, slots: torch.Tensor) -> None:
        """rows[rows[i], cols[i]] = slots[i] for every i (one indexed write)."""
        self.rows.index_put_((rows, cols), slots)

    def _grow(self, n_rows: int, width: int) -> None:
        bigger = torch.zeros((n_rows, width), dtype=torch.long, device=self.device)
        bigger[: self.rows.shape[0], : self.rows.shape[1]] = self.rows
        self.rows = bigger
