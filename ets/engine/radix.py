"""The prefix index: a token-level radix tree mapping cached token prefixes to pool slots.

Like SGLang's RadixAttention. Each edge holds a run of tokens and the slots of their KV;
the path from the root to a node spells a cached prefix, and concatenating the slots
along it gives that prefix's KV. A prefix is stored once however many paths share it.

    root ─[12 7 9 4]─ A ─[5 5]─ B        path(B) = 12 7 9 4 5 5
                       └─[8 1 3]─ C      path(C) = 12 7 9 4 8 1 3

Invariants (checked by `check`):
- every non-root node has a non-empty key, `len(key) == len(slots)`, and sits in its
  parent's `children` under its first token;
- `ref_count >= 0`; `lock(node)` adds one to every node from `node` to the root, so a
  parent's count is at least each child's, and a locked node's whole path is locked;
- `evictable_tokens` / `locked_tokens` are the token counts of nodes with ref 0 / ref > 0;
- only unlocked leaves are evicted; slots handed back by `evict` are no longer in the tree;
- every unlocked leaf is in `_leaves` (the LRU index: eviction heaps these, not the whole
  tree; entries that stopped being unlocked leaves are dropped when eviction meets them);
- given the live locks (`check(locks)`), every node's ref count is the number of locks on
  its subtree, and every locked node is still reachable from the root.
The slot tensors returned by `match` are only safe to use while their node is locked.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Iterable, Iterator, NamedTuple, Sequence

import torch


class RadixNode:
    __slots__ = ("key", "slots", "children", "parent", "ref_count", "timestamp")

    def __init__(self, key: list[int], slots: torch.Tensor, parent: "RadixNode | None"):
        self.key = key
        self.slots = slots
        self.children: dict[int, RadixNode] = {}
        self.parent = parent
        self.ref_count = 0
        self.timestamp = 0

    def __lt__(self, other: "RadixNode") -> bool:  # heap order: least recently used first
        return self.timestamp < other.timestamp


class MatchResult(NamedTuple):
    node: RadixNode          # the deepest node whose path is a prefix of the query
    slots: torch.Tensor      # that path's slots (safe to use only while `node` is locked)


class InsertResult(NamedTuple):
    node: RadixNode          # the node ending exactly at the inserted tokens
    n_existing: int          # leading tokens that were cached already (the tree kept its slots)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences (lists or tuples)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the common case, at C speed
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


class RadixTree:
    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.root = RadixNode([], torch.empty(0, dtype=torch.long, device=self.device), None)
        self.root.ref_count = 1  # the root is never evicted
        self.evictable_tokens = 0
        self.locked_tokens = 0
        self._clock = itertools.count(1)
        # Candidates for eviction: every unlocked leaf, maybe some stale entries (an ordered set).
        self._leaves: dict[RadixNode, None] = {}

    # ------------------------------------------------------------------ lookup
    def match(self, tokens: list[int]) -> MatchResult:
        """The deepest node whose path is a prefix of `tokens`, and that path's slots.

        A node matched only partly is split so that the returned node ends exactly where
        the match ends. Lock the node before allocating anything, or its slots may be evicted.
        """
        node, parts, i = self.root, [], 0
        now = next(self._clock)
        while i < len(tokens):
            child = node.children.get(tokens[i])
            if child is None:
                break
            k = common_prefix(child.key, tokens[i:i + len(child.key)])
            if k < len(child.key):
                child = self._split(child, k)
            child.timestamp = now
            parts.append(child.slots)
            node, i = child, i + k
        slots = torch.cat(parts) if parts else self.root.slots
        return MatchResult(node, slots)

    def insert(self, tokens: list[int], slots: torch.Tensor) -> InsertResult:
        """Cache `tokens` with their `slots`; returns (node ending at `tokens`, n_existing).

        The first `n_existing` tokens were already cached: the tree keeps its own slots for
        them and the caller must free (or keep using) `slots[:n_existing]`. The rest of
        `slots` now belongs to the tree.
        """
        node, i = self.root, 0
        now = next(self._clock)
        while i < len(tokens):
            child = node.children.get(tokens[i])
            if child is None:
                leaf = RadixNode(tokens[i:], slots[i:], node)
                leaf.timestamp = now
                node.children[tokens[i]] = leaf
                self.evictable_tokens += len(leaf.key)
                self._leaves[leaf] = None
                return InsertResult(leaf, i)
            k = common_prefix(child.key, tokens[i:i + len(child.key)])
            if k < len(child.key):
                child = self._split(child, k)
            child.timestamp = now
            node, i = child, i + k
        return InsertResult(node, i)

    def _split(self, child: RadixNode, k: int) -> RadixNode:
        """Cut `child`'s edge after k tokens; returns the new upper node.

            parent ─[a b c d e]─ child    =>    parent ─[a b]─ upper ─[c d e]─ child
        `child` keeps its identity (locks held on it still end at the same place).
        """
        upper = RadixNode(child.key[:k], child.slots[:k], child.parent)
        upper.ref_count, upper.timestamp = child.ref_count, child.timestamp
        upper.parent.children[child.key[0]] = upper
        child.key, child.slots, child.parent = child.key[k:], child.slots[k:], upper
        upper.children[child.key[0]] = child
        return upper

    # ----------------------------------------------------------------- locking
    def lock(self, node: RadixNode) -> None:
        """Protect `node`'s whole path from eviction (counts; pair with `unlock`)."""
        while node is not self.root:
            if node.ref_count == 0:
                self.evictable_tokens -= len(node.key)
                self.locked_tokens += len(node.key)
            node.ref_count += 1
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        while node is not self.root:
            assert node.ref_count > 0, "unlock of a node that is not locked"
            node.ref_count -= 1
            if node.ref_count == 0:
                self.evictable_tokens += len(node.key)
                self.locked_tokens -= len(node.key)
                if not node.children:
                    self._leaves[node] = None
            node = node.parent

    # ---------------------------------------------------------------- eviction
    def evict(self, n_tokens: int) -> torch.Tensor:
        """Drop least-recently-used unlocked leaves until >= n_tokens are freed (or nothing
        unlocked is left); returns the freed slots. `evict(0)` is always safe."""
        if n_tokens <= 0 or self.evictable_tokens == 0:
            return self.root.slots
        heap = [n for n in self._leaves if self._is_unlocked_leaf(n)]
        heapq.heapify(heap)
        freed, count = [], 0
        while heap and count < n_tokens:
            leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            freed.append(leaf.slots)
            count += len(leaf.key)
            self.evictable_tokens -= len(leaf.key)
            if parent is not self.root and not parent.children and parent.ref_count == 0:
                heapq.heappush(heap, parent)
        self._leaves = dict.fromkeys(heap)  # what is left: unlocked leaves still cached
        return torch.cat(freed) if freed else self.root.slots

    def _is_unlocked_leaf(self, node: RadixNode) -> bool:
        return (node.ref_count == 0 and not node.children and node.parent is not None
                and node.parent.children.get(node.key[0]) is node)

    # ------------------------------------------------------------------ checks
    def nodes(self) -> Iterator[RadixNode]:
        """Every node but the root (depth first; do not change the tree while iterating)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node is not self.root:
                yield node
            stack.extend(node.children.values())

    def all_slots(self) -> torch.Tensor:
        parts = [n.slots for n in self.nodes()]
        return torch.cat(parts) if parts else self.root.slots

    def path_of(self, node: RadixNode) -> list[int]:
        keys = []
        while node is not self.root:
            keys.append(node.key)
            node = node.parent
        return [t for key in reversed(keys) for t in key]

    def reachable(self, node: RadixNode) -> bool:
        """Whether `node` is still attached: its parents lead to the root through
        `children` links (an evicted or detached node does not)."""
        while node is not self.root:
            parent = node.parent
            if parent is None or not node.key or parent.children.get(node.key[0]) is not node:
                return False
            node = parent
        return True

    def check(self, locks: Iterable[RadixNode] | None = None) -> None:
        """Raise AssertionError if an invariant of this tree is broken. `locks`: the node of
        every live lock (one entry per `lock` call not yet undone); when given, each must be
        reachable and every ref count must be exactly what they imply."""
        evictable = locked = 0
        for node in self.nodes():
            assert node.key, "empty edge below the root"
            assert len(node.key) == node.slots.numel(), "key and slots differ in length"
            assert node.parent.children.get(node.key[0]) is node, "node not under its first token"
            assert node.ref_count >= 0, "negative ref count"
            for child in node.children.values():
                assert child.ref_count <= node.ref_count, "child locked more often than its parent"
            if node.ref_count == 0:
                evictable += len(node.key)
            else:
                locked += len(node.key)
            if node.ref_count == 0 and not node.children:
                assert node in self._leaves, "an unlocked leaf is missing from the LRU index"
        assert evictable == self.evictable_tokens, f"evictable {self.evictable_tokens} != {evictable}"
        assert locked == self.locked_tokens, f"locked {self.locked_tokens} != {locked}"
        if locks is not None:
            self._check_locks(locks)

    def _check_locks(self, locks: Iterable[RadixNode]) -> None:
        expected: dict[int, int] = {}
        for node in locks:
            assert self.reachable(node), "a locked path is no longer in the tree"
            while node is not self.root:
                expected[id(node)] = expected.get(id(node), 0) + 1
                node = node.parent
        for node in self.nodes():
            assert node.ref_count == expected.get(id(node), 0), "ref count differs from live locks"
