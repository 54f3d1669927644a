"""`ets run` and `ets eval` as a user runs them: bundled tiny config, resumable output,
one-line errors for bad input."""

import json
import shutil
from pathlib import Path

import pytest

from ets.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"


def run_cli(*argv):
    return main(["run", "--quiet", "--config", str(TINY), *argv])


def lines(path):
    return [json.loads(l) for l in Path(path).read_text().splitlines()]


@pytest.mark.parametrize("method", ["best_of_n", "beam", "dvts", "rebase"])
def test_run_each_strategy_end_to_end(tmp_path, method, capsys):
    out = tmp_path / "r.jsonl"
    assert run_cli(f"method={method}", f"output={out}") == 0
    records = lines(out)
    assert [r["id"] for r in records] == ["0", "1", "2", "3"]
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
    assert [r["id"] for r in records] == ["0", "1", "2", "3"]  # nothing duplicated or lost
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
    assert result["problems"] == 2 and result["aggregation"] == "min"
    assert result["correct"] == sum(r["correct"] for r in lines(out)) or result["vote"] == "majority"


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
    assert "does not exist" in _error(capsys, *cfg, "policy.model=/nope/model")
    msg = _error(capsys, *cfg, "method=alphazero")
    assert "alphazero" in msg and "rebase" in msg
    assert "does not exist" in _error(capsys, "run", "--config", str(tmp_path / "none.yaml"))
    assert out.read_text() == before
