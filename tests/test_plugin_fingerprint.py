"""A plug-in's code is part of its run's config (ets/app/provenance.py): a reward or a
strategy given as `module:attr`, edited after a run, makes a rerun into the same output a
changed config (refused, or started afresh with --overwrite), never a silent resume."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest

from ets.app.output import config_path
from tests.helpers import one_line_error, run_cli

REWARD = """
    def half(questions, trajectories):
        return [[[{score}] * len(steps) for steps in trajs] for trajs in trajectories]
"""
STRATEGY = """
    from ets.strategies import Strategy


    class FirstOnly(Strategy):
        def select(self, frontier):
            return {{frontier.candidates[0].id: frontier.remaining}}  # {comment}
"""


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """write(module, source): the module `module` in tmp_path, importable, as a user edits it
    (a module loaded by an earlier run is forgotten, as a new process would)."""
    folder = tmp_path / "code"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    names = []

    def write(module: str, source: str) -> None:
        (folder / f"{module}.py").write_text(textwrap.dedent(source).lstrip("\n"))
        sys.modules.pop(module, None)
        importlib.invalidate_caches()
        names.append(module)

    yield write
    for module in names:
        sys.modules.pop(module, None)


@pytest.mark.parametrize("section, key, module, source, first, edited", [
    ("reward", "reward.name=plug_reward:half", "plug_reward", REWARD, {"score": 0.5}, {"score": 0.25}),
    ("search", "method=plug_strategy:FirstOnly", "plug_strategy", STRATEGY, {"comment": "one"}, {"comment": "two"}),
])
def test_an_edited_plugin_is_a_changed_config(tmp_path, capsys, plugin_dir, section, key, module, source, first,
                                              edited):
    out = tmp_path / "r.jsonl"
    args = [key, f"output={out}"]
    plugin_dir(module, source.format(**first))
    assert run_cli(*args) == 0
    made = json.loads(config_path(out).read_text())
    assert made["compared"][f"{section}.plugin_source"].startswith("sha256:")
    assert made["recorded"][f"{section}.plugin_module"] == module
    capsys.readouterr()

    assert run_cli(*args) == 0  # unchanged: resumed, nothing to search
    assert "(4 problems, 0 new)" in capsys.readouterr().out

    plugin_dir(module, source.format(**edited))
    msg = one_line_error(capsys, run_cli(*args))
    assert f"holds results of another config ({section}.plugin_source: 'sha256:" in msg
    assert len(out.read_text().splitlines()) == 4  # the results stay as they were

    assert run_cli(*args, "--overwrite") == 0  # started afresh with the edited code
    assert "(4 problems, 4 new)" in capsys.readouterr().out
    assert json.loads(config_path(out).read_text())["compared"][f"{section}.plugin_source"] != \
        made["compared"][f"{section}.plugin_source"]


def test_builtins_carry_no_plugin_key(tmp_path):
    """A built-in reward and strategy are the project's code (its version is recorded): no
    fingerprint, so outputs of built-ins are as they were."""
    out = tmp_path / "r.jsonl"
    assert run_cli("data.limit=1", f"output={out}") == 0
    made = json.loads(config_path(out).read_text())
    assert not [k for k in made["compared"] if k.endswith("plugin_source")]
