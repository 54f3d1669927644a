"""The error every config check raises, and the checks the sections share: each field's
value against its annotation (`check_fields`), and the ranges and choices of single keys."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from typing import Any, Iterable, Mapping, Sequence


class ConfigError(ValueError):
    """A configuration key or value is not valid; the message names it and the fix."""


def plural(count: int, word: str, many: str | None = None) -> str:
    """`1 problem`, `2 problems` (`many` for a plural that is not word + "s"): for messages."""
    return f"{count} {word if count == 1 else many or word + 's'}"


def did_you_mean(word: Any, names: Iterable[str], written: Mapping[str, Sequence[str]] | None = None) -> str:
    """" (did you mean 'width'?)" for the closest of `names` to a mistyped `word`, else "";
    `written` gives what to suggest for a name where that is not the name itself (model ->
    policy.model, reward.model)."""
    close = difflib.get_close_matches(str(word), list(names), n=1, cutoff=0.75)
    if not close:
        return ""
    return f" (did you mean {' or '.join(map(repr, (written or {}).get(close[0], [close[0]])))}?)"


def switch(value: Any) -> Any:
    """A mode key's value (auto | on | off) as it was meant: YAML reads a bare on / off as
    true / false. Anything else is returned as it is, for `choice` to check."""
    return ("on" if value else "off") if isinstance(value, bool) else value


def choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: {value!r} is not allowed{did_you_mean(value, allowed)}; "
                          f"choose one of: {', '.join(allowed)}")


def positive(key: str, value: Any, zero_ok: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (value >= 0 if zero_ok else value > 0)
    if not ok:
        raise ConfigError(f"{key}: {value!r} must be a number {'>= 0' if zero_ok else '> 0'}")


def integer(key: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{key}: {value!r} must be an integer >= {minimum}")


# --------------------------------------------------------------- typed fields
# Integers below this fit the signed 64 bits that torch and numpy hold seeds and sizes in.
INT_LIMIT = 2**63
# field(metadata=EMPTY_OK): an empty string is a value of its own there (other text fields
# name something, which "" cannot).
EMPTY_OK = {"empty_ok": True}


def surrogates(value: Any, path: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """(the dotted key, its surrogates escaped, e.g. `\\ud800`) of the first text in `value`
    (through its mappings and lists) holding UTF-16 surrogates: escapes Python keeps as
    they are, but no text, on which a tokenizer or a hash fails. None where there are none."""
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return ".".join(path), exc.object[exc.start:exc.end].encode("unicode_escape").decode()
        return None
    else:
        return None
    for key, item in items:
        if found := surrogates(item, (*path, str(key))):
            return found
    return None


def shown(value: Any) -> str:
    """A value as an error message shows it: its repr (null, true, false as YAML writes
    them), cut short."""
    if value is None or isinstance(value, bool):
        return str(value).lower().replace("none", "null")
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python converts
        return f"an integer of {value.bit_length():,} bits"
    return text if len(text) <= 80 else text[:77] + "..."


def check_fields(obj: Any, prefix: str = "") -> None:
    """Each field of the dataclass `obj` checked against its annotation: its type (a bool
    is not an int, text is not a bool, a number is not text), an integer within 64 bits, a
    float finite, text not empty (unless the field's metadata is EMPTY_OK). The key in a
    message is `prefix` + the field name. A field of a type this does not know is a bug."""
    hints = field_types(type(obj))
    for f in dataclasses.fields(obj):
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        check_value(prefix + f.name, getattr(obj, f.name), hints[f.name], default,
                    empty_ok=f.metadata.get("empty_ok", False))


def check_value(key: str, value: Any, kind: Any, example: Any = None, empty_ok: bool = False) -> None:
    """`value` checked as check_fields says, against the type `kind`; `example` (a field's
    default) is shown in the message when it is a plain number or text."""
    matched = _match(value, kind)
    if matched is _NO_MATCH:
        raise ConfigError(f"{key}: {shown(value)} must be {_describe(kind)}{_hint(value, kind, example)}")
    if matched is int and not -INT_LIMIT <= value < INT_LIMIT:
        bound = "below 2**63" if value > 0 else "at least -2**63"
        raise ConfigError(f"{key}: {shown(value)} must be {bound}: integers are kept in 64 bits (as torch and numpy "
                          f"keep seeds and sizes)")
    if matched is float and not _finite(value):
        raise ConfigError(f"{key}: {shown(value)} must be a finite number{_hint(value, kind, example)}")
    if matched is str and value == "" and not empty_ok:
        raise ConfigError(f"{key}: '' must not be empty{_hint(value, kind, example)}")


_NO_MATCH = object()


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Each field of the dataclass `cls` and its annotation, resolved."""
    return typing.get_type_hints(cls)


def _match(value: Any, kind: Any) -> Any:
    """The scalar type of `kind` (or of one of a union's members) that `value` is, else
    _NO_MATCH; `kind` itself for a list, mapping or dataclass."""
    if kind is Any:
        return kind
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        for member in typing.get_args(kind):
            if (matched := _match(value, member)) is not _NO_MATCH:
                return matched
        return _NO_MATCH
    if kind is type(None):
        return kind if value is None else _NO_MATCH
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:  # an integer is a number too
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is str:
        ok = isinstance(value, str)
    elif typing.get_origin(kind) is list and typing.get_args(kind) == (str,):  # one string: a list of one
        ok = isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))
    elif typing.get_origin(kind) is dict and typing.get_args(kind)[0] is str:
        ok = isinstance(value, Mapping) and all(isinstance(k, str) for k in value)
    elif dataclasses.is_dataclass(kind):
        ok = isinstance(value, kind)
    else:
        raise TypeError(f"check_fields has no rule for the type {kind!r}")
    return kind if ok else _NO_MATCH


def _describe(kind: Any) -> str:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        members = [_describe(m) for m in typing.get_args(kind) if m is not type(None)]
        text = members[0] if len(members) == 1 else ", ".join(members[:-1]) + " or " + members[-1]
        return text + (" (or null)" if type(None) in typing.get_args(kind) else "")
    if typing.get_origin(kind) is list:
        return "a list of strings"
    if typing.get_origin(kind) is dict:
        return "a mapping of names to values"
    return {bool: "true or false (unquoted)", int: "an integer", float: "a number", str: "a string"}.get(
        kind, f"a {getattr(kind, '__name__', kind)}")


def _hint(value: Any, kind: Any, example: Any) -> str:
    """What follows a type error: the field's default as an example (a plain value or a
    list), and for a number or true/false where text may stand, how to give it as text."""
    hint = ""
    if isinstance(example, (int, float, str, list)) and not isinstance(example, bool) and example not in ("", []):
        hint = f"; e.g. {example}" if isinstance(example, (int, float)) else f"; e.g. {shown(example)}"
    if isinstance(value, (int, float)) and _match("text", kind) is str:  # text that YAML read as a number or bool
        hint += (f"; quote a number meant as text: '{value}'" if type(value) is int else
                 "; quote a number meant as text" if type(value) is float else
                 "; quote a word meant as text (YAML reads yes, no, on, off, true, false as true or false)")
    return hint


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False
