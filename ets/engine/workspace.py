"""Reused gather buffers: attention reads the pool into memory it already owns.

Attention needs each sequence's context contiguous ([Hkv, B, L, D]) for its matmuls. A
fresh tensor per layer per forward was the engine's main cost at large batches: every
large output is freshly page-faulted (at 512 sequences the gather ran at a third of the
speed of the same copy into a reused buffer). Two kinds of buffer, both only scratch (KV
lives in the pool; nothing here is accounted as cache):

- `Workspace`: flat buffers by name, grown on demand and reused by every layer of every
  forward (prefill groups: gathered fresh per layer, into the same memory);
- `DecodeKV`: per layer, the gathered contexts of the decode group, *kept across
  forwards*. While the group is the same sequences (by their admission `uid`), each one
  step further, a forward only writes each sequence's one new token into its column:

      layer l, row b:  [ context of b, gathered at the last rebuild | new | new | .. headroom ]
                         0                                   start_b at rebuild      cap

  When sequences leave (finish), the survivors' rows are compacted (a contiguous copy);
  when a row runs past its headroom, a group split in regions (the cascade's shared
  prefixes | own columns) gathers its own columns anew, wider, and keeps its prefixes
  (they did not change, and they are most of what it holds); any other change (a
  sequence joined or was preempted) rebuilds: one gather per layer, into the kept memory.
  The kept copy is valid because a running sequence's context slots never change: its
  prefix is locked and its own slots are its alone until it finishes.
  The cascade's prefix keys are kept transposed, [Hkv, C, D, cols] (TRANSPOSED_KEYS): the
  scores' matmul then reads a contiguous right operand, 1.75x faster on the CPU than the
  transposed view of [.., cols, D] (a tree step's largest operand). Only regions that no
  step writes: a new token's key in that layout is a column, one cache line per element
  (7x the cost of writing a row), which ate the whole gain where tried on the own columns.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

# decode steps a rebuild leaves room for before the next one, at least (the runner rounds
# the columns up to invariant.KEY_BLOCK)
HEADROOM = 8

# regions whose keys are kept transposed (see the module doc): gathered on a rebuild only
TRANSPOSED_KEYS = ("pre",)


class Reuse(NamedTuple):
    """The kept buffers serve this forward; `keep`: the old rows (and `keep_clusters`:
    the old prefix rows) that survive, in order, when some sequences left (else None);
    `grow`: the same sequences one step further, past the buffers' columns (only the
    regions that grow, the own columns, need gathering anew, wider)."""
    keep: list[int] | None
    keep_clusters: list[int] | None
    old_rows: int
    old_clusters: int
    grow: bool = False


def _transposed(name: str, kv: str) -> bool:
    return kv == "k" and name in TRANSPOSED_KEYS


def _layout(name: str, kv: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The buffer shape of `shape` [Hkv, R, cols, D]: TRANSPOSED_KEYS' keys [Hkv, R, D, cols]."""
    return (*shape[:2], shape[3], shape[2]) if _transposed(name, kv) else shape


class Workspace:
    """Flat scratch tensors by name; `get` returns a contiguous view of the asked shape."""

    def __init__(self, dtype: torch.dtype, device):
        self.dtype, self.device = dtype, device
        self._bufs: dict[object, torch.Tensor] = {}

    def get(self, name, shape: tuple[int, ...]) -> torch.Tensor:
        n = 1
        for s in shape:
            n *= s
        buf = self._bufs.get(name)
        if buf is None or buf.numel() < n:
            buf = self._bufs[name] = torch.empty(max(n, int(1.25 * (0 if buf is None else buf.numel()))),
                                                 dtype=self.dtype, device=self.device)
        return buf[:n].view(shape)


