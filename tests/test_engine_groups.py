"""Decode sequences cut into groups of like shapes (ets/engine/groups.py): the cuts."""

from ets.engine.groups import cascade_decode_groups, cut, plain_decode_groups


def test_plain_decode_groups_cut_short_contexts_from_long_ones():
    ends = [30 + i for i in range(40)] + [600 + i for i in range(40)]
    parts = plain_decode_groups(ends[::-1], headroom=8)  # in any order
    assert sorted(sorted(80 - 1 - i for i in part) for part in parts) == [list(range(40)), list(range(40, 80))]
    alike = [100 + i for i in range(40)]
    assert plain_decode_groups(alike, headroom=8) == [list(range(40))]  # nothing worth a cut: one group


def test_cascade_decode_groups_cut_small_clusters_from_large_ones():
    """30 clusters of 2 samples and 2 of 40 over like prefixes: in one group every cluster
    is padded to 40 samples, the small ones computing 20x the prefix scores they need."""
    members = [2] * 30 + [40] * 2
    parts = cascade_decode_groups(members, [300] * 32, [10] * 32, min_members=4, headroom=8)
    assert sorted(map(sorted, parts)) == [list(range(30)), [30, 31]]
    # clusters below `min_members` are padded to it anyway: no cut between 2 and 3 samples
    assert len(cascade_decode_groups([2, 3] * 20, [300] * 40, [10] * 40, min_members=4, headroom=8)) == 1


def test_cut_takes_the_largest_saving_first_and_stops_at_max_groups():
    # cost: count x widest; widths 10 (x50), 100 (x50), 1000 (x5)
    items = [((1,), (w,)) for w in [10] * 50 + [100] * 50 + [1000] * 5]
    two = cut(items, lambda s, m: s[0] * m[0], max_groups=2, min_scores=0)
    assert [len(p) for p in two] == [100, 5]  # the cut before the widest saves the most
    three = cut(items, lambda s, m: s[0] * m[0], max_groups=3, min_scores=0)
    assert [len(p) for p in three] == [50, 50, 5]
