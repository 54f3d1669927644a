"""Accuracy of a results file under a chosen aggregation and vote.

Reads `ets run` output (JSONL) or the ETS public code's `answers.json`, re-chooses each
problem's answer from its trajectories' answers and step scores, and grades it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ets.answers.aggregate import choose_answer
from ets.answers.grading import is_equivalent
from ets.app.jsonl import read_records


class EvalError(ValueError):
    """A results file cannot be evaluated; the message names the file and the fix."""


def load_results(path: str | Path) -> list[dict[str, Any]]:
    """Records with `ground_truth` and `trajectories` (`answer`, `step_scores`)."""
    path = Path(path)
    if not path.is_file():
        raise EvalError(f"results file {str(path)!r} does not exist; pass the output of `ets run`")
    if path.suffix == ".json":
        from ets.app.ets_results import load_ets_public_results

        return load_ets_public_results(path)
    try:
        records = read_records(path)
    except ValueError as exc:
        raise EvalError(str(exc)) from exc
    if not records:
        raise EvalError(f"results file {str(path)!r} holds no results; is the run still starting, or did it write elsewhere?")
    for i, r in enumerate(records, 1):
        if "trajectories" not in r or "ground_truth" not in r:
            raise EvalError(f"{path}: record {i} has no 'trajectories'/'ground_truth'; is this an `ets run` output?")
    return records


def evaluate(records: list[dict[str, Any]], aggregation: str, vote: str, *,
             float_rounding: int | None = None) -> dict[str, Any]:
    """Accuracy under `aggregation` and `vote`. Decimals grade exactly unless `float_rounding`
    (decimal places) allows a tolerance (ets/answers/grading.py)."""
    if float_rounding is not None and float_rounding < 0:
        raise EvalError(f"--float-rounding {float_rounding}: give a number of decimal places >= 0")
    correct = 0
    for r in records:
        trajs = r["trajectories"]
        chosen = choose_answer([t["answer"] for t in trajs], [t["step_scores"] for t in trajs], aggregation, vote)
        correct += bool(chosen is not None and r["ground_truth"] is not None
                        and is_equivalent(chosen, r["ground_truth"], float_rounding=float_rounding))
    n = len(records)
    out = {"problems": n, "correct": correct, "accuracy": correct / n if n else 0.0, "aggregation": aggregation,
           "vote": vote}
    if float_rounding is not None:
        out["float_rounding"] = float_rounding
    return out
