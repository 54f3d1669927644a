"""What the readers of results files need of each record, checked before they read it.

`ets eval`, `compare`, `diagnose` and `rescore` read records that `ets run` wrote, or that
someone edited, concatenated or made by hand. Each reader names the fields it reads (a
`Needs`); a record without one, or holding it in another shape (`step_scores: null`, a
trajectory that is not an object), is refused in one line naming the file, the record
and the field, rather than failing somewhere inside the command. A problem twice in one
file (two outputs concatenated) is refused naming its id: it would count twice.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, Callable, NamedTuple, Sequence


def _number(v: Any) -> bool:
    # finite: `ets run` writes no NaN or infinity, and an edited file's would break the
    # votes (a NaN is neither larger nor smaller than any score)
    return isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


def _numbers(v: Any) -> bool:
    return isinstance(v, list) and all(_number(s) for s in v)


# field -> (test of its value, what it must be)
SHAPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "id": (lambda v: isinstance(v, (str, int)) and not isinstance(v, bool), "a string"),
    "question": (lambda v: isinstance(v, str), "a string"),
    "ground_truth": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "correct": (lambda v: v is None or isinstance(v, bool), "true, false or null"),
    "kv_size": (_number, "a finite number"),
    "generated_tokens": (_number, "a finite number"),
    "trajectories": (lambda v: isinstance(v, list), "a list"),
    # of each trajectory
    "answer": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "step_scores": (_numbers, "a list of finite numbers"),
    "steps": (_strings, "a list of strings"),
    "finish": (lambda v: isinstance(v, str), "a string"),
}


class Needs(NamedTuple):
    """The fields a command reads: of each record, and of each of its trajectories."""
    command: str
    record: tuple[str, ...]
    trajectory: tuple[str, ...] = ()


EVAL = Needs("eval", ("ground_truth", "trajectories"), ("answer", "step_scores"))
COMPARE = Needs("compare", ("id", "correct", "kv_size"))
DIAGNOSE = Needs("diagnose", ("ground_truth", "correct", "trajectories"), ("answer", "step_scores", "steps", "finish"))
RESCORE = Needs("rescore", ("id", "question", "ground_truth", "kv_size", "generated_tokens", "trajectories"),
                ("steps", "finish"))


def _show(value: Any) -> str:
    text = "null" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def records_problem(numbered: Sequence[tuple[int, dict[str, Any]]], file: str, needs: Needs,
                    unit: str = "line") -> str | None:
    """`numbered`: (number of the `unit` of `file` it is on, record). What is wrong with the first
    record that lacks a field `needs` names, or holds it in another shape, or holds a
    problem id already seen, in one line naming the file, the record and the field; None
    if nothing is."""
    seen: dict[Any, int] = {}
    hint = f"ets {needs.command} reads the records `ets run` writes"
    fields = tuple(dict.fromkeys((*needs.record, *(("trajectories",) if needs.trajectory else ()))))
    for number, record in numbered:
        pid = record.get("id")
        place = f"{file}: {unit} {number}" + (f" (problem {pid!r})" if pid is not None else "")
        why = _first_wrong(record, fields, place)
        if why is None and needs.trajectory:
            for k, traj in enumerate(record["trajectories"]):
                if not isinstance(traj, dict):
                    why = f"{place}: trajectory {k} is {_show(traj)}, not an object"
                else:
                    why = _first_wrong(traj, needs.trajectory, f"{place}, trajectory {k}")
                if why is not None:
                    break
        if why is not None:
            return f"{why}; {hint}"
        if pid is None:
            continue
        if pid in seen:
            return (f"{file}: {unit}s {seen[pid]} and {number} both hold problem {pid!r} (two outputs "
                    "concatenated?); keep one record per problem, or pass the outputs as separate files")
        seen[pid] = number
    return None


def _first_wrong(obj: dict[str, Any], fields: Sequence[str], where: str) -> str | None:
    """What is wrong with the first of `fields` that `obj` lacks or holds in another shape."""
    for field in fields:
        if field not in obj:
            return f"{where}: no {field!r} field"
        test, shape = SHAPES[field]
        if not test(obj[field]):
            return f"{where}: {field!r} is {_show(obj[field])}, not {shape}"
    return None
