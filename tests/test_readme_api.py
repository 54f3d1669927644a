"""The README's "Python API" example, run as written: one search, one record per problem."""

import re

from test_rewards_docs import BLOCK, DOC


def test_the_python_api_example_runs_as_written():
    code = re.search(BLOCK.format("python-api"), DOC.read_text(), re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md (Python API)", "exec"), scope)
    (record,) = scope["results"]
    assert record["question"] == "What is 2 + 3?" and record["method"] == "ets" and record["width"] == 16
    assert len(record["trajectories"]) == 16 and record["kv_size"] > 0
    assert all(len(t["step_scores"]) == len(t["steps"]) for t in record["trajectories"])
