"""A forward's sequences cut into groups attended apart, so that fewer pad to the longest.

Attention runs a group as padded tensors: every prefill chunk to the group's longest chunk
and widest context, every decode row to the group's widest context (plain decode) or, in
the cascade, every cluster to the group's most samples and longest shared prefix. One
group per kind pads each sequence to the batch's extremes, and with many searches in
flight those are far apart: REBASE W=64 with 8.5 searches in flight (24 problems) used
0.54 of its plain decode columns and 0.14 of its cascade's prefix scores. A cut is made
where the scores the groups compute fall most (a group costs its fixed ops per layer, so
only when that saves enough: SPLIT_MIN_SCORES, DECODE_SPLIT_MIN_SCORES).

Which group a sequence lands in changes none of its numbers (ets/engine/invariant.py:
keys are padded to KEY_BLOCK, values summed in fixed blocks, products of at least
`product_rows` rows), so the cut is free to follow the batch.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ets.engine.invariant import KEY_BLOCK, round_up

# a cut is made when it saves more scores (per query head and layer) than this, and more
# than this share of the part's: a prefill group costs more fixed ops (its query blocks)
# than a decode group (a few ops a layer, ~0.1 ms on the demo policy: a few thousand
# columns' worth)
SPLIT_MIN_SCORES = 1 << 15
DECODE_SPLIT_MIN_SCORES = 1 << 12
SPLIT_MIN_SHARE = 0.1
MAX_PREFILL_GROUPS = 4
MAX_DECODE_GROUPS = 4
# live decode groups of one kind at most, counting those newcomers join as groups of their
# own between cuts (runner._append): each group costs its few ops a layer
MAX_KEPT_GROUPS = 2 * MAX_DECODE_GROUPS

# cost(sums, maxima) of a part: its items' additive features summed, the others' maxima
Cost = Callable[[list[float], list[float]], float]


def cut(items: Sequence[tuple[Sequence[float], Sequence[float]]], cost: Cost, max_groups: int,
        min_scores: int = SPLIT_MIN_SCORES) -> list[list[int]]:
    """`items` (already in the order parts are cut along), each (summed features, maxed
    features), cut into at most `max_groups` contiguous parts, each cut the one saving the
    most `cost`, while a cut saves more than `min_scores` and SPLIT_MIN_SHARE of its part.
    Returns the parts as lists of indices into `items`."""

    def stats(part: list[int]) -> tuple[list, list]:
        """Running (sums, maxima) from the left ([k]: of part[:k + 1]) and from the right
        ([k]: of part[k:])."""
        def run(seq):
            out, sums, maxes = [], None, None
            for i in seq:
                s, m = items[i]
                sums = list(s) if sums is None else [a + b for a, b in zip(sums, s)]
                maxes = list(m) if maxes is None else [max(a, b) for a, b in zip(maxes, m)]
                out.append((sums, maxes))
            return out
        return run(part), run(reversed(part))[::-1]

    def best_cut(part: list[int]) -> tuple[float, int]:
        """(scores saved, cut) of the best split of `part` in two; (0, 0): none worth it."""
        if len(part) < 2:
            return 0, 0
        left, right = stats(part)
        whole = cost(*left[-1])
        best = (0, 0)
        for k in range(1, len(part)):
            saving = whole - cost(*left[k - 1]) - cost(*right[k])
            if saving > max(min_scores, SPLIT_MIN_SHARE * whole) and saving > best[0]:
                best = (saving, k)
        return best

    parts = [list(range(len(items)))]
    cuts = [best_cut(parts[0])]  # cuts[k]: part k's best cut, found once per part
    while len(parts) < max_groups:
        p = max(range(len(parts)), key=lambda k: cuts[k][0])
        if cuts[p][0] == 0:
            break
        k = cuts[p][1]
        parts[p:p + 1] = halves = [parts[p][:k], parts[p][k:]]
        cuts[p:p + 1] = [best_cut(half) for half in halves]
    return parts


def prefill_groups(lens: list[int], ends: list[int], key_block: int = KEY_BLOCK) -> list[list[int]]:
    """The prefill chunks (new tokens `lens[i]`, context `ends[i]` after them) in groups,
    as lists of indices: sorted by padded context, then cut where the scores the groups
    compute (chunks x longest chunk x widest context) fall most, up to MAX_PREFILL_GROUPS.
    A PRM round mixes steps of 10-40 tokens over histories of 100-400: in the demo's ETS
    run (W=8, 10 problems) one group per forward computed 1.57x the scores its queries
    need, these groups 1.30x."""
    order = sorted(range(len(lens)), key=lambda i: (round_up(ends[i], key_block), lens[i]))
    # one query alone is multiplied another way (invariant.py): a chunk is at least 2 rows
    items = [((1,), (lens[i], round_up(ends[i], key_block))) for i in order]
    parts = cut(items, lambda s, m: s[0] * max(2, m[0]) * m[1], MAX_PREFILL_GROUPS)
    return [[order[k] for k in part] for part in parts]


def plain_decode_groups(ends: list[int], headroom: int, key_block: int = KEY_BLOCK) -> list[list[int]]:
    """Decode sequences alone on their path (context `ends[i]` after this step) in groups,
    as lists of indices: sorted by context, cut where the columns the groups' kept buffers
    hold (rows x widest context and `headroom`, to key_block) fall most."""
    order = sorted(range(len(ends)), key=lambda i: ends[i])
    items = [((1,), (ends[i],)) for i in order]
    parts = cut(items, lambda s, m: s[0] * round_up(m[0] + headroom, key_block), MAX_DECODE_GROUPS,
                DECODE_SPLIT_MIN_SCORES)
    return [[order[k] for k in part] for part in parts]


def cascade_decode_groups(members: list[int], prefixes: list[int], owns: list[int], min_members: int,
                          headroom: int, key_block: int = KEY_BLOCK) -> list[list[int]]:
    """Clusters of decode samples (cluster c: `members[c]` samples sharing a prefix of
    `prefixes[c]` tokens, its longest own part `owns[c]` tokens) in groups, as lists of
    cluster indices: sorted by samples, then prefix, cut where the scores fall most: the
    prefix products' (clusters x most samples, at least `min_members`, x longest prefix)
    and the own columns' (samples x longest own part and `headroom`)."""
    order = sorted(range(len(members)), key=lambda c: (max(members[c], min_members), prefixes[c]))
    items = [((1, members[c]), (max(members[c], min_members), round_up(max(1, prefixes[c]), key_block), owns[c]))
             for c in order]

    def cost(s, m):
        return s[0] * m[0] * m[1] + s[1] * round_up(m[2] + headroom, key_block)

    parts = cut(items, cost, MAX_DECODE_GROUPS, DECODE_SPLIT_MIN_SCORES)
    return [[order[k] for k in part] for part in parts]
