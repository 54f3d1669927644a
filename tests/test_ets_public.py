"""Reading the ETS public code's answers.json and scoring it with our grader."""

import json

import pytest

from ets.answers.aggregate import choose_answer
from ets.data import DataError
from ets.app.ets_results import load_ets_public_results
from ets.answers.grading import is_equivalent

LLAMA_PROMPT = "... always conclude with: Therefore, the final answer is: $\\boxed{answer}$.\n"
RECORDS = [
    {   # weighted/last: 1/2 -> 0.9 + 0.3 = 1.2 beats 3 -> 0.95: correct; best picks "3": wrong
        "id": 0, "question": "What is 1/2?", "ground_truth_answer": "0.5", "total_tokens": 30,
        "model_answer": [
            {"text": "What is 1/2?\nIt is half. The answer is: \\frac{1}{2}", "step_scores": [0.5, 0.9]},
            {"text": "What is 1/2?\nThe answer is: 3", "step_scores": [0.95]},
            {"text": "What is 1/2?\nSo 0.5. The answer is: 0.5", "step_scores": [0.6, 0.3]},
        ],
    },
    {   # the only trajectory has no answer of its own; the prompt's \boxed{answer} must not count
        "id": 1, "question": "What is 2+2?", "ground_truth_answer": "4", "total_tokens": 10,
        "model_answer": [{"text": LLAMA_PROMPT + "What is 2+2?\n2+2 is four", "step_scores": [0.9]}],
    },
]


def write(tmp_path, obj):
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return path


def score(records, aggregation, vote):
    """What `ets eval` does with the records: choose an answer, grade it."""
    out = []
    for r in records:
        trajs = r["trajectories"]
        chosen = choose_answer([t["answer"] for t in trajs], [t["step_scores"] for t in trajs], aggregation, vote)
        out.append(is_equivalent(chosen, r["ground_truth"]))
    return out


def test_load_and_score(tmp_path):
    records = load_ets_public_results(write(tmp_path, RECORDS))
    trajs = records[0]["trajectories"]
    assert [t["answer"] for t in trajs] == ["\\frac{1}{2}", "3", "0.5"]
    assert [t["step_scores"] for t in trajs] == [[0.5, 0.9], [0.95], [0.6, 0.3]]
    assert trajs[0]["text"] == RECORDS[0]["model_answer"][0]["text"]
    assert (records[0]["id"], records[0]["ground_truth"], records[0]["total_tokens"]) == (0, "0.5", 30)
    assert [t["answer"] for t in records[1]["trajectories"]] == [None]
    assert score(records, "last", "weighted") == [True, False]
    assert score(records, "last", "best") == [False, False]


def test_single_record_file(tmp_path):
    assert len(load_ets_public_results(write(tmp_path, RECORDS[0]))) == 1


@pytest.mark.parametrize(
    "content, message",
    [
        ("{oops", "not a JSON file"),
        ([], "holds no records"),
        ([{"question": "q"}], "no field 'model_answer', 'ground_truth_answer'"),
        ([{"model_answer": {}, "ground_truth_answer": "1"}], "model_answer must be a list"),
        ([{"model_answer": [{"text": "t"}], "ground_truth_answer": "1"}], r"model_answer\[0\] must be an object"),
        ([{"model_answer": [{"text": "t", "step_scores": "x"}], "ground_truth_answer": "1"}], "list of numbers"),
        ([3], "expected a JSON object"),
    ],
)
def test_bad_files(tmp_path, content, message):
    with pytest.raises(DataError, match=message):
        load_ets_public_results(write(tmp_path, content))


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_ets_public_results(tmp_path / "answers.json")
