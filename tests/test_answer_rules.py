"""The rule that read each trajectory's answer, recorded by `ets run` (real tiny models:
configs/tiny.yaml, whose random policy writes digits among its noise)."""

import json

import pytest

from ets.answers.extract import extract
from ets.config import ANSWER_RULES, MARKED_ANSWER_RULES
from tests.helpers import run_cli


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("rules")
    assert run_cli("method=best_of_n", f"output={d / 'default.jsonl'}") == 0
    assert run_cli("method=best_of_n", "answer_extraction=[boxed,marker,hashes]", f"output={d / 'marked.jsonl'}") == 0
    return records(d / "default.jsonl"), records(d / "marked.jsonl")


def test_each_trajectory_records_its_answer_and_the_rule_that_read_it(runs):
    for got, rules in zip(runs, (ANSWER_RULES, MARKED_ANSWER_RULES)):
        for r in got:
            for t in r["trajectories"]:
                assert (t["answer"], t["answer_rule"]) == extract("".join(t["steps"]), rules)


def test_the_rules_change_the_answers_read_not_the_samples(runs):
    default, marked = runs
    for a, b in zip(default, marked):
        assert [t["steps"] for t in a["trajectories"]] == [t["steps"] for t in b["trajectories"]]
    fired = [t["answer_rule"] for r in default for t in r["trajectories"]]
    assert "last_number" in fired                      # the policy's noise holds numbers
    assert all(t["answer_rule"] != "last_number" for r in marked for t in r["trajectories"])
