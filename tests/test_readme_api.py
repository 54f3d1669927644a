"""The README's "From Python" example, run as written: a search from a config file, then
one from a config dict on a problem given in code, one record per problem."""

import re
import shutil
from pathlib import Path

import ets
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
