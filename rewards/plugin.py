"""User rewards: a plain function or a `ProcessRewardModel` subclass, made into a PRM.

    def my_reward(questions, trajectories, **options) -> scores[q][t][s]
    class MyReward(ProcessRewardModel): def __init__(self, **options): ...

`reward.options` are the function's extra keyword arguments or the class's constructor
arguments; they are checked against the signature when the reward is built, so a typo
fails before the search starts with the allowed names listed.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

from ets.config import ConfigError
from rewards.base import ProcessRewardModel


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
    if isinstance(obj, ProcessRewardModel):
        if options:
            raise ConfigError(f"reward {name!r} is an already-built instance; it takes no options (got {', '.join(options)})")
        return _named(obj, name)
    if isinstance(obj, type):
        if not issubclass(obj, ProcessRewardModel):
            raise ConfigError(
                f"reward {name!r} is the class {obj.__name__}, which is not a rewards.ProcessRewardModel "
                "subclass; give a subclass or a function f(questions, trajectories) -> scores"
            )
        _check_signature(obj, options, name, skip=0)
        return _named(obj(**options), name)
    if callable(obj):
        _check_signature(obj, options, name, skip=2)
        return FunctionReward(obj, name, options)
    raise ConfigError(f"reward {name!r} is a {type(obj).__name__}, not a function or a ProcessRewardModel subclass")


def _named(prm: ProcessRewardModel, name: str) -> ProcessRewardModel:
    # Error messages name the reward; keep a name the author chose, else use the config's.
    if prm.name == ProcessRewardModel.name:
        prm.name = name
    return prm


def _check_signature(fn: Callable, options: dict[str, Any], name: str, skip: int) -> None:
    """Can `fn(<skip positional args>, **options)` be called? Else name the bad option."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins without a signature: let the call decide
    params = list(sig.parameters.values())
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    if skip and len(positional) < skip and not takes_varargs:
        raise ConfigError(f"reward {name!r} must accept (questions, trajectories); its signature is {sig}")
    allowed = [p.name for p in params[skip:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not takes_kwargs:
        for key in options:
            if key not in allowed:
                raise ConfigError(
                    f"reward {name!r}: unknown option {key!r}; allowed options: {', '.join(allowed) or '(none)'}"
                )
    try:
        sig.bind(*([None] * skip), **options)
    except TypeError as exc:
        raise ConfigError(f"reward {name!r}: options {options} do not fit its signature {sig}: {exc}") from exc
