"""Read the result files of the ETS public code (SqueezeAILab/ETS, `rebase.py`).

That code writes `answers.json`: a JSON list with one record per question,

    {"id": 0, "question": "...", "ground_truth_answer": "...", "total_tokens": 1234,
     "model_answer": [{"text": "<prompt + every step>", "step_scores": [0.9, 0.7]}, ...]}

(and the same record alone in `answer_q{id}.json`). `load_ets_public_results` turns either
into records shaped like `ets run`'s (ets/loop/record.py), so `ets eval` scores earlier runs
with this project's extraction, aggregation, vote and grader:

    {"id", "question", "ground_truth", "total_tokens",
     "trajectories": [{"text", "answer", "answer_rule", "step_scores"}, ...]}

The stored `text` is the whole state, prompt included; and the Llama prompt itself
contains "\\boxed{answer}". So answers are extracted from what follows the question only,
by the rules `search.compat: ets_code` reads answers with (a `\\boxed{}`, an answer phrase,
`####`; never a bare last number, which that code's evaluation does not take either).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ets.answers.extract import extract
from ets.config import MARKED_ANSWER_RULES
from ets.data import DataError


def _generated_part(text: str, question: str) -> str:
    """The text after the (last copy of the) question: the policy's own steps."""
    at = text.rfind(question) if question else -1
    return text[at + len(question):] if at >= 0 else text


def _convert(record: Any, where: str) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}; is this an ETS answers.json?")
    missing = [k for k in ("model_answer", "ground_truth_answer") if k not in record]
    if missing:
        raise DataError(f"{where}: no field {', '.join(map(repr, missing))}; an ETS answers.json record has "
                        "model_answer (a list of {text, step_scores}) and ground_truth_answer")
    question = str(record.get("question", ""))
    if not isinstance(record["model_answer"], list):
        raise DataError(f"{where}: model_answer must be a list of {{text, step_scores}} objects")
    trajectories = []
    for k, traj in enumerate(record["model_answer"]):
        if not isinstance(traj, dict) or "text" not in traj or "step_scores" not in traj:
            raise DataError(f"{where}: model_answer[{k}] must be an object with text and step_scores")
        scores = traj["step_scores"]
        if not isinstance(scores, list) or not all(isinstance(s, (int, float)) for s in scores):
            raise DataError(f"{where}: model_answer[{k}].step_scores must be a list of numbers")
        text = str(traj["text"])
        found = extract(_generated_part(text, question), MARKED_ANSWER_RULES)
        trajectories.append({
            "text": text,
            "answer": found.answer,
            "answer_rule": found.rule,
            "step_scores": [float(s) for s in scores],
        })
    return {
        "id": record.get("id"),
        "question": question,
        "ground_truth": None if record["ground_truth_answer"] is None else str(record["ground_truth_answer"]),
        "total_tokens": record.get("total_tokens"),
        "trajectories": trajectories,
    }


def _looks_like_jsonl(text: str) -> bool:
    """Whether `text` begins with a whole line that is a JSON object of `ets run`."""
    first = text.split("\n", 1)[0]
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return "\n" in text and isinstance(record, dict) and "trajectories" in record


def load_ets_public_results(path: str | Path) -> list[dict[str, Any]]:
    """Records of an ETS public-code `answers.json` (a list) or `answer_q{id}.json` (one)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"results file {str(path)!r} does not exist; pass the ETS run's answers.json")
    text = ""
    try:
        text = path.read_text(encoding="utf-8")
        loaded = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        if _looks_like_jsonl(text):
            raise DataError(f"{path} holds one result per line (JSONL), as `ets run` writes, not the ETS code's "
                            f"answers.json, which is what a .json file is read as; rename it "
                            f"{path.with_suffix('.jsonl').name} (its config and summary keep their names) "
                            "and evaluate that") from None
        raise DataError(f"{path}: not a JSON file ({exc}); pass the ETS run's answers.json") from None
    records = loaded if isinstance(loaded, list) else [loaded]
    if not records:
        raise DataError(f"{path}: holds no records; the ETS run may not have finished")
    return [_convert(r, f"{path} record {i}") for i, r in enumerate(records)]

