"""User code named in a config as `module:attr` (a reward, a search strategy): imported,
its options checked against its signature, what it raises told as one line, and its source
fingerprinted for the run's provenance.

    obj = import_object("mypkg.strats:MyStrategy", STRATEGY_KIND, name)
    check_options(obj, {"bonus": 0.1}, kind, name, skip=1)   # ConfigError naming a bad key
    step = guarded(obj.select, kind, name, module_of(obj), "", advice)

The boundary is where ets hands control to the plug-in: importing its module, building it,
calling it. An exception that comes out of the plug-in's code (or of a library it called)
there becomes the kind's `PluginError`, its traceback logged at DEBUG (`--log-level
DEBUG`). Two kinds pass through unchanged: the project's own error types (a plug-in may
raise `ConfigError`, or its kind's own, to say what is wrong: they are one line already),
and an exception raised inside the project's own code that the plug-in called (a project
bug: its traceback is what finds it).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import logging
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from ets import namespace
from ets.config import ConfigError

log = logging.getLogger(__name__)

# The project's own code: an exception raised in it is the project's bug. One package, ets;
# its files are ets/ and, in a checkout, the folders beside it that import as ets.strategies,
# ets.rewards and ets.lp (an installed ets holds them inside ets/).
PROJECT_PACKAGES = ("ets",)
_ETS_DIR = Path(__file__).resolve().parent
_PROJECT_DIRS = tuple(f"{folder}/" for folder in (_ETS_DIR, *(_ETS_DIR.parent / name for name in namespace.MOVED.values())))
_MAX_MESSAGE = 400  # characters of the plug-in's own message kept in the line
DEBUG_HINT = "--log-level DEBUG shows the traceback"


class PluginError(ValueError):
    """A plug-in raised an exception at import, when built, or when called; the message
    names the plug-in, the exception, where in its code, and what to check."""


class Kind(NamedTuple):
    """What sort of plug-in: how messages name it, and what its faults are raised as."""

    label: str                                  # "reward", "strategy"
    plural: str                                 # "rewards", "strategies"
    error: type[PluginError]                    # its faults, one line each
    own_errors: tuple[type[BaseException], ...] = ()  # the project's errors it may raise itself
    options_key: str = "options"                # the config key that holds its options


def is_project_module(module_name: str) -> bool:
    return module_name.partition(".")[0] in PROJECT_PACKAGES


def module_of(obj: Any) -> str:
    """The module a plug-in object was defined in (its class's, for an instance)."""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        module = getattr(type(obj), "__module__", "") or ""
    return module


def import_object(spec: str, kind: Kind, name: str, known: Callable[[], Sequence[str]] = tuple) -> Any:
    """`package.module:attr.sub` -> the object; errors name the plug-in and what failed: a
    module that is not there is a ConfigError (listing `known()`, the names the kind has),
    one that fails to import is the kind's PluginError."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigError(f"{kind.label} {name!r}: {spec!r} must look like package.module:attr")
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name is not None and _is_prefix(exc.name, module_name):
            raise ConfigError(
                f"{kind.label} {name!r}: cannot import module {module_name!r} ({exc}); is it installed or on "
                f"PYTHONPATH? known {kind.plural}: {', '.join(known())}"
            ) from exc
        if is_project_module(module_name) or passes_through(exc, kind):
            raise  # the project's own module: a bug, its traceback finds it
        # The plug-in's module itself failed: a missing dependency, a syntax error, or
        # anything its top level raised.
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        advice = f"install {missing!r}, or fix that import" if missing else f"fix {module_name!r}"
        raise fault(kind, name, exc, module_name, f"importing its module {module_name!r}", advice) from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ConfigError(f"{kind.label} {name!r}: module {module_name!r} has no attribute {attr_path!r}") from exc
    return obj


def _is_prefix(package: str, module_name: str) -> bool:
    """`package` is `module_name` or one of its parent packages."""
    return module_name == package or module_name.startswith(package + ".")


def check_options(fn: Callable, options: Mapping[str, Any], kind: Kind, name: str, skip: int,
                  takes: str = "") -> None:
    """Can `fn(<skip positional args>, **options)` be called? Else a ConfigError naming the
    bad option and the allowed ones. `takes` names the `skip` arguments for the message
    (e.g. "(questions, trajectories)")."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins without a signature: let the call decide
    params = list(sig.parameters.values())
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    if skip and len(positional) < skip and not takes_varargs:
        raise ConfigError(f"{kind.label} {name!r} must accept {takes or f'{skip} positional arguments'}; "
                          f"its signature is {sig}")
    allowed = [p.name for p in params[skip:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not takes_kwargs:
        for key in options:
            if key not in allowed:
                raise ConfigError(
                    f"{kind.label} {name!r}: unknown option {key!r} in {kind.options_key}; allowed options: "
                    f"{', '.join(allowed) or '(none)'}"
                )
    try:
        sig.bind(*([None] * skip), **options)
    except TypeError as exc:
        raise ConfigError(f"{kind.label} {name!r}: options {dict(options)} do not fit its signature {sig}: {exc}") from exc


def passes_through(exc: BaseException, kind: Kind) -> bool:
    """Already one line (the project's error types), or a bug in the project's own code."""
    from ets.models.load import ModelLoadError

    if isinstance(exc, (ConfigError, ModelLoadError, PluginError, *kind.own_errors)):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and _in_project(frames[-1].filename) and not _raised_at_the_call(exc.__traceback__)


def fault(kind: Kind, name: str, exc: BaseException, module: str, action: str, advice: str,
          defined_at: Callable | None = None) -> PluginError:
    """The one-line error for `exc`, raised by plug-in `name` (defined in `module`) while
    `action` ("building it"; "" when it was called); its traceback logged at DEBUG.

        reward 'mod:attr' raised ValueError: <its message> (in mod.py line 12); <advice>; ...
        strategy 'mod:attr': building it raised ValueError: <its message> (in mod.py line 4); ...
    """
    log.debug("%s %r: %s raised %s:", kind.label, name, action or "calling it", type(exc).__name__, exc_info=exc)
    where = _location(exc, module, defined_at)
    text = " ".join(str(exc.msg if isinstance(exc, SyntaxError) else exc).split())
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE - 3] + "..."
    told = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return kind.error(f"{kind.label} {name!r}{f': {action}' if action else ''} raised {told}"
                      f"{f' (in {where})' if where else ''}; {advice}; {DEBUG_HINT}")


def guarded(fn: Callable, kind: Kind, name: str, module: str, action: str, advice: str) -> Callable:
    """`fn` that turns what the plug-in raises into the kind's PluginError (see `fault`)."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if passes_through(exc, kind):
                raise
            raise fault(kind, name, exc, module, action, advice, defined_at=fn) from exc

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


def plugin_roots(module: str) -> tuple[str, ...]:
    """The plug-in's top-level package folders (each ending in `/`), or its one module
    file; found without running the plug-in's code."""
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
    return (spec.origin,) if spec.origin and Path(spec.origin).is_file() else ()


def source_fingerprint(module: str) -> str | None:
    """`sha256:<16 hex>` of the Python source of the plug-in's top-level package (every
    `.py` file under it, with its path) or of its one module file: what a run's provenance
    compares, so that an edited plug-in is a changed config. None for a module that is not
    found, is the project's own, or has no source file (a built-in or compiled module)."""
    if is_project_module(module):
        return None
    files: list[tuple[str, Path]] = []
    for root in plugin_roots(module):
        path = Path(root)
        if path.is_dir():
            files += sorted((f"{path.name}/{p.relative_to(path)}", p) for p in path.rglob("*.py")
                            if "__pycache__" not in p.parts)
        elif path.suffix == ".py":
            files.append((path.name, path))
    if not files:
        return None
    h = hashlib.sha256()
    for rel, path in files:
        h.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return "sha256:" + h.hexdigest()[:16]


def _location(exc: BaseException, module: str, defined_at: Callable | None) -> str:
    """`file.py line N`: the deepest line of the plug-in's own code in the traceback (the
    line of a SyntaxError; else where the plug-in's callable is defined)."""
    roots = plugin_roots(module)
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
