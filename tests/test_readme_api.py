"""The README's "From Python" example, run as written: a search from a config file, then
one from a config dict on a problem given in code, one record per problem."""

import json
import re
import shlex
import shutil
from pathlib import Path

import ets
from ets.app.cli import main
from test_rewards_docs import BLOCK, DOC

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_the_python_api_example_runs_as_written(tmp_path, monkeypatch):
    code = re.search(BLOCK.format("python-api"), DOC.read_text(), re.S).group(1)
    shutil.copytree(CONFIGS, tmp_path / "configs")      # the example's relative config path, and its outputs, here
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md (From Python)", "exec"), scope)

    tiny = scope["tiny"]
    assert len(tiny) == len((CONFIGS / "data" / "tiny.jsonl").read_text().splitlines())
    assert all(r["method"] == "rebase" and r["width"] == 4 for r in tiny)      # configs/tiny.yaml's search

    (record,) = scope["results"]
    assert record["question"] == "What is 2 + 3?" and record["method"] == "ets" and record["width"] == 16
    assert len(record["trajectories"]) == 16 and record["kv_size"] > 0
    assert all(len(t["step_scores"]) == len(t["steps"]) for t in record["trajectories"])


def test_the_strategy_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """README "Plug in a strategy": the file as written, its command through `ets run`;
    its option reaches the strategy (keep=1: one candidate kept each round)."""
    text = DOC.read_text()
    source = re.search(BLOCK.format("strategy: my_strategy.py"), text, re.S).group(1)
    argv = shlex.split(re.search(BLOCK.format("strategy-command"), text, re.S).group(1).strip())
    assert argv[:2] == ["PYTHONPATH=.", "ets"]
    (tmp_path / "my_strategy.py").write_text(source)
    shutil.copytree(CONFIGS, tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))        # what PYTHONPATH=. does
    assert main(argv[2:] + ["output=runs/keep_best.jsonl", "--quiet"]) == 0
    records = [json.loads(line) for line in (tmp_path / "runs" / "keep_best.jsonl").read_text().splitlines()]
    assert records and all(r["method"] == "my_strategy:KeepBest" for r in records)
    for r in records:  # keep=1: one candidate kept in each selection round (one KV figure each)
        assert r["strategy_metrics"]["kept"] == len(r["kv_size_steps"])


def test_the_engine_example_of_the_backends_page_runs_as_written():
    """docs/backends.md "The engine from Python": text encoded to ids, a generate, an expand
    whose handles lock their paths, a score of those paths, the release."""
    page = DOC.parent / "docs" / "backends.md"
    code = re.search(BLOCK.format("engine-api"), page.read_text(), re.S).group(1)
    scope: dict = {}
    exec(compile(code, "docs/backends.md (The engine from Python)", "exec"), scope)
    engine, paths, logits = scope["engine"], scope["paths"], scope["logits"]
    assert len(paths) == 4 and [row.shape[0] for row in logits] == [1] * 4
    assert engine.stats()["locked_kv_tokens"] == 0
