"""`ets eval a.jsonl b.jsonl ...`: the slices of one dataset, searched apart, evaluated as
one run; overlaps, concatenated outputs and other configs refused in one line. Real runs
of the tiny config (configs/tiny.yaml), each slice a data file of its own."""

import json
import shutil

import pytest

from ets.app.cli import main
from tests.helpers import one_line_error, run_cli


def write_data(path, numbers):
    path.write_text("".join(json.dumps({"question": f"What is {a} plus {a}?", "answer": f"#### {2 * a}"}) + "\n"
                            for a in numbers))
    return path


def eval_json(capsys, *argv):
    assert main(["eval", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def slices(tmp_path_factory):
    """Two slices of one dataset (two data files), a slice run with another width, and the
    whole dataset in one run."""
    d = tmp_path_factory.mktemp("slices")
    first, second = write_data(d / "data_first.jsonl", [1, 2]), write_data(d / "data_second.jsonl", [3, 4])
    whole = write_data(d / "data_whole.jsonl", [1, 2, 3, 4])
    for name, data, extra in (("a", first, ()), ("b", second, ()), ("wide", second, ("width=8",)),
                              ("whole", whole, ())):
        assert run_cli("method=best_of_n", f"data.path={data}", f"output={d / name}.jsonl", *extra) == 0
    return d


def test_slices_merge_into_the_run_of_the_whole_dataset(slices, capsys):
    merged = eval_json(capsys, slices / "a.jsonl", slices / "b.jsonl", "--vote", "majority")
    whole = eval_json(capsys, slices / "whole.jsonl", "--vote", "majority")
    assert merged["problems"] == 4 and merged["files"] == [str(slices / "a.jsonl"), str(slices / "b.jsonl")]
    assert (merged["correct"], merged["accuracy"]) == (whole["correct"], whole["accuracy"])
    assert main(["eval", str(slices / "a.jsonl"), str(slices / "b.jsonl")]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("accuracy ") and line.endswith("agg=last vote=weighted, 2 files")


def test_one_file_prints_the_line_it_always_did(slices, capsys):
    result = eval_json(capsys, slices / "a.jsonl")
    assert "files" not in result
    assert main(["eval", str(slices / "a.jsonl")]) == 0
    assert capsys.readouterr().out == (f"accuracy {result['accuracy']:.1%} ({result['correct']}/2) "
                                       "agg=last vote=weighted\n")


def test_a_problem_in_two_files_or_twice_in_one_is_refused(slices, tmp_path, capsys):
    a = slices / "a.jsonl"
    first_id = json.loads(a.read_text().splitlines()[0])["id"]
    copy = tmp_path / "copy.jsonl"
    shutil.copy(a, copy)
    shutil.copy(slices / "a.config.json", tmp_path / "copy.config.json")
    err = one_line_error(capsys, main(["eval", str(a), str(copy)]))
    assert f"problem {first_id!r} is in both {a} and {copy}" in err
    assert "named twice" in one_line_error(capsys, main(["eval", str(a), str(a)]))
    both = tmp_path / "both.jsonl"                 # two outputs concatenated into one file
    both.write_text(a.read_text() + a.read_text())
    err = one_line_error(capsys, main(["eval", str(both)]))
    assert f"lines 1 and 3 both hold problem {first_id!r}" in err and str(both) in err


def test_files_of_different_configs_are_refused_naming_the_keys(slices, tmp_path, capsys):
    err = one_line_error(capsys, main(["eval", str(slices / "a.jsonl"), str(slices / "wide.jsonl")]))
    assert "made by different configs (search.width: 4 -> 8)" in err
    # what the data is, not where it lies, must agree too
    made = json.loads((slices / "b.config.json").read_text())
    made["recorded"]["data.format"] = "math500"
    shutil.copy(slices / "b.jsonl", tmp_path / "b.jsonl")
    (tmp_path / "b.config.json").write_text(json.dumps(made))
    err = one_line_error(capsys, main(["eval", str(slices / "a.jsonl"), str(tmp_path / "b.jsonl")]))
    assert "data.format: 'auto' -> 'math500'" in err
    # a file whose config record is gone: what made it is unknown
    shutil.copy(slices / "b.jsonl", tmp_path / "bare.jsonl")
    err = one_line_error(capsys, main(["eval", str(slices / "a.jsonl"), str(tmp_path / "bare.jsonl")]))
    assert "bare.jsonl has no readable bare.config.json" in err


def test_hand_made_slices_without_config_records_merge_on_their_ids(tmp_path, capsys):
    traj = lambda answer, score: {"steps": ["s"], "step_scores": [score], "answer": answer}
    right = {"id": "p0", "ground_truth": "7", "trajectories": [traj("7", 0.9), traj("8", 0.2)]}
    wrong = {"id": "p1", "ground_truth": "3", "trajectories": [traj("5", 0.9)]}
    also_right = {"id": "p2", "ground_truth": "1", "trajectories": [traj("1", 0.5)]}
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps(right) + "\n" + json.dumps(wrong) + "\n")
    b.write_text(json.dumps(also_right) + "\n")
    merged = eval_json(capsys, a, b)
    assert (merged["problems"], merged["correct"]) == (3, 2)
    b.write_text(json.dumps({**also_right, "id": "p1"}) + "\n")
    assert f"problem 'p1' is in both {a} and {b}" in one_line_error(capsys, main(["eval", str(a), str(b)]))


@pytest.mark.parametrize("side, what", [("summary", "summary"), ("config", "provenance")])
def test_a_runs_side_file_given_as_its_results_names_them(slices, capsys, side, what):
    given = slices / f"a.{side}.json"
    msg = one_line_error(capsys, main(["eval", str(given)]))
    assert msg == f"ets: error: {str(given)!r} is a run's {what}, not its results; pass {str(slices / 'a.jsonl')!r}"
