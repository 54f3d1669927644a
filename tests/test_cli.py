"""`ets run` and `ets eval` as a user runs them: bundled tiny config, resumable output,
one-line errors for bad input."""

import json
import logging
import sys
from pathlib import Path

import pytest

from ets.app.cli import main
from tests.helpers import run_cli
from ets.data import question_id

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
# The tiny data has no id field: each problem's id is a hash of its question.
IDS = [question_id(json.loads(l)["question"]) for l in (ROOT / "configs" / "data" / "tiny.jsonl").read_text().splitlines()]


def lines(path):
    return [json.loads(l) for l in Path(path).read_text().splitlines()]


@pytest.mark.parametrize("method", ["best_of_n", "beam", "dvts", "rebase"])
def test_run_each_strategy_end_to_end(tmp_path, method, capsys):
    out = tmp_path / "r.jsonl"
    assert run_cli(f"method={method}", f"output={out}") == 0
    records = lines(out)
    assert [r["id"] for r in records] == IDS
    for r in records:
        assert r["method"] == method and r["ground_truth"] in {"7", "12", "20"}
        assert r["trajectories"] and all(len(t["steps"]) == len(t["step_scores"]) for t in r["trajectories"])
        assert r["kv_size"] > 0 and r["wall_time"] > 0
    summary = json.loads((tmp_path / "r.summary.json").read_text())
    assert summary["problems"] == 4
    assert "accuracy" in capsys.readouterr().out


def test_run_resumes_after_interruption(tmp_path):
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", "data.limit=2") == 0
    first = lines(out)
    # An interrupted run: one complete line and a torn one.
    out.write_text(json.dumps(first[0]) + "\n" + json.dumps(first[1])[:40])
    assert run_cli(f"output={out}") == 0
    records = lines(out)
    assert [r["id"] for r in records] == IDS  # nothing duplicated or lost
    assert records[0] == first[0]                                # kept, not recomputed
    # A rerun of a finished file does nothing and keeps it intact.
    before = out.read_text()
    assert run_cli(f"output={out}") == 0
    assert out.read_text() == before


def test_eval_recomputes_accuracy(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", "data.limit=2") == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--agg", "min", "--vote", "majority", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["problems"] == 2 and result["aggregation"] == "min" and result["vote"] == "majority"
    # The same choice made from the file's trajectories by hand.
    from ets.answers.aggregate import choose_answer
    from ets.answers.grading import is_equivalent

    expected = 0
    for r in lines(out):
        trajs = r["trajectories"]
        chosen = choose_answer([t["answer"] for t in trajs], [t["step_scores"] for t in trajs], "min", "majority")
        expected += bool(chosen is not None and is_equivalent(chosen, r["ground_truth"]))
    assert result["correct"] == expected


def test_eval_scores_a_file_whose_answers_are_right(tmp_path, capsys):
    """A hand-made results file: the vote must pick the right answer and count it."""
    traj = lambda answer, scores: {"steps": ["s"] * len(scores), "step_scores": scores, "answer": answer}
    records = [
        # weighted by last score: "7" has 0.9 + 0.2 = 1.1 against "8" with 0.8 -> correct
        {"id": "a", "ground_truth": "7", "trajectories": [traj("7", [0.9]), traj("8", [0.8]), traj("7.0", [0.2])]},
        # "5" wins the vote, the truth is "6" -> wrong
        {"id": "b", "ground_truth": "6", "trajectories": [traj("5", [0.9]), traj("6", [0.1])]},
    ]
    path = tmp_path / "hand.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["eval", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["correct"] == 1
    # With min aggregation and best vote, "b" still picks "5"; "a" picks "7" (0.9).
    assert main(["eval", str(path), "--agg", "min", "--vote", "best", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == 0.5


def _error(capsys, *argv):
    code = main(list(argv))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("ets: error:")
    return err[0]


def test_bad_input_is_one_line_and_nothing_is_corrupted(tmp_path, capsys):
    out = tmp_path / "keep.jsonl"
    out.write_text('{"id": "x", "trajectories": [], "ground_truth": "1", "correct": false, "kv_size": 0, "generated_tokens": 0}\n')
    before = out.read_text()
    cfg = ["run", "--quiet", "--config", str(TINY), f"output={out}"]

    assert "does not exist" in _error(capsys, *cfg, "data.path=/nope/data.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 1"}\nnot json\n')
    msg = _error(capsys, *cfg, f"data.path={bad}")
    assert "bad.jsonl" in msg and "2" in msg
    # the key that named the path, in the run and in --check
    assert _error(capsys, *cfg, "policy.model=/nope/model").startswith(
        "ets: error: policy.model: model path '/nope/model' does not exist")
    assert _error(capsys, *cfg, "reward.model=/nope/prm").startswith(
        "ets: error: reward.model: model path '/nope/prm' does not exist")
    assert _error(capsys, *cfg, "--check", "reward.model=/nope/prm").startswith("ets: error: reward.model: model path")
    msg = _error(capsys, *cfg, "method=alphazero")
    assert "alphazero" in msg and "rebase" in msg
    assert "does not exist" in _error(capsys, "run", "--config", str(tmp_path / "none.yaml"))
    assert out.read_text() == before


def test_output_cut_short_by_its_reader_is_no_traceback():
    """`ets presets | head -1`: the reader closes the pipe after a line; ets stops quietly."""
    import subprocess

    done = subprocess.run(["bash", "-c", f"{sys.executable} -m ets presets | head -1"], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.startswith("Presets by model name") and done.stderr == ""


def test_eval_reads_a_run_with_its_own_vote_and_aggregation(tmp_path, capsys, caplog):
    """A run made with vote=majority and aggregation=min: `ets eval` without flags grades as
    its summary did; a flag given wins for its own key alone. `--at-n` on a tree search
    says that its trajectories are no independent samples."""
    out = tmp_path / "r.jsonl"
    assert run_cli("data.limit=3", "width=4", "max_depth=2", "vote=majority", "aggregation=min",
                   f"output={out}") == 0
    summary = json.loads(out.with_name("r.summary.json").read_text())
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["aggregation"], result["vote"], result["accuracy"]) == ("min", "majority", summary["accuracy"])
    assert main(["eval", str(out), "--vote", "best"]) == 0
    assert "agg=min vote=best" in capsys.readouterr().out
    with caplog.at_level(logging.WARNING, logger="ets.app.cli"):
        assert main(["eval", str(out), "--at-n", "--plot", str(tmp_path / "at_n")]) == 0
    assert "these are rebase's, grown from each other" in caplog.text
