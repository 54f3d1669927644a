"""A problem's data fields (MATH500's level and subject) travel into its result record, and
`ets eval --by NAME` gives the accuracy of each group of problems sharing a value."""

from __future__ import annotations

import json

import pytest

import ets
from ets.app.by_field import MISSING, accuracy_by
from ets.app.cli import main
from ets.config import DataConfig
from ets.data import load_problems
from tests.helpers import one_line_error, run_cli


def _record(answer: str, truth: str, fields: dict | None) -> dict:
    return {"id": f"{answer}-{truth}-{fields}", "ground_truth": truth, **({"fields": fields} if fields else {}),
            "trajectories": [{"answer": answer, "step_scores": [0.9]}]}


def test_groups_in_order_numbers_by_size_then_text_and_those_without_last():
    records = [_record("1", "1", {"level": 10}), _record("1", "2", {"level": 2}), _record("3", "3", {"level": 2}),
               _record("4", "4", {"level": "hard"}), _record("5", "6", None), _record("7", None, {"level": 2})]
    groups = accuracy_by(records, "level", "last", "weighted")
    assert list(groups) == ["2", "10", "hard", MISSING]
    assert groups["2"] == {"problems": 2, "correct": 1, "accuracy": 0.5, "ungraded": 1}
    assert groups["10"]["accuracy"] == 1.0 and groups[MISSING] == {"problems": 1, "correct": 0, "accuracy": 0.0}


def test_a_data_files_other_short_fields_are_kept_and_long_ones_left_out(tmp_path):
    data = tmp_path / "d.jsonl"
    rows = [{"problem": "What is 1 + 1?", "solution": "So $\\boxed{2}$.", "answer": "2", "level": 1,
             "subject": "Algebra", "unique_id": "a/1", "notes": "x" * 201, "tags": ["a"], "weight": 0.5},
            {"prompt": "What is 2 + 2?", "target": "4", "uid": "u-7", "level": 3}]
    data.write_text(json.dumps(rows[0]) + "\n")
    (problem,) = load_problems(DataConfig(path=str(data)))
    assert problem.id == "a/1" and problem.fields == {"level": 1, "subject": "Algebra", "weight": 0.5}
    data.write_text(json.dumps(rows[1]) + "\n")
    (problem,) = load_problems(DataConfig(path=str(data), question_field="prompt", answer_field="target"))
    assert problem.fields == {"uid": "u-7", "level": 3}
    assert ets.Problem("What is 1 + 1?", fields={"level": 4}).fields == {"level": 4}
    with pytest.raises(ets.DataError, match="field 'steps' = .* a field is a name and a number"):
        ets.Problem("What is 1 + 1?", fields={"steps": [1, 2]})


def test_eval_by_a_field_of_a_run(tmp_path, capsys):
    data, out = tmp_path / "d.jsonl", tmp_path / "r.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}",
                                        "level": 1 + i % 2}) + "\n" for i in range(4)))
    assert run_cli(f"data.path={data}", "width=2", "max_depth=2", f"output={out}") == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["fields"]["level"] for r in records) == [1, 1, 2, 2]
    capsys.readouterr()
    assert main(["eval", str(out), "--by", "level"]) == 0
    table = capsys.readouterr().out.splitlines()[1:]
    assert table[0] == "| level | problems | correct | accuracy |" and [row.split(" | ")[1] for row in table[2:]] == ["2", "2"]
    assert main(["eval", str(out), "--by", "level", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["by"]["level"]) == {"1", "2"}
    assert "no record has the field 'subjet'; their fields: level" in one_line_error(
        capsys, main(["eval", str(out), "--by", "subjet"]))
    assert "--by is not an option of --at-n" in one_line_error(capsys, main(["eval", str(out), "--by", "level",
                                                                              "--at-n"]))
