"""`ets eval --by NAME`: the accuracy of each group of problems that share a value of one of
their data fields (the records' `fields`: MATH500's `level` or `subject`, a field of your
own data), under the chosen aggregation and vote."""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from ets.answers.accuracy import accuracy
from ets.app.evaluate import EvalError, graded_outcomes

# the group of the records that lack the field
MISSING = "(none)"


def accuracy_by(records: Sequence[dict[str, Any]], name: str, aggregation: str, vote: str, *,
                float_rounding: int | None = None) -> dict[str, dict[str, Any]]:
    """{value: {problems, correct, accuracy[, ungraded]}} for each value of field `name`,
    in order (numbers by size, then text; the records without it last, as MISSING)."""
    return by_groups(records, graded_outcomes(list(records), aggregation, vote, float_rounding), name)


def by_groups(records: Sequence[dict[str, Any]], outcomes: Sequence[bool | None], name: str) -> dict[str, dict[str, Any]]:
    """`accuracy_by` of records already graded (`outcomes`, one per record)."""
    groups: dict[Any, list[bool | None]] = {}
    for r, outcome in zip(records, outcomes):
        groups.setdefault((r.get("fields") or {}).get(name), []).append(outcome)
    if set(groups) == {None}:
        known = sorted({k for r in records for k in (r.get("fields") or {})})
        raise EvalError(f"--by {name}: no record has the field {name!r}; "
                        + (f"their fields: {', '.join(known)}" if known else
                           "these records have no fields (their data held only the question, answer and id)"))
    ordered = sorted((v for v in groups if v is not None),
                     key=lambda v: (0, float(v), "") if isinstance(v, (int, float)) else (1, 0.0, str(v)))
    out = {}
    for value in [*ordered, *([None] if None in groups else [])]:
        acc = accuracy(groups[value])
        out[MISSING if value is None else str(value)] = {
            "problems": acc.graded, "correct": acc.correct, "accuracy": acc.value,
            **({"ungraded": acc.ungraded} if acc.ungraded else {})}
    return out


def by_table(name: str, groups: dict[str, dict[str, Any]]) -> list[str]:
    """The groups as a Markdown table: problems graded, correct, accuracy."""
    lines = [f"| {name} | problems | correct | accuracy |", "|---|---|---|---|"]
    for value, g in groups.items():
        accuracy_cell = f"{g['accuracy']:.1%}" if g["problems"] else "-"
        lines.append(f"| {value} | {g['problems']} | {g['correct']} | {accuracy_cell} |")
    return lines


def seeds_table(name: str, per_seed: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """A sweep's run over its seeds: each group's accuracy as mean ± sd over the seeds (its
    problems are the same in every seed)."""
    values = list(dict.fromkeys(v for groups in per_seed.values() for v in groups))
    lines = [f"| {name} | problems | accuracy (mean ± sd over {len(per_seed)} seeds, points) |", "|---|---|---|"]
    for value in values:
        found = [groups[value] for groups in per_seed.values() if value in groups and groups[value]["problems"]]
        if not found:
            lines.append(f"| {value} | 0 | - |")
            continue
        accs = [g["accuracy"] for g in found]
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        lines.append(f"| {value} | {found[0]['problems']} | {statistics.fmean(accs):.1%} ± {100 * sd:.1f} |")
    return lines
