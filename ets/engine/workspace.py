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
- `DecodeGroups`: the decode sequences of one kind (plain or cascade) are cut into a few
  groups of like shapes (ets/engine/groups.py), each a `DecodeKV`; their buffers lie side
  by side in one arena per region, layer and K/V, laid out on a rebuild:

      arena ("ctx", "k", layer l):  [ group 0: B0 x cap0 | group 1: B1 x cap1 | .. ]

  so the groups together hold no more than one group of the kind would have.
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

    def get(self, name, shape: tuple[int, ...], offset: int = 0, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A view of this shape at element `offset` of the buffer `name` (grown if it is too
        small: what it held is then lost, see `reserve`); in `dtype` if given (a buffer of
        its own: attention's scores are in the queries' dtype, not the KV's)."""
        n = 1
        for s in shape:
            n *= s
        buf = self.reserve(name if dtype in (None, self.dtype) else (name, dtype), offset + n, dtype)
        return buf[offset:offset + n].view(shape)

    def capacity(self, name) -> int:
        """Elements the buffer `name` holds now (0: none yet): views up to this many are
        handed out without growing it."""
        buf = self._bufs.get(name)
        return 0 if buf is None else buf.numel()

    def reserve(self, name, numel: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The buffer `name`, holding at least `numel` elements: grown (a new tensor, by a
        quarter more at least) before views into it are handed out, never in between."""
        buf = self._bufs.get(name)
        if buf is None or buf.numel() < numel:
            buf = self._bufs[name] = torch.empty(max(numel, int(1.25 * (0 if buf is None else buf.numel()))),
                                                 dtype=dtype or self.dtype, device=self.device)
        return buf


class DecodeKV:
    """One decode group's gathered K/V per layer, kept while the group stays the same: the
    state of the sequences its buffers hold, and where in its kind's arenas they lie
    (`base`: the element offset of each region; `DecodeGroups` lays them out).

    `plan` is asked once per forward, `commit` records what the forward holds. `grows`:
    its rows are regions of which only the last one grows (the cascade's prefixes | own
    columns), so past `cap` that region alone is gathered anew; else (the plain group: a
    row is one whole context) running past `cap` rebuilds."""

    def __init__(self, ws: Workspace, grows: bool = False):
        self.ws = ws
        self.grows = grows
        self.uids: tuple[int, ...] | None = None
        self._starts: list[int] = []
        self._moved = 0  # steps `advance`d since `commit`
        self.mode: object = None
        self.clusters: tuple[int, ...] = ()
        self.cap = 0
        self.pre_cols = 0   # the prefix region's columns at the last forward (cascade)
        self.kept = False
        self.base: dict[str, int] = {}
        self.last_cascade = None  # the cascade metadata of the last forward (runner.py)

    def plan(self, uids: tuple[int, ...], starts: list[int], mode: object, need: int,
             clusters: tuple[int, ...] = ()) -> "Reuse | None":
        """How this forward may use the kept buffers; None: rebuild (gather afresh).

        They are reusable when the group is the last forward's sequences (`uids`, in the
        same `mode`), each one position further: within the buffers' `cap` columns, or
        past them where only the last region grows (`grow`: the caller gathers it anew,
        wider); and also when some sequences left (finished), within `cap`: the survivors'
        rows (and the surviving `clusters`' prefix rows) are compacted in place of a
        gather."""
        old_uids, old_starts, old_clusters = self.uids, self.starts, self.clusters
        if not (self.kept and old_uids is not None and mode == self.mode):
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

    def commit(self, uids: tuple[int, ...], starts: list[int], mode: object, clusters: tuple[int, ...] = ()) -> None:
        """The buffers hold these sequences now, at these positions."""
        self.uids, self._starts, self._moved, self.mode, self.clusters = uids, starts, 0, mode, clusters

    def advance(self) -> None:
        """The same sequences hold one more position each (counted, not written per sequence)."""
        self._moved += 1

    @property
    def starts(self) -> list[int]:
        """The positions of the sequences the buffers hold, as of the last forward."""
        if self._moved:
            self._starts, self._moved = [s + self._moved for s in self._starts], 0
        return self._starts

    def compact(self, name: str, layer, old_shape: tuple[int, ...], new_shape: tuple[int, ...],
                keep: torch.Tensor) -> None:
        """Rows `keep` of region `name`'s buffers ([Hkv, R_old, cols_old, D] as `buffers`
        takes shapes) become its rows 0.. [Hkv, R_new, cols_new <= cols_old, D] (through a
        scratch copy: they overlap)."""
        cols = new_shape[2]
        base = self.base.get(name, 0)
        for kv in ("k", "v"):
            old = self.ws.get((name, kv, layer), _layout(name, kv, old_shape), base)
            tmp = self.ws.get("compact", (old_shape[0], len(keep), *old.shape[2:]))
            torch.index_select(old, 1, keep, out=tmp)
            new = self.ws.get((name, kv, layer), _layout(name, kv, new_shape), base)
            new.copy_(tmp[..., :cols] if _transposed(name, kv) else tmp[:, :, :cols])

    def buffers(self, name: str, layer, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V buffers of region `name` for `layer`, for `shape` [Hkv, R, cols, D] (the
        keys of TRANSPOSED_KEYS [Hkv, R, D, cols])."""
        base = self.base.get(name, 0)
        return (self.ws.get((name, "k", layer), _layout(name, "k", shape), base),
                self.ws.get((name, "v", layer), shape, base))

    def scratch(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A scratch tensor of this shape (a gather's staging before the keys' transpose)."""
        return self.ws.get("staging", shape)


class DecodeGroups:
    """The kept buffers of one kind of decode group (plain, or cascade), in up to a few
    groups (ets/engine/groups.py) that share arenas: per region, layer and K/V one buffer,
    each group's rows at its own offset, so the groups together never hold more than the
    kind's one group would (at most `limit_bytes`, as much as the pool; above it the
    buffers are not kept per layer: one set, shared by every layer, gathered fresh each
    time).

    `assign` maps each sequence (admission uid) of the last forward to its group: while
    only the same sequences decode on, they stay where they are. Newcomers to plain decode
    (sequences whose prefill just ended) join as groups of their own, placed after the
    others (`append`), while the arenas hold them and the groups are few; otherwise a
    newcomer re-cuts the groups and every one rebuilds. (Rebuilding every group for each
    newcomer made a token's cost grow with the searches in flight: with more of them,
    prefills end at more steps, and each re-gathered every running context.)"""

    def __init__(self, num_layers: int, dtype: torch.dtype, device, limit_bytes: int, grows: bool = False):
        self.num_layers = num_layers
        self.grows = grows
        self.limit_bytes = limit_bytes
        self.element = torch.empty((), dtype=dtype).element_size()
        self.ws = Workspace(dtype, device)
        self.groups: list[DecodeKV] = []
        self.assign: dict[int, int] = {}
        self.kept = False
        self.extent: dict[str, int] = {}  # per region, the elements laid out so far

    def route(self, uids: list[int]) -> list[int]:
        """The group of each sequence, as the last forwards placed them; -1: a newcomer."""
        return [self.assign.get(u, -1) for u in uids]

    def ensure(self, n: int) -> list[DecodeKV]:
        """At least n groups (their buffers' state; arenas shared)."""
        while len(self.groups) < n:
            self.groups.append(DecodeKV(self.ws, self.grows))
            self.groups[-1].kept = self.kept
        return self.groups

    def reset(self) -> None:
        """A forward without this kind of decode token: every kept buffer goes stale."""
        self.assign = {}
        for g in self.groups:
            g.uids = None

    def limit_elements(self, slack: int = 0) -> int:
        """The elements per layer, K or V, that buffers kept per layer may hold (`slack`:
        as `keep`)."""
        return self.limit_bytes // (2 * self.num_layers * self.element) + slack

    def keep(self, numel_per_layer: int, slack: int = 0) -> bool:
        """Whether buffers of this size (elements per layer, K or V, every group and region)
        are kept per layer; decided on a rebuild or a growth. False: every layer shares
        layer 0's buffers. `slack`: elements per layer allowed beyond the limit (the
        columns by which the caller rounds each row up: a group whose contexts fill the pool
        still fits)."""
        self.kept = numel_per_layer <= self.limit_elements(slack)
        for g in self.groups:
            g.kept = self.kept
        return self.kept

    def lay_out(self, groups: list[DecodeKV], region: str, sizes: list[int]) -> None:
        """Place `region`'s buffers of these groups (`sizes[i]` elements per layer, K or V,
        of groups[i]) one after another, and reserve the arenas now: no buffer grows (and
        loses what another group keeps in it) while a forward runs."""
        at = 0
        for g, n in zip(groups, sizes):
            g.base[region] = at
            at += n
        self.extent[region] = at
        # plain decode: room for newcomers' groups besides (`append`), within the limit;
        # reserved memory that is not touched until a group is placed in it
        room = at if self.grows else max(at, min(2 * at, self.limit_elements()))
        for layer in range(self.num_layers if self.kept else 1):
            for kv in ("k", "v"):
                self.ws.reserve((region, kv, layer), room)

    def append(self, groups: list[DecodeKV], region: str, sizes: list[int], slack: int = 0) -> bool:
        """Place `region`'s buffers of these new groups after those laid out, if the kept
        arenas hold them as they are (growing one would lose what the other groups keep in
        it) and the kind stays within its limit (`slack` as in `keep`); False, placing
        nothing: they do not fit."""
        at = self.extent.get(region, 0)
        end = at + sum(sizes)
        if not self.kept or end > self.limit_elements(slack):
            return False
        if any(self.ws.capacity((region, kv, layer)) < end for layer in range(self.num_layers) for kv in ("k", "v")):
            return False
        for g, n in zip(groups, sizes):
            g.base[region] = at
            at += n
        self.extent[region] = end
        return True
