"""Selection strategies: pure functions of the frontier, found by name in a registry, or
given as `module:Class` (a `Strategy` subclass of the user's, with its own `search.options`).

    from ets.strategies import build
    strategy = build(SearchConfig(method="beam", width=16))
    allocation = strategy.select(frontier)        # {node id: children}

A plug-in needs `Strategy`, `Frontier` and `selection_score` (what the built-ins rank by).
"""

if __name__ == "search":  # this folder imported by its old name (a checkout on sys.path): it is ets.strategies
    from ets.namespace import take_old_name

    take_old_name(__name__)

from ets.strategies.base import (Allocation, Frontier, Strategy, available, build, canonical_name, register, resolve,
                         selection_score)
from ets.strategies import best_of_n, beam, dvts, rebase  # noqa: F401  (registration)
from ets.strategies import ets  # noqa: F401

__all__ = ["Allocation", "Frontier", "Strategy", "available", "build", "canonical_name", "register", "resolve",
           "selection_score"]
