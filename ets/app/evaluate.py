"""Accuracy of a results file under a chosen aggregation and vote.

Reads `ets run` output (JSONL) or the ETS public code's `answers.json`, re-chooses each
problem's answer from its trajectories' answers and step scores, and grades it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ets.answers.aggregate import choose_answer
from ets.answers.accuracy import accuracy, grade, nothing_to_grade
from ets.app.jsonl import numbered_records
from ets.app.records import EVAL, Needs, records_problem
from ets.paths import special_kind


class EvalError(ValueError):
    """A results file cannot be evaluated; the message names the file and the fix."""


def load_results(path: str | Path, needs: Needs = EVAL) -> list[dict[str, Any]]:
    """The records of a results file (`ets run`'s JSONL, or the ETS code's answers.json),
    each holding the fields `needs` names (ets/app/records.py), each problem once."""
    path = Path(path)
    if not path.is_file():
        kind = special_kind(path)
        what = "does not exist" if kind is None else f"is {kind}, not a results file"
        raise EvalError(f"results file {str(path)!r} {what}; pass the output of `ets run`")
    for side, what in ((".summary.json", "summary"), (".config.json", "provenance")):
        if path.name.endswith(side):  # beside a run's results, not them
            results = path.with_name(path.name.removesuffix(side) + ".jsonl")
            raise EvalError(f"{str(path)!r} is a run's {what}, not its results; pass {str(results)!r}")
    if path.suffix == ".json":
        from ets.app.ets_results import load_ets_public_results

        numbered, unit = list(enumerate(load_ets_public_results(path))), "record"
    else:
        try:
            numbered, unit = numbered_records(path), "line"
        except ValueError as exc:
            raise EvalError(str(exc)) from exc
    if not numbered:
        raise EvalError(f"results file {str(path)!r} holds no results; is the run still starting, or did it write elsewhere?")
    why = records_problem(numbered, str(path), needs, unit)
    if why is not None:
        raise EvalError(why)
    return [record for _, record in numbered]


def evaluate(records: list[dict[str, Any]], aggregation: str, vote: str, *,
             float_rounding: int | None = None, by: str | None = None) -> dict[str, Any]:
    """Accuracy under `aggregation` and `vote`, over the problems with a ground truth
    (`problems`; those without one are counted as `ungraded`, when there are any).
    Decimals grade exactly unless `float_rounding` (decimal places) allows a tolerance
    (ets/answers/grading.py). `by`: also each group's sharing a value of that data field
    (`ets eval --by`), as `by: {field: groups}`, from the same grading."""
    outcomes = graded_outcomes(records, aggregation, vote, float_rounding)
    acc = accuracy(outcomes)
    if records and not acc.graded:
        raise EvalError(nothing_to_grade(acc.ungraded))
    out = {"problems": acc.graded, "correct": acc.correct, "accuracy": acc.value, "aggregation": aggregation,
           "vote": vote, **({"ungraded": acc.ungraded} if acc.ungraded else {})}
    if float_rounding is not None:
        out["float_rounding"] = float_rounding
    if by is not None:
        from ets.app.by_field import by_groups

        out["by"] = {by: by_groups(records, outcomes, by)}
    return out


def graded_outcomes(records: list[dict[str, Any]], aggregation: str, vote: str,
                    float_rounding: int | None = None) -> list[bool | None]:
    """Each record's answer chosen again under `aggregation` and `vote`, graded (None: no
    ground truth)."""
    if float_rounding is not None and float_rounding < 0:
        raise EvalError(f"--float-rounding {float_rounding}: give a number of decimal places >= 0")
    outcomes = []
    for r in records:
        trajs = r["trajectories"]
        chosen = choose_answer([t["answer"] for t in trajs], [t["step_scores"] for t in trajs], aggregation, vote)
        outcomes.append(grade(chosen, r["ground_truth"], float_rounding=float_rounding))
    return outcomes
