"""What every selection strategy sees and returns, and the registry that names them.

A strategy is a pure function of the frontier: it never sees a model. After each
expansion the controller hands it a `Frontier` and receives an allocation
`{node id: number of children}` over the candidates (a missing id means 0 children,
i.e. the candidate is pruned). What a strategy counts (e.g. ETS solver fallbacks) it
writes into `frontier.metrics`, the problem's own counter, which lands in its result
record as `strategy_metrics`.

Strategies are found by name (`register`), or given as `module:Class`, a `Strategy`
subclass of the user's (`search.method: mypkg.strats:MyStrategy`), loaded as reward
plug-ins are (ets/plugins.py): what it raises when imported, built or called is one line
naming it and the line of its code. `search.options` are the strategy's own options, its
constructor's keyword arguments after the config (`MyStrategy(config, **options)`),
checked against its signature before anything is loaded: a built-in strategy takes none,
so any option given to one is a ConfigError naming it.
"""

from __future__ import annotations

import inspect
import operator
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping

from ets.config import METHOD_ALIASES, ConfigError, SearchConfig
from ets.config.checks import did_you_mean
from ets.plugins import Kind, PluginError, check_options, guarded, import_object, is_project_module, module_of
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

    @abstractmethod
    def select(self, frontier: Frontier) -> Allocation:
        """{candidate id: children (an int >= 0)}; sums to at most `frontier.remaining`
        unless `may_exceed_width`. The loop makes the children in the allocation's order,
        and refuses an allocation that breaks these rules (`checked_allocation`)."""

    @property
    def may_exceed_width(self) -> bool:
        """Whether `select` may hand out more than `frontier.remaining` children, by its
        method's definition: under `compat: ets_code` the ETS code's arithmetic can (its
        float32 REBASE, its DVTS subtrees that never shrink); beam rounds its share up."""
        return self.config.ets_code

    def root_children(self, width: int) -> int:
        """How many children the root gets: the width. (Under `compat: ets_code`, REBASE and
        ETS select the root as the ETS code does, a candidate scored 1.0, which can give one
        more: search/compat.py.)"""
        return width

    def listed_nodes(self, frontier: Frontier) -> list[Node]:
        """The nodes the ETS code's selection lists for this frontier, which its KV figure
        (`kv_size_ref`) counts, a node's own tokens once per listing: the candidates. (Under
        `compat: ets_code`, DVTS lists a survivor it cycles over several subtrees once per
        subtree.)"""
        return frontier.candidates

    def answering(self, completed: list[Node], width: int) -> list[Node]:
        """The completed trajectories that answer (vote, and make the result record), when
        the search is over: every one, unless the method says otherwise (beam with
        sort_completed)."""
        return completed


def checked_allocation(allocation, frontier: Frontier, strategy: Strategy) -> Allocation:
    """`strategy.select`'s answer for `frontier`, its pruned candidates (0 children)
    dropped; anything but {candidate id: children (an int >= 0)} summing to at most
    `frontier.remaining` (unless `may_exceed_width`) is a PluginError naming the strategy and
    the rule, before a child is made (a wrong allocation would make a record that breaks
    the width, or fail later deep in a policy)."""
    def refuse(what: str) -> PluginError:
        return PluginError(f"strategy {strategy.name!r}: select returned {what}; it must return {{candidate id: "
                           f"children}}, ids from frontier.candidates (node.id), counts ints >= 0 summing to at "
                           f"most frontier.remaining ({frontier.remaining})")

    if not isinstance(allocation, Mapping):
        raise refuse(f"a {type(allocation).__name__}")
    ids = {c.id for c in frontier.candidates}
    counts: Allocation = {}
    for key, value in allocation.items():
        if isinstance(key, Node):
            raise refuse(f"a node as a key (node {key.id})")
        if key not in ids:
            raise refuse(f"{key!r}, not the id of a candidate")
        try:
            n = operator.index(value)  # an int, or numpy's
        except TypeError:
            raise refuse(f"{value!r} ({type(value).__name__}) children for candidate {key}") from None
        if n < 0:
            raise refuse(f"{n} children for candidate {key}")
        if n:
            counts[key] = n
    if not strategy.may_exceed_width and sum(counts.values()) > frontier.remaining:
        raise refuse(f"{sum(counts.values())} children in all")
    return counts


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


STRATEGY = Kind("strategy", "strategies", PluginError, options_key="search.options")
# The methods a plug-in strategy's faults are caught in, and what its user is told to check.
PLUGIN_METHODS = ("select", "answering", "warm_up", "prefetch")
WHEN_BUILT_ADVICE = "check search.options and what its constructor needs"
WHEN_CALLED_ADVICE = "finished problems are kept"


def canonical_name(name: str) -> str:
    """A registered name for `name` (an alias resolved), or a `module:Class` as given once
    it loads as a strategy; else a ConfigError listing the known names."""
    name = METHOD_ALIASES.get(name, name)
    resolve(name)
    return name


def resolve(name: str) -> type[Strategy]:
    """The strategy class `name` stands for: a registered name or alias, or `module:Class`."""
    name = METHOD_ALIASES.get(name, name)
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        return _plugin_class(name)
    aliases = ", ".join(f"{a} -> {b}" for a, b in METHOD_ALIASES.items())
    # a user's mistake: the command reports it as one line
    raise ConfigError(f"unknown search strategy {name!r}{did_you_mean(name, [*available(), *METHOD_ALIASES])}; "
                      f"known: {', '.join(available())} (aliases: {aliases}); or give a Strategy subclass as "
                      "module:Class")


def _plugin_class(spec: str) -> type[Strategy]:
    obj = import_object(spec, STRATEGY, spec, available)
    if not (isinstance(obj, type) and issubclass(obj, Strategy)):
        what = f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"
        raise ConfigError(f"strategy {spec!r} is {what}, not a search.Strategy subclass; give a subclass "
                          "that defines select(self, frontier) -> {candidate id: children}")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ()))) or "select"
        raise ConfigError(f"strategy {spec!r}: the class {obj.__name__} does not define {missing}(self, frontier); "
                          "define it to return {candidate id: children}")
    return obj


def plugin_module(name: str) -> str | None:
    """The module a strategy that is not the project's own is defined in (`module:Class`,
    or a class a user registered), found without importing it; None for a built-in."""
    name = METHOD_ALIASES.get(name, name)
    module = module_of(_REGISTRY[name]) if name in _REGISTRY else name.partition(":")[0] if ":" in name else None
    return None if not module or is_project_module(module) else module


def check(config: SearchConfig) -> type[Strategy]:
    """The class `config.method` names, with `config.options` checked against its
    signature; nothing is built."""
    cls = resolve(config.method)
    check_options(cls, config.options, STRATEGY, config.method, skip=1, takes="(config)")
    return cls


def build(config: SearchConfig) -> Strategy:
    """The strategy `config.method` names, configured by `config` and its `options`. A
    plug-in's faults, from its constructor and its methods, are one line each
    (`PluginError`)."""
    cls = check(config)
    module = module_of(cls)
    if is_project_module(module):
        return cls(config, **config.options)
    strategy = guarded(cls, STRATEGY, config.method, module, "building it", WHEN_BUILT_ADVICE)(config, **config.options)
    for method in PLUGIN_METHODS:
        setattr(strategy, method, guarded(getattr(strategy, method), STRATEGY, config.method, module, "",
                                          WHEN_CALLED_ADVICE))
    if not strategy.name:
        strategy.name = config.method
    return strategy
