"""Validated options for reward models, and what every built-in is given when it is built.

Each built-in reward declares a dataclass of its options. `parse_options` turns the
config's free-form `reward.options` mapping into that dataclass: an unknown key or a value
of the wrong type raises `ConfigError` naming the reward, the key and the allowed keys;
the dataclass's own `__post_init__` checks values (and may raise `ValueError`, which is
re-raised as a `ConfigError` naming the reward).
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, fields
from typing import Any, Mapping

from ets.config import ConfigError


@dataclass(frozen=True)
class RewardContext:
    """What a built-in reward needs besides its options (resolved by the registry)."""

    name: str                 # the reward's name as configured; appears in error messages
    model: str | None         # reward.model, else the policy's model, else None
    device: str = "cpu"
    dtype: str = "float32"
    engine: Any = None        # a policy engine that the reward may share (same model only)
    use_engine: bool = True   # False when the policy runs on the plain `transformers` path
    # KV memory (ets/engine/memory.py): the policy engine's plan, which a PRM's own engine on
    # the same device sizes its pool in, and policy.memory_fraction for a plan of its own
    memory: Any = None
    memory_fraction: float | None = None
    # a PRM's own engine's linears (ets/engine/linears.py): off with policy.prepack: off, else auto
    prepack: str = "auto"


def option_fields(cls) -> list[str]:
    """The options an Options dataclass takes: its fields, less those it names as not its
    options (`not_options`: fields it inherits and refuses)."""
    return [f.name for f in fields(cls) if f.name not in getattr(cls, "not_options", ())]


def parse_options(cls, options: Mapping[str, Any] | None, reward: str):
    """`cls(**options)`, with errors that name the reward, the key and the allowed keys."""
    options = dict(options or {})
    hints = typing.get_type_hints(cls)
    for key, value in options.items():
        if key not in {f.name for f in fields(cls)}:  # (a `not_options` field is one: its class says why)
            raise ConfigError(
                f"reward {reward!r}: unknown option {key!r}; allowed options: {', '.join(option_fields(cls))}"
            )
        if not _matches(value, hints[key]):
            raise ConfigError(
                f"reward {reward!r}: option {key!r} = {value!r} must be of type {_type_name(hints[key])}"
            )
    try:
        return cls(**options)
    except ValueError as exc:
        raise ConfigError(f"reward {reward!r}: {exc}") from exc


def _alternatives(hint) -> tuple:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _matches(value: Any, hint) -> bool:
    for alt in _alternatives(hint):
        if alt is type(None) and value is None:
            return True
        if alt is Any:
            return True
        if alt is bool and isinstance(value, bool):
            return True
        if alt is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if alt in (int, str) and isinstance(value, alt) and not isinstance(value, bool):
            return True
    return False


def _type_name(hint) -> str:
    return " or ".join("None" if a is type(None) else getattr(a, "__name__", str(a)) for a in _alternatives(hint))


def check_dtype(value: str | None) -> None:
    """For `__post_init__`: a PRM's own `dtype` option, one of the model dtypes (None: the
    policy's)."""
    from ets.config.sections import DTYPES

    if value is not None:
        choice("dtype", value, DTYPES)


def choice(key: str, value: Any, allowed: tuple) -> None:
    """For `__post_init__`: a ValueError naming the key and the allowed values."""
    if value not in allowed:
        raise ValueError(f"option {key!r} = {value!r} is not allowed; choose one of: {', '.join(map(str, allowed))}")
