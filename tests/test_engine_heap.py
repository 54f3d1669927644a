"""freeze_loaded: what exists is frozen out of the cycle collector's way, what comes later
is still collected."""

import gc
import weakref

from ets.engine import freeze_loaded, frozen_loaded


class _Node:
    pass


def test_freeze_loaded_freezes_what_exists_and_later_cycles_are_still_collected():
    try:
        freeze_loaded()
        assert gc.get_freeze_count() > 0
        # a cycle made after the freeze is garbage the collector still finds
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()  # the rest of the test session as it was


def test_frozen_loaded_frees_cycles_made_before_it_once_the_block_ends():
    """A run's models sit in reference cycles; frozen for the search, they must be
    collectable after it, or a process running one search after another keeps them all."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a "model" that lives in a cycle, loaded before the search
    gone = weakref.ref(a)
    with frozen_loaded():
        assert gc.get_freeze_count() > 0
        del a, b
        gc.collect()
        assert gone() is not None  # frozen: the collector leaves it alone during the search
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None
