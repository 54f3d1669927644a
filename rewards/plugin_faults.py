"""What a user's reward plug-in raised, told as one line: the plug-in, the exception, where
in the plug-in's own code it came from, and what to check.

The boundary is where ets hands control to the plug-in: importing its module, building it,
calling its `score`. An exception that comes out of the plug-in's code (or of a library it
called) there becomes a `PluginError`, and its traceback is logged at DEBUG
(`--log-level DEBUG`). Two kinds pass through unchanged: the project's own error types (a
plug-in may raise `ConfigError` or `RewardError` to say what is wrong, and they are one
line already), and an exception raised inside the project's own code that the plug-in
called (a project bug: its traceback is what finds it).
"""

from __future__ import annotations

import importlib.util
import logging
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any, Callable

import ets.config as config_package
from ets.config import ConfigError
from ets.rewards.base import RewardError

log = logging.getLogger(__name__)

# The project's own code: an exception raised in it is the project's bug. One package, ets;
# its files are ets/ and the folders of ets.strategies, ets.rewards and ets.lp, which sit beside
# this one (inside ets/ when installed, beside it in a checkout).
PROJECT_PACKAGES = ("ets",)
_HERE = Path(__file__).resolve().parent
_ETS_DIR = Path(config_package.__file__).resolve().parents[1]
_PROJECT_DIRS = tuple(f"{folder}/" for folder in (_ETS_DIR, _HERE.parent / "search", _HERE, _HERE.parent / "lp"))
_MAX_MESSAGE = 400  # characters of the plug-in's own message kept in the line
DEBUG_HINT = "--log-level DEBUG shows the traceback"


class PluginError(RewardError):
    """A reward plug-in raised an exception at import, when built, or when it scored; the
    message names the plug-in, the exception, where in its code, and what to check."""


def is_project_module(module_name: str) -> bool:
    return module_name.partition(".")[0] in PROJECT_PACKAGES


def module_of(obj: Any) -> str:
    """The module a plug-in object was defined in (its class's, for an instance)."""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        module = getattr(type(obj), "__module__", "") or ""
    return module


def passes_through(exc: BaseException) -> bool:
    """Already one line (the project's error types), or a bug in the project's own code."""
    from ets.models.load import ModelLoadError

    if isinstance(exc, (ConfigError, RewardError, ModelLoadError)):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and _in_project(frames[-1].filename) and not _raised_at_the_call(exc.__traceback__)


def fault(name: str, exc: BaseException, module: str, action: str, advice: str,
          defined_at: Callable | None = None) -> PluginError:
    """The one-line `PluginError` for `exc`, raised by reward `name` (defined in `module`)
    while `action` ("building it"; "" when it scored); its traceback logged at DEBUG.

        reward 'mod:attr' raised ValueError: <its message> (in mod.py line 12); <advice>; ...
        reward 'mod:attr': building it raised ValueError: <its message> (in mod.py line 4); ...
    """
    log.debug("reward %r: %s raised %s:", name, action or "scoring", type(exc).__name__, exc_info=exc)
    where = _location(exc, module, defined_at)
    text = " ".join(str(exc.msg if isinstance(exc, SyntaxError) else exc).split())
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE - 3] + "..."
    told = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return PluginError(f"reward {name!r}{f': {action}' if action else ''} raised {told}"
                       f"{f' (in {where})' if where else ''}; {advice}; {DEBUG_HINT}")


def guarded(fn: Callable, name: str, module: str, action: str, advice: str) -> Callable:
    """`fn` that turns what the plug-in raises into a `PluginError` (see `fault`)."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if passes_through(exc):
                raise
            raise fault(name, exc, module, action, advice, defined_at=fn) from exc

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    call.guarded = True  # type: ignore[attr-defined]
    return call


def is_guarded(fn: Callable) -> bool:
    return getattr(fn, "guarded", False) is True


def _in_project(filename: str) -> bool:
    return filename.startswith(_PROJECT_DIRS)


def _raised_at_the_call(tb: TracebackType | None) -> bool:
    """Raised by the call itself (a signature that does not fit), not inside the callee:
    the traceback ends in the frame that called the plug-in."""
    return tb is not None and tb.tb_next is None


def _plugin_roots(module: str) -> tuple[str, ...]:
    """The files of the plug-in's top-level package (or its one module file)."""
    top = module.partition(".")[0]
    if not top or top == "__main__":
        return ()
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return ()
    if spec is None:
        return ()
    if spec.submodule_search_locations:
        return tuple(str(Path(p)) + "/" for p in spec.submodule_search_locations)
    return (spec.origin,) if spec.origin else ()


def _location(exc: BaseException, module: str, defined_at: Callable | None) -> str:
    """`file.py line N`: the deepest line of the plug-in's own code in the traceback (the
    line of a SyntaxError; else where the plug-in's callable is defined)."""
    roots = _plugin_roots(module)
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{_shown(exc.filename, roots)} line {exc.lineno}"
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if roots and frame.filename.startswith(roots):
            return f"{_shown(frame.filename, roots)} line {frame.lineno}"
    code = getattr(getattr(defined_at, "__func__", defined_at), "__code__", None)
    if code is not None and not _in_project(code.co_filename):
        return f"{_shown(code.co_filename, roots)} line {code.co_firstlineno}"
    return ""


def _shown(filename: str, roots: tuple[str, ...]) -> str:
    """A file as the user knows it: from its package's folder (`mypkg/prm.py`), or its name."""
    for root in roots:
        if root.endswith("/") and filename.startswith(root):
            return str(Path(root).name + "/" + filename[len(root):])
    return Path(filename).name
