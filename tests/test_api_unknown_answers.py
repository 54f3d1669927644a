"""A problem without a ground truth is graded unknown: `correct: null` in its record, and
left out of every accuracy (the run's summary, `ets eval`, `--at-n`, `compare`,
`diagnose`), each saying how many it left out (ets/answers/accuracy.py). Real records of
the tiny config's models, written to files as a Python user would."""

from __future__ import annotations

import json

import pytest

import ets
from ets.answers.accuracy import accuracy, grade
from ets.app.cli import main
from ets.app.paired import correct_by_problem
from ets.app.run import summarize
from tests.helpers import TINY, one_line_error

QUESTIONS = ["What is 2 + 3?", "What is 4 + 4?", "What is 6 - 1?"]
OVERRIDES = ["width=4", "max_depth=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two methods over three questions: the first without a ground truth, the second with
    the answer the search is known to choose (right), the third with one it cannot (wrong);
    each run's records written as a JSONL file."""
    folder = tmp_path_factory.mktemp("unknown")
    chosen = [r["answer"] for r in ets.search(TINY, QUESTIONS, overrides=OVERRIDES)]
    assert chosen[1] is not None  # the tiny policy writes numbers: a right answer to take
    problems = [ets.Problem(QUESTIONS[0]), ets.Problem(QUESTIONS[1], chosen[1]), ets.Problem(QUESTIONS[2], "-12345")]
    out = {}
    for method in ("rebase", "best_of_n"):
        records = ets.search(TINY, problems, overrides=[*OVERRIDES, f"method={method}"])
        out[method] = folder / f"{method}.jsonl"
        out[method].write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_records_say_unknown_right_and_wrong(runs):
    records = read(runs["rebase"])
    assert [r["ground_truth"] is None for r in records] == [True, False, False]
    assert [r["correct"] for r in records] == [None, True, False]


def test_grade_and_accuracy():
    assert grade("5", None) is None and grade(None, "5") is False and grade("5.0", "5") is True
    acc = accuracy([True, None, False, True])
    assert (acc.correct, acc.graded, acc.ungraded, acc.value) == (2, 3, 1, 2 / 3)
    assert acc.note() == "; 1 problem without a ground truth not counted" and accuracy([True]).note() == ""


def test_the_run_summary_counts_the_known_answers_only(runs):
    records = read(runs["rebase"])
    summary = summarize(records, [], 0.0, None)
    assert (summary["problems"], summary["accuracy"], summary["ungraded"]) == (3, 0.5, 1)
    assert correct_by_problem(records) == {records[1]["id"]: True, records[2]["id"]: False}
    assert "ungraded" not in summarize(records[1:], [], 0.0, None)


def test_ets_eval_says_how_many_it_left_out(runs, capsys):
    assert main(["eval", str(runs["rebase"]), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["problems"], result["correct"], result["accuracy"], result["ungraded"]) == (2, 1, 0.5, 1)
    assert main(["eval", str(runs["rebase"])]) == 0
    assert capsys.readouterr().out == ("accuracy 50.0% (1/2) agg=last vote=weighted; "
                                       "1 without a ground truth not counted\n")


def test_at_n_counts_the_known_answers_only(runs, capsys, tmp_path):
    assert main(["eval", str(runs["rebase"]), "--at-n", "--json", "--plot", str(tmp_path / "at_n.png")]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["problems"], figures["ungraded"]) == (2, 1)
    assert figures["weighted"]["mean"][-1] == 0.5  # n = W: the run's own vote, over the two known


def test_compare_and_diagnose_leave_the_unknown_out_and_say_so(runs, capsys):
    assert main(["compare", str(runs["rebase"]), str(runs["best_of_n"])]) == 0
    assert "on the 2 problems both searched (1 without a ground truth left out):" in capsys.readouterr().out
    assert main(["compare", "--wide", str(runs["rebase"]), str(runs["best_of_n"])]) == 0
    line = capsys.readouterr().out.strip()
    assert ", of 2;" in line and line.endswith("; 1 shared problem without a ground truth left out")
    assert main(["diagnose", str(runs["rebase"]), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)["rebase"]
    assert (figures["problems"], figures["ungraded"], figures["accuracy"]) == (2, 1, 0.5)


@pytest.mark.parametrize("command, what", [(["eval"], "grade"), (["eval", "--at-n"], "grade"),
                                           (["diagnose"], "diagnose")])
def test_nothing_to_grade_is_one_line(runs, tmp_path, capsys, command, what):
    only_unknown = tmp_path / "unknown.jsonl"
    only_unknown.write_text(runs["rebase"].read_text().splitlines()[0] + "\n")
    msg = one_line_error(capsys, main([*command[:1], str(only_unknown), *command[1:]]))
    assert msg.endswith(f"no problem has a ground truth (1 without one): there is nothing to {what}")
