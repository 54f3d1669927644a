"""Selection strategies: pure functions of the frontier, found by name in a registry.

    from ets.strategies import build
    strategy = build(SearchConfig(method="beam", width=16))
    allocation = strategy.select(frontier)        # {node id: children}
"""

if __name__ == "search":  # this folder imported by its old name (a checkout on sys.path): it is ets.strategies
    from ets.namespace import take_old_name

    take_old_name(__name__)

from ets.strategies.base import Allocation, Frontier, Strategy, available, build, canonical_name, register
from ets.strategies import best_of_n, beam, dvts, rebase  # noqa: F401  (registration)
from ets.strategies import ets  # noqa: F401

__all__ = ["Allocation", "Frontier", "Strategy", "available", "build", "canonical_name", "register"]
