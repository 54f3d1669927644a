"""What every selection strategy sees and returns, and the registry that names them.

A strategy is a pure function of the frontier: it never sees a model. After each
expansion the controller hands it a `Frontier` and receives an allocation
`{node id: number of children}` over the candidates (a missing id means 0 children,
i.e. the candidate is pruned). What a strategy counts (e.g. ETS solver fallbacks) it
writes into `frontier.metrics`, the problem's own counter, which lands in its result
record as `strategy_metrics`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from ets.config import METHOD_ALIASES, ConfigError, SearchConfig
from ets.config.checks import did_you_mean
from ets.tree import Node, SearchTree

Allocation = dict[int, int]
# A candidate's score where its path leads, set by the loop's lookahead (ets/loop/lookahead.py).
LOOKAHEAD_SCORE = "lookahead_score"


def selection_score(node: Node) -> float:
    """What a strategy ranks a candidate by: its lookahead score when it has one (search.
    lookahead), else the PRM's score of its newest step."""
    return float(node.tags.get(LOOKAHEAD_SCORE, node.score))


@dataclass(frozen=True)
class Frontier:
    """One selection step of one problem.

    `candidates` are the non-terminal children made by the last expansion, in creation
    order (all at depth `depth`; the first selection happens at depth 1, after the root
    was expanded). `completed` holds every trajectory finished so far, in order.
    `remaining` is the width still to spend: W minus the number of completed. `metrics`
    is the problem's counter for the strategy's events and costs (the same Counter every
    round of one problem; a fresh one when a caller gives none).
    """

    tree: SearchTree
    candidates: list[Node]
    completed: list[Node]
    remaining: int
    width: int
    depth: int
    metrics: Counter[str] = field(default_factory=Counter, compare=False, repr=False)

    def scores(self) -> list[float]:
        """The candidates' selection scores (`selection_score`), in order."""
        return [selection_score(c) for c in self.candidates]


class Strategy(ABC):
    """Subclasses implement `select`. Events a run should report (e.g. ETS solver
    fallbacks) go into each problem's `frontier.metrics`, never into the strategy: one
    strategy serves many interleaved problems."""

    name: str = ""

    def __init__(self, config: SearchConfig):
        self.config = config

    def warm_up(self) -> None:
        """Load what the strategy needs (ETS: its embedding model) before a timed run."""

    def prefetch(self) -> None:
        """Make on disk what `warm_up` will load, without loading it (ETS: a static
        embedder's distillation). A driver calls it before its worker processes start
        (a sweep's --jobs; a run's --workers on a Ray of its own machine), so the work
        runs once, not in every worker."""

    def step_embeddings(self) -> str | None:
        """Whose hidden states this strategy reads as its candidates' `Node.embedding`:
        "policy" (the search loop asks the policy for them with each expansion), "prm"
        (the reward hands them out as it scores), or None (it needs none)."""
        return None

    def prepare(self, frontiers: list[Frontier]) -> None:
        """Called once per round with every frontier about to `select`, so batch work
        (ETS: embedding all new step texts) runs once, not once per problem. Its cost is
        the strategy's to split over the frontiers' `metrics` (ETS: equally)."""

    @abstractmethod
    def select(self, frontier: Frontier) -> Allocation:
        """{candidate id: children}; sums to at most `frontier.remaining` unless the
        method's definition says otherwise (beam rounds up, see ALGORITHMS.md)."""

    def answering(self, completed: list[Node], width: int) -> list[Node]:
        """The completed trajectories that answer (vote, and make the result record), when
        the search is over: every one, unless the method says otherwise (beam with
        sort_completed)."""
        return completed


_REGISTRY: dict[str, type[Strategy]] = {}


def register(name: str) -> Callable[[type[Strategy]], type[Strategy]]:
    def deco(cls: type[Strategy]) -> type[Strategy]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return deco


def available() -> list[str]:
    """The registered strategies, in registration order (best_of_n, beam, dvts, rebase, ets
    for the built-ins: the order of the tables)."""
    return list(_REGISTRY)


def canonical_name(name: str) -> str:
    name = METHOD_ALIASES.get(name, name)
    if name not in _REGISTRY:
        aliases = ", ".join(f"{a} -> {b}" for a, b in METHOD_ALIASES.items())
        # a user's mistake: the command reports it as one line
        raise ConfigError(f"unknown search strategy {name!r}{did_you_mean(name, [*available(), *METHOD_ALIASES])}; "
                          f"known: {', '.join(available())} (aliases: {aliases})")
    return name


def build(config: SearchConfig, name: str | None = None) -> Strategy:
    """The strategy named `name` (default: `config.method`), configured by `config`."""
    return _REGISTRY[canonical_name(name or config.method)](config)
