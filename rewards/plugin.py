"""User rewards: a plain function or a `ProcessRewardModel` subclass, made into a PRM.

    def my_reward(questions, trajectories, **options) -> scores[q][t][s]
    class MyReward(ProcessRewardModel): def __init__(self, **options): ...

`reward.options` are the function's extra keyword arguments or the class's constructor
arguments; they are checked against the signature when the reward is built, so a typo
fails before the search starts with the allowed names listed.

What the plug-in raises when it is built or when it scores is a one-line `PluginError`
naming it, the exception and the line of its code (rewards/plugin_faults.py); a class
without `score` is refused when built.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

from ets.config import ConfigError
from ets.plugins import check_options
from ets.rewards.base import ProcessRewardModel
from ets.rewards.plugin_faults import REWARD, guarded, is_guarded, module_of

WHEN_BUILT_ADVICE = "check reward.options and what its constructor needs"
WHEN_SCORING_ADVICE = "finished problems are kept"


class FunctionReward(ProcessRewardModel):
    """A function `f(questions, trajectories, **options) -> scores` as a PRM."""

    def __init__(self, fn: Callable, name: str, options: Mapping[str, Any] | None = None):
        self.fn = fn
        self.name = name
        self.options = dict(options or {})

    def score(self, questions, trajectories):
        return self.fn(questions, trajectories, **self.options)


def make_plugin(obj: Any, options: Mapping[str, Any] | None, name: str) -> ProcessRewardModel:
    """A PRM from a user object: a PRM instance, a PRM subclass, or a function."""
    options = dict(options or {})
    check_plugin(obj, options, name)
    module = module_of(obj)
    if isinstance(obj, ProcessRewardModel):
        return guard_scoring(_named(obj, name), name, module)
    if isinstance(obj, type):
        built = guarded(obj, name, module, "building it", WHEN_BUILT_ADVICE)(**options)
        return guard_scoring(_named(built, name), name, module)
    return FunctionReward(guarded(obj, name, module, "", WHEN_SCORING_ADVICE), name, options)


def check_plugin(obj: Any, options: Mapping[str, Any] | None, name: str) -> None:
    """What `make_plugin` checks before it builds anything (`ets run --check` too): the
    kind of object, a class's `score`, the options against the signature."""
    options = dict(options or {})
    if isinstance(obj, ProcessRewardModel):
        if options:
            raise ConfigError(f"reward {name!r} is an already-built instance; it takes no options (got {', '.join(options)})")
    elif isinstance(obj, type):
        _check_class(obj, name)
        check_options(obj, options, REWARD, name, skip=0)
    elif callable(obj):
        check_options(obj, options, REWARD, name, skip=2, takes="(questions, trajectories)")
    else:
        raise ConfigError(f"reward {name!r} is a {type(obj).__name__}, not a function or a ProcessRewardModel subclass")


def _check_class(cls: type, name: str) -> None:
    """A plug-in class must be a `ProcessRewardModel` subclass that defines `score`."""
    if not issubclass(cls, ProcessRewardModel):
        raise ConfigError(
            f"reward {name!r} is the class {cls.__name__}, which is not a rewards.ProcessRewardModel "
            "subclass; give a subclass or a function f(questions, trajectories) -> scores"
        )
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ()))) or "score"
        raise ConfigError(
            f"reward {name!r}: the class {cls.__name__} does not define {missing}(self, questions, trajectories); "
            "define it to return scores[q][t][s] in [0, 1]"
        )


def guard_scoring(prm: ProcessRewardModel, name: str, module: str) -> ProcessRewardModel:
    """`prm` whose `score` raises the plug-in's faults as one line: the instance's own
    `score` shadows the class's, so what the search calls (and `ProcessRewardModel.__call__`)
    is guarded, and the object stays the plug-in's own (its type, its attributes)."""
    if not is_guarded(prm.score):  # an instance built once and given twice
        prm.score = guarded(prm.score, name, module, "", WHEN_SCORING_ADVICE)  # type: ignore[method-assign]
    return prm


def _named(prm: ProcessRewardModel, name: str) -> ProcessRewardModel:
    # Error messages name the reward; keep a name the author chose, else use the config's.
    if prm.name == ProcessRewardModel.name:
        prm.name = name
    return prm
