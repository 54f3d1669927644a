"""Selection strategies: pure functions of the frontier, found by name in a registry.

    from search import build
    strategy = build(SearchConfig(method="beam", width=16))
    allocation = strategy.select(frontier)        # {node id: children}
"""

from search.base import Allocation, Frontier, Strategy, available, build, canonical_name, register
from search import best_of_n, beam, dvts, rebase  # noqa: F401  (registration)
from search import ets  # noqa: F401

__all__ = ["Allocation", "Frontier", "Strategy", "available", "build", "canonical_name", "register"]
