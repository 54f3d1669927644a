"""The error every config check raises, and the small checks the sections share."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A configuration key or value is not valid; the message names it and the fix."""


def choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: {value!r} is not allowed; choose one of: {', '.join(allowed)}")


def positive(key: str, value: Any, zero_ok: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (value >= 0 if zero_ok else value > 0)
    if not ok:
        raise ConfigError(f"{key}: {value!r} must be a number {'>= 0' if zero_ok else '> 0'}")


def integer(key: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{key}: {value!r} must be an integer >= {minimum}")
