"""What a user's reward plug-in raised, told as one line: the plug-in, the exception, where
in the plug-in's own code it came from, and what to check (ets/plugins.py, shared with the
strategy plug-ins; here bound to rewards).

The boundary is where ets hands control to the plug-in: importing its module, building it,
calling its `score`. Two kinds pass through unchanged: the project's own error types (a
plug-in may raise `ConfigError` or `RewardError` to say what is wrong, and they are one
line already), and an exception raised inside the project's own code that the plug-in
called (a project bug: its traceback is what finds it).
"""

from __future__ import annotations

from typing import Callable

from ets import plugins
from ets.plugins import DEBUG_HINT, is_guarded, is_project_module, module_of  # noqa: F401  (the rewards' names)
from ets.rewards.base import RewardError


class PluginError(RewardError, plugins.PluginError):
    """A reward plug-in raised an exception at import, when built, or when it scored; the
    message names the plug-in, the exception, where in its code, and what to check."""


REWARD = plugins.Kind("reward", "rewards", PluginError, (RewardError,), options_key="reward.options")


def passes_through(exc: BaseException) -> bool:
    return plugins.passes_through(exc, REWARD)


def fault(name: str, exc: BaseException, module: str, action: str, advice: str,
          defined_at: Callable | None = None) -> PluginError:
    """The one-line `PluginError` for `exc`, raised by reward `name` (ets.plugins.fault)."""
    return plugins.fault(REWARD, name, exc, module, action, advice, defined_at)  # type: ignore[return-value]


def guarded(fn: Callable, name: str, module: str, action: str, advice: str) -> Callable:
    """`fn` that turns what the reward plug-in raises into a `PluginError`."""
    return plugins.guarded(fn, REWARD, name, module, action, advice)
