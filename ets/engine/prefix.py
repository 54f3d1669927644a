"""Which prefixes a batch shares, so that each is computed once.

Sequences admitted in the same step all miss the cache for a prefix none of them has
computed yet, and would each compute it. So before a call, the engine prefills the
prefixes that two or more of its sequences share (and that are not cached), longest
shared first, each once; then every sequence finds them in the cache. A scorer with its
own memo (rewards/backends.py) asks the same question and wants every branch point, in
levels (`prefix_levels`).

In lexicographic order, the longest prefix a path shares with any other path is the one
it shares with a neighbour, so neighbours are all one compares (`branch_points`):

    a b c x        shares "a b c" with its neighbour below
    a b c y z      shares "a b c y" below, "a b c" above  -> keeps "a b c y"
    a b c y w
"""

from __future__ import annotations

from typing import Sequence

from ets.engine.radix import common_prefix

Path = tuple[int, ...]


def branch_points(items: Sequence[tuple[Sequence[int], int, int]]) -> set[Path]:
    """items: (tokens, limit, count): `count` sequences on `tokens`, each able to share only
    its first `limit` tokens. Returns the prefixes that two sequences share as far as they
    go (the common prefix of each pair of sorted neighbours, and a path that two sequences
    are on), each cut to its paths' limits; empty ones left out."""
    limit: dict[Path, int] = {}
    count: dict[Path, int] = {}
    for tokens, lim, n in items:
        tokens = tuple(tokens)
        limit[tokens] = min(lim, limit.get(tokens, lim))
        count[tokens] = count.get(tokens, 0) + n
    paths = sorted(limit)
    found: set[Path] = {p[: limit[p]] for p in paths if count[p] > 1}
    for a, b in zip(paths, paths[1:]):
        n = common_prefix(a, b)
        found.update((a[: min(n, limit[a])], b[: min(n, limit[b])]))
    found.discard(())
    return found


def shared_prefixes(items: Sequence[tuple[Sequence[int], int, int]]) -> list[Path]:
    """The maximal shared prefixes of `items` (as in `branch_points`): none is a prefix of
    another; sorted. What the engine prefills before a call."""
    ordered = sorted(branch_points(items))
    # a prefix of another found prefix sorts right before one that extends it
    return [p for i, p in enumerate(ordered) if i + 1 == len(ordered) or ordered[i + 1][: len(p)] != p]


def prefix_levels(sequences: Sequence[Sequence[int]], min_tokens: int = 1) -> list[list[list[int]]]:
    """Every prefix that two or more `sequences` share (the branch points of their token
    trie), at least `min_tokens` long, in levels: level k holds the prefixes that extend k
    shorter found ones, so no prefix shares a level with a prefix of itself. Each level
    is sorted.

        A = q q q h h x      sorted neighbours' common prefixes: q q q h h (A, B)
        B = q q q h h y                                          q q q     (B, C)
        C = q q q z          -> levels [[q q q], [q q q h h]]
    """
    found = [p for p in branch_points([(s, len(s), 1) for s in sequences]) if len(p) >= min_tokens]
    level: dict[Path, int] = {}
    for p in sorted(sorted(found), key=len):
        level[p] = 1 + max((level[q] for q in level if len(q) < len(p) and p[: len(q)] == q), default=-1)
    return [sorted(list(p) for p in level if level[p] == k) for k in range(1 + max(level.values(), default=-1))]