class DecodeKV:
    """The decode group's gathered K/V per layer, kept while the group stays the same.

    `plan(uids, starts, fits)` is called once per forward: True (fresh) when every layer
    must gather again, False when it only writes the new tokens. Above `limit_bytes` the
    buffers are not kept per layer (one set, shared by every layer, gathered fresh each
    time), so this never costs more than that much memory beyond the pool (and one region's
    keys of one layer again: the staging of their transpose on a rebuild).

    `grows`: its rows are regions of which only the last one grows (the cascade's
    prefixes | own columns), so past `cap` that region alone is gathered anew; else (the
    plain group: a row is one whole context) running past `cap` rebuilds."""

    def __init__(self, num_layers: int, dtype: torch.dtype, device, limit_bytes: int, grows: bool = False):
        self.num_layers = num_layers
        self.grows = grows
        self.limit_bytes = limit_bytes
        self.element = torch.empty((), dtype=dtype).element_size()
        self.ws = Workspace(dtype, device)
        self.uids: tuple[int, ...] | None = None
        self.starts: list[int] = []
        self.mode: object = None
        self.mode_prev: object = None
        self.clusters: tuple[int, ...] = ()
        self.cap = 0
        self.pre_cols = 0   # the prefix region's columns at the last forward (cascade)
        self.kept = False

    def plan(self, uids: tuple[int, ...], starts: list[int], mode: object, need: int,
             clusters: tuple[int, ...] = ()) -> "Reuse | None":
        """How this forward may use the kept buffers; None: rebuild (gather afresh).

        They are reusable when the group is the last forward's sequences (`uids`, in the
        same `mode`), each one position further: within the buffers' `cap` columns, or
        past them where only the last region grows (`grow`: the caller gathers it anew,
        wider); and also when some
        sequences left (finished), within `cap`: the survivors' rows (and the surviving
        `clusters`' prefix rows) are compacted in place of a gather. The caller sets `cap`
        on a rebuild or a growth."""
        old_uids, old_starts, old_clusters = self.uids, self.starts, self.clusters
        self.uids, self.starts, self.mode_prev, self.clusters = uids, starts, self.mode, clusters
        self.mode = mode
        if not (self.kept and old_uids is not None and mode == self.mode_prev):
            return None
        if uids == old_uids:
            if all(s == p + 1 for s, p in zip(starts, old_starts)) and (need <= self.cap or self.grows):
                return Reuse(None, None, len(uids), len(clusters), grow=need > self.cap)
            return None
        if need > self.cap:
            return None
        where = {u: i for i, u in enumerate(old_uids)}
        keep = [where.get(u, -1) for u in uids]
        if min(keep) < 0 or keep != sorted(keep) or any(s != old_starts[i] + 1 for s, i in zip(starts, keep)):
            return None  # someone joined, or the order changed
        cwhere = {c: i for i, c in enumerate(old_clusters)}
        ckeep = [cwhere.get(c, -1) for c in clusters]
        if clusters and (min(ckeep) < 0 or ckeep != sorted(ckeep)):
            return None
        return Reuse(keep, ckeep, len(old_uids), len(old_clusters))

    def compact(self, name: str, layer, old_shape: tuple[int, ...], new_shape: tuple[int, ...],
                keep: torch.Tensor) -> None:
        """Rows `keep` of region `name`'s buffers ([Hkv, R_old, cols_old, D] as `buffers`
        takes shapes) become its rows 0.. [Hkv, R_new, cols_new <= cols_old, D] (through a
        scratch copy: they overlap)."""
        cols = new_shape[2]
        for kv in ("k", "v"):
            old = self.ws.get((name, kv, layer), _layout(name, kv, old_shape))
            tmp = self.ws.get("compact", (old_shape[0], len(keep), *old.shape[2:]))
            torch.index_select(old, 1, keep, out=tmp)
            new = self.ws.get((name, kv, layer), _layout(name, kv, new_shape))
            new.copy_(tmp[..., :cols] if _transposed(name, kv) else tmp[:, :, :cols])

    def buffers(self, name: str, layer, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V buffers of region `name` for `layer`, for `shape` [Hkv, R, cols, D] (the
        keys of TRANSPOSED_KEYS [Hkv, R, D, cols])."""
        return self.ws.get((name, "k", layer), _layout(name, "k", shape)), self.ws.get((name, "v", layer), shape)

    def scratch(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A scratch tensor of this shape (a gather's staging before the keys' transpose)."""
        return self.ws.get("staging", shape)

    def limit_elements(self, slack: int = 0) -> int:
        """The elements per layer, K or V, that buffers kept per layer may hold (`slack`:
        as `keep`)."""
        return self.limit_bytes // (2 * self.num_layers * self.element) + slack

    def keep(self, numel_per_layer: int, slack: int = 0) -> bool:
        """Whether buffers of this size (elements per layer, K or V, every region) are
        kept per layer; called on a rebuild. False: every layer shares layer 0's buffers.
        `slack`: elements per layer allowed beyond the limit (the columns by which the
        caller rounds each row up: a group whose contexts fill the pool still fits)."""
        self.kept = numel_per_layer <= self.limit_elements(slack)
        if not self.kept:
            self.uids = None  # nothing survives this forward
        return self.kept
