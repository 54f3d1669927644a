"""Strategies given as `module:Class` (search/base.py), with their own `search.options`:
a real search with the example plug-in (tests/fixtures/strategies/keep_best.py) through
`ets run` and through `ets.search`; options a strategy does not take refused in one line;
a plug-in's faults told as one line naming it and the line of its code, as a reward
plug-in's are (ets/plugins.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ets
from ets.strategies import build
from tests.helpers import TINY, one_line_error, run_cli
from tests.test_plugin_faults import DEBUG_HINT, plugins  # noqa: F401  (a fixture)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "strategies"
KEEP_BEST = "keep_best:KeepBest"


@pytest.fixture
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def parents_per_depth(record) -> dict[int, int]:
    """depth -> how many distinct nodes the nodes at that depth grew from."""
    parents: dict[int, set] = {}
    for node in record["tree"]["nodes"]:
        parents.setdefault(node["depth"], set()).add(node["parent"])
    return {depth: len(p) for depth, p in parents.items()}


def test_a_plugin_strategy_runs_through_ets_run_with_its_option(tmp_path, example):
    """keep=1: below the root's children, each depth grows from one node (the default,
    keep=2, would grow two); its counter lands in every record."""
    out = tmp_path / "r.jsonl"
    assert run_cli(f"method={KEEP_BEST}", "search.options.keep=1", "save_trees=true", f"output={out}") == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 4 and all(r["method"] == KEEP_BEST for r in records)
    assert all(r["strategy_metrics"]["kept"] >= 1 for r in records)
    assert all(count == 1 for r in records for count in parents_per_depth(r).values())
    assert any(len(parents_per_depth(r)) > 2 for r in records)  # it searched past the root's children


def test_a_plugin_strategy_through_ets_search_gets_its_options(example):
    config = {"method": KEEP_BEST, "width": 4, "max_depth": 3, "max_step_tokens": 8, "max_tokens": 48,
              "options": {"keep": 2}, "save_trees": True,
              "policy": {"model": "tiny:llama", "backend": "hf", "step_delimiter": "\n"},
              "reward": {"name": "step_tag", "model": "tiny:llama"}}
    records = ets.search(config, ["What is 2 + 3?", "What is 7 - 4?"])
    assert [r["method"] for r in records] == [KEEP_BEST] * 2
    widest = max(count for r in records for depth, count in parents_per_depth(r).items() if depth >= 2)
    assert widest == 2  # two kept per round, never more


def test_options_a_builtin_does_not_take_are_one_line(tmp_path, capsys):
    msg = one_line_error(capsys, run_cli("method=beam", "search.options.keep=1", f"output={tmp_path / 'r.jsonl'}"))
    assert msg == "ets: error: strategy 'beam': unknown option 'keep' in search.options; allowed options: (none)"
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_an_option_the_plugin_does_not_take_names_the_ones_it_does(tmp_path, capsys, example, check):
    msg = one_line_error(capsys, run_cli(f"method={KEEP_BEST}", "search.options.kepe=1",
                                         f"output={tmp_path / 'r.jsonl'}", *(["--check"] if check else [])))
    assert msg == f"ets: error: strategy '{KEEP_BEST}': unknown option 'kepe' in search.options; allowed options: keep"


def test_the_strategy_registry_builds_a_plugin_with_its_options(example):
    strategy = build(ets.SearchConfig(method=KEEP_BEST, options={"keep": 3}))
    assert type(strategy).__name__ == "KeepBest" and strategy.keep == 3 and strategy.name == KEEP_BEST


@pytest.mark.parametrize("source, spec, expected", [
    ("class NotOne:\n    pass\n", "strat_bad:NotOne",
     "strategy 'strat_bad:NotOne' is the class NotOne, not a search.Strategy subclass"),
    ("from ets.strategies import Strategy\n\nclass NoSelect(Strategy):\n    pass\n", "strat_bad:NoSelect",
     "strategy 'strat_bad:NoSelect': the class NoSelect does not define select(self, frontier)"),
    ("", "strat_bad:Missing", "strategy 'strat_bad:Missing': module 'strat_bad' has no attribute 'Missing'"),
    ("", "no_such_strategy_module:X", "strategy 'no_such_strategy_module:X': cannot import module"),
])
def test_what_is_not_a_strategy_is_refused_in_one_line(tmp_path, capsys, plugins, source, spec, expected):  # noqa: F811
    plugins("strat_bad.py", source)
    msg = one_line_error(capsys, run_cli(f"method={spec}", f"output={tmp_path / 'r.jsonl'}"))
    assert msg.startswith(f"ets: error: {expected}")


FAULTS = {
    "import": ("import no_such_dependency_xyz\n",
               "importing its module 'strat_fault' raised ModuleNotFoundError: No module named 'no_such_dependency_xyz' "
               "(in strat_fault.py line 1); install 'no_such_dependency_xyz', or fix that import"),
    "build": ("from ets.strategies import Strategy\n\nclass Fault(Strategy):\n    def __init__(self, config, keep=1):\n"
              "        raise ValueError('no keep today')\n\n    def select(self, frontier):\n        return {}\n",
              "building it raised ValueError: no keep today (in strat_fault.py line 5); check search.options and "
              "what its constructor needs"),
    "select": ("from ets.strategies import Strategy\n\nclass Fault(Strategy):\n    def select(self, frontier):\n"
               "        return {frontier.candidates[0].id: 1 / 0}\n",
               "raised ZeroDivisionError: division by zero (in strat_fault.py line 5); finished problems are kept"),
}


@pytest.mark.parametrize("when", FAULTS)
def test_a_plugin_that_raises_is_one_line_naming_its_line(tmp_path, capsys, plugins, when):  # noqa: F811
    source, expected = FAULTS[when]
    plugins("strat_fault.py", source + ("\nclass Fault:\n    pass\n" if when == "import" else ""))
    msg = one_line_error(capsys, run_cli("method=strat_fault:Fault", f"output={tmp_path / 'r.jsonl'}"))
    sep = ": " if when != "select" else " "
    assert msg == f"ets: error: strategy 'strat_fault:Fault'{sep}{expected}; {DEBUG_HINT}"


BAD_ALLOCATIONS = {
    "more than the width": ("{c.id: frontier.remaining for c in frontier.candidates}", "children in all"),
    "a negative count": ("{frontier.candidates[0].id: -1}", "-1 children for candidate"),
    "a float count": ("{frontier.candidates[0].id: 1.0}", "1.0 (float) children for candidate"),
    "a text count": ("{frontier.candidates[0].id: '1'}", "'1' (str) children for candidate"),
    "nodes as keys": ("{frontier.candidates[0]: 1}", "a node as a key"),
    "no mapping": ("[1]", "a list"),
    "an id that is not a candidate's": ("{10**6: 1}", "1000000, not the id of a candidate"),
}


@pytest.mark.parametrize("case", BAD_ALLOCATIONS)
def test_an_allocation_that_breaks_the_rules_is_one_line_before_a_child_is_made(tmp_path, capsys, plugins, case):  # noqa: F811
    """What select returns is checked before a child is made: a sum past the width made a
    record with more trajectories than its width; a float or text count failed deep in
    a policy; a negative one pruned silently."""
    returned, expected = BAD_ALLOCATIONS[case]
    plugins("strat_alloc.py", "from ets.strategies import Strategy\n\nclass Alloc(Strategy):\n"
                              f"    def select(self, frontier):\n        return {returned}\n")
    out = tmp_path / "r.jsonl"
    msg = one_line_error(capsys, run_cli("method=strat_alloc:Alloc", "width=4", f"output={out}"))
    assert msg.startswith("ets: error: strategy 'strat_alloc:Alloc': select returned ") and expected in msg
    assert msg.endswith("counts ints >= 0 summing to at most frontier.remaining (4)")
    assert not out.exists() or out.read_text() == ""


def test_an_allocation_of_numpy_ints_is_taken(tmp_path, plugins):  # noqa: F811
    plugins("strat_np.py", "import numpy as np\nfrom ets.strategies import Strategy\n\nclass Alloc(Strategy):\n"
                           "    def select(self, frontier):\n"
                           "        return {frontier.candidates[0].id: np.int64(frontier.remaining)}\n")
    out = tmp_path / "r.jsonl"
    assert run_cli("method=strat_np:Alloc", "width=4", f"output={out}") == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(len(r["trajectories"]) <= 4 for r in records)
