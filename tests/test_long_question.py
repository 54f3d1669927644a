"""A megabyte-long question with `policy.prompt_overflow: truncate`: the prompt keeps the end
of the question inside its template, and the reward scores the steps against that same end,
not the whole question (a PRM that read it all would run a forward of a million tokens, or
refuse it for its KV pool). Only the end of the question is tokenized again to cut it."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli

TAIL = " How many apples are there now?"
QUESTION = "Sam counts the apples in basket number 12345, and then in the next basket. " * 13_500 + TAIL
SEEN: list[str] = []


def recording(questions, trajectories):
    """A reward that remembers the questions it was given."""
    SEEN.extend(questions)
    return [[[0.5] * len(steps) for steps in per_q] for per_q in trajectories]


@pytest.fixture
def data(tmp_path):
    assert len(QUESTION) > 1_000_000
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"question": QUESTION, "answer": "#### 7"}) + "\n")
    return path


def only_record(out):
    (line,) = out.read_text().splitlines()
    return json.loads(line)


@pytest.mark.parametrize("backend", ["engine", "hf"])
def test_the_reward_sees_the_end_of_the_question_the_prompt_kept(tmp_path, data, backend):
    SEEN.clear()
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", f"data.path={data}", "policy.prompt_overflow=truncate", "policy.max_context=256",
                   f"policy.backend={backend}", f"reward.name={__name__}:recording") == 0
    record = only_record(out)
    assert record["question"] == QUESTION                       # the record keeps the whole question
    assert record["prompt_truncated_from"] > 1_000_000 and record["prompt_tokens"] <= 256 - 8
    assert SEEN and set(SEEN) == {SEEN[0]}
    assert QUESTION.endswith(SEEN[0]) and SEEN[0].endswith(TAIL) and len(SEEN[0]) < 256


def test_a_megabyte_question_runs_with_the_step_tag_prm(tmp_path, data):
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", f"data.path={data}", "policy.prompt_overflow=truncate", "policy.max_context=256",
                   "policy.backend=engine") == 0
    record = only_record(out)
    assert record["prompt_tokens"] <= 256 - 8 and all(t["step_scores"] for t in record["trajectories"])
