"""Which prefixes a batch shares, so the engine computes each once before the batch runs.

Sequences admitted in the same step all miss the cache for a prefix none of them has
computed yet, and would each compute it. So before a call, the engine prefills the
prefixes that two or more of its sequences share (and that are not cached), longest
shared first, each once; then every sequence finds them in the cache.

In lexicographic order, the longest prefix a path shares with any other path is the one
it shares with a neighbour:

    a b c x        shares "a b c" with its neighbour below
    a b c y z      shares "a b c y" below, "a b c" above  -> keeps "a b c y"
    a b c y w
"""

from __future__ import annotations


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


def shared_prefixes(items: list[tuple[tuple[int, ...], int, int]]) -> list[tuple[int, ...]]:
    """items: (tokens, limit, count): `count` sequences on `tokens`, each able to take its
    first `limit` tokens from the cache. Returns the maximal shared prefixes, each within
    its paths' limits; none is a prefix of another."""
    limit: dict[tuple[int, ...], int] = {}
    count: dict[tuple[int, ...], int] = {}
    for tokens, lim, n in items:
        limit[tokens] = min(lim, limit.get(tokens, lim))
        count[tokens] = count.get(tokens, 0) + n
    paths = sorted(limit)
    found = set()
    for i, p in enumerate(paths):
        shared = len(p) if count[p] > 1 else 0
        if i > 0:
            shared = max(shared, _lcp(p, paths[i - 1]))
        if i + 1 < len(paths):
            shared = max(shared, _lcp(p, paths[i + 1]))
        shared = min(shared, limit[p])
        if shared > 0:
            found.add(p[:shared])
    ordered = sorted(found)
    # a prefix of another found prefix sorts right before one that extends it
    return [p for i, p in enumerate(ordered) if i + 1 == len(ordered) or ordered[i + 1][: len(p)] != p]
