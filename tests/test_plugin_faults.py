"""A reward plug-in (`reward.name: module:attr`) that fails: at import, when built, without a
`score`, or when it scores mid-run. Each is one line `ets: error: ...` naming the plug-in,
what it raised and the line of its own code; finished problems stay in the output; with
`--log-level DEBUG` the traceback is logged. An exception from the project's own code keeps
its traceback (a bug)."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest

from ets.app.cli import main
from tests.helpers import TINY, one_line_error, run_cli

DEBUG_HINT = "--log-level DEBUG shows the traceback"


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """write(name, source) puts the module `name` (or `pkg/mod.py`) on the import path."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    written = []

    def write(relative: str, source: str) -> None:
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip("\n"))
        written.append(relative.removesuffix(".py").replace("/", ".").split(".")[0])
        importlib.invalidate_caches()

    yield write
    for top in written:
        for module in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            del sys.modules[module]


HALF = "def half(questions, trajectories):\n    return [[[0.5] * len(s) for s in t] for t in trajectories]\n"

IMPORT_FAULTS = {
    "a missing dependency": ("import no_such_dependency_xyz\n" + HALF,
                             "importing its module 'fault_import' raised ModuleNotFoundError: No module named "
                             "'no_such_dependency_xyz' (in fault_import.py line 1); install 'no_such_dependency_xyz', "
                             "or fix that import"),
    "a syntax error": ("x = 1\ndef half(questions, trajectories)\n    return []\n",
                       "importing its module 'fault_import' raised SyntaxError: expected ':' (in fault_import.py line 2); "
                       "fix 'fault_import'"),
    "an exception at import": ("import os\nTOKEN = os.environ['NO_SUCH_VARIABLE_XYZ']\n" + HALF,
                               "importing its module 'fault_import' raised KeyError: 'NO_SUCH_VARIABLE_XYZ' "
                               "(in fault_import.py line 2); fix 'fault_import'"),
}


@pytest.mark.parametrize("case", IMPORT_FAULTS)
@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_a_module_that_fails_to_import_is_one_line(tmp_path, capsys, plugins, case, check):
    source, expected = IMPORT_FAULTS[case]
    plugins("fault_import.py", source)
    args = [f"output={tmp_path / 'r.jsonl'}", "reward.name=fault_import:half", *(["--check"] if check else [])]
    msg = one_line_error(capsys, run_cli(*args))
    assert msg == f"ets: error: reward 'fault_import:half': {expected}; {DEBUG_HINT}"
    assert not (tmp_path / "r.jsonl").exists()


def test_a_constructor_that_raises_is_one_line(tmp_path, capsys, plugins):
    plugins("fault_build.py", """
        from ets.rewards import ProcessRewardModel

        class Scorer(ProcessRewardModel):
            def __init__(self, weights: str = "w.bin"):
                raise FileNotFoundError(f"{weights} is not here")

            def score(self, questions, trajectories):
                return []
    """)
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", "reward.name=fault_build:Scorer",
                                         "reward.options.weights=prm.bin"))
    assert msg == ("ets: error: reward 'fault_build:Scorer': building it raised FileNotFoundError: prm.bin is not here "
                   f"(in fault_build.py line 5); check reward.options and what its constructor needs; {DEBUG_HINT}")


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_a_class_without_score_is_refused_before_it_is_built(tmp_path, capsys, plugins, check):
    plugins("fault_noscore.py", """
        from ets.rewards import ProcessRewardModel

        class Scorer(ProcessRewardModel):
            def scores(self, questions, trajectories):   # a typo: not `score`
                return []
    """)
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", "reward.name=fault_noscore:Scorer",
                                         *(["--check"] if check else [])))
    assert "reward 'fault_noscore:Scorer': the class Scorer does not define score(self, questions, trajectories)" in msg


SCORES_UNTIL_TOLD = """
    import os


    class Scorer:
        def __call__(self, questions, trajectories):
            for question in questions:
                if os.environ.get("FAULT_ON") and os.environ["FAULT_ON"] in question:
                    raise ValueError(f"no score for {os.environ['FAULT_ON']!r}")
            return [[[0.5] * len(s) for s in t] for t in trajectories]


    half = Scorer()
"""


def test_score_raising_mid_run_is_one_line_and_keeps_finished_problems(tmp_path, capsys, plugins, monkeypatch):
    """The plug-in fails on the second problem: the first one, finished, stays; a rerun
    with the plug-in fixed searches only the rest."""
    plugins("faultpkg/__init__.py", "")
    plugins("faultpkg/prm.py", SCORES_UNTIL_TOLD)
    out = tmp_path / "r.jsonl"
    args = [f"output={out}", "reward.name=faultpkg.prm:half", "concurrency=1"]
    monkeypatch.setenv("FAULT_ON", "box")
    msg = one_line_error(capsys, run_cli(*args))
    assert msg == ("ets: error: reward 'faultpkg.prm:half' raised ValueError: no score for 'box' "
                   f"(in faultpkg/prm.py line 8); finished problems are kept; {DEBUG_HINT}")
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert kept and all("box" not in r["question"] for r in kept)
    monkeypatch.delenv("FAULT_ON")
    assert run_cli(*args) == 0
    assert f"(4 problems, {4 - len(kept)} new)" in capsys.readouterr().out


def test_debug_logs_the_plugins_traceback(tmp_path, capsys, plugins, monkeypatch):
    plugins("fault_debug.py", SCORES_UNTIL_TOLD)
    monkeypatch.setenv("FAULT_ON", "apples")
    code = main(["run", "--quiet", "--log-level", "DEBUG", "--config", str(TINY), f"output={tmp_path / 'r.jsonl'}",
                 "reward.name=fault_debug:half"])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback (most recent call last)" in err and 'fault_debug.py", line 8' in err
    assert err.strip().splitlines()[-1].startswith("ets: error: reward 'fault_debug:half' raised ValueError")


def test_an_exception_from_the_projects_own_code_keeps_its_traceback(tmp_path, plugins):
    """The plug-in calls into ets, which raises: that is for the traceback to show."""
    plugins("fault_project.py", """
        from ets.tree import SearchTree

        def half(questions, trajectories):
            SearchTree("q", None)          # ets raises TypeError inside
            return []
    """)
    with pytest.raises(TypeError):
        run_cli(f"output={tmp_path / 'r.jsonl'}", "reward.name=fault_project:half")


def test_a_plugin_may_raise_the_projects_own_errors(tmp_path, capsys, plugins):
    """A ConfigError the plug-in raises to say what is wrong is shown as it is."""
    plugins("fault_config.py", """
        from ets.config import ConfigError

        def half(questions, trajectories, mode="fast"):
            raise ConfigError(f"reward option mode={mode!r} needs a GPU")
    """)
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", "reward.name=fault_config:half"))
    assert msg == "ets: error: reward option mode='fast' needs a GPU"


def test_an_entry_point_whose_module_fails_is_one_line(tmp_path, capsys, plugins):
    plugins("fault_ep.py", "import no_such_dependency_xyz\n" + HALF)
    dist = tmp_path / "plugins" / "fault_ep-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fault-ep\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ets.rewards]\nfaulty_ep = fault_ep:half\n")
    importlib.invalidate_caches()
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", "reward.name=faulty_ep"))
    assert msg.startswith("ets: error: reward 'faulty_ep': importing its module 'fault_ep' raised ModuleNotFoundError")
    assert "(in fault_ep.py line 1)" in msg
