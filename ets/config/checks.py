"""The error every config check raises, and the small checks the sections share."""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping, Sequence


class ConfigError(ValueError):
    """A configuration key or value is not valid; the message names it and the fix."""


def did_you_mean(word: Any, names: Iterable[str], written: Mapping[str, Sequence[str]] | None = None) -> str:
    """" (did you mean 'width'?)" for the closest of `names` to a mistyped `word`, else "";
    `written` gives what to suggest for a name where that is not the name itself (model ->
    policy.model, reward.model)."""
    close = difflib.get_close_matches(str(word), list(names), n=1, cutoff=0.75)
    if not close:
        return ""
    return f" (did you mean {' or '.join(map(repr, (written or {}).get(close[0], [close[0]])))}?)"


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
