"""The README example "Plug in your own reward model", run as written:
its files are written out, its command goes through `ets run`, and every step score in
the output must be the user's reward of that step."""

import importlib
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from ets.app.cli import main

DOC = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = r"<!-- {} -->\s*```[a-z]*\n(.*?)```"


def example():
    """({file name: text}, command argv after `ets`) from the docs."""
    text = DOC.read_text()
    files = {m.group(1): m.group(2) for m in re.finditer(BLOCK.format(r"file: (\S+)"), text, re.S)}
    command = re.search(BLOCK.format("command"), text, re.S).group(1).strip()
    argv = shlex.split(command)
    assert argv[:2] == ["PYTHONPATH=.", "ets"], command
    return files, argv[2:]


def test_the_documented_example_runs_end_to_end(tmp_path, monkeypatch, capsys):
    files, argv = example()
    assert set(files) == {"my_reward.py", "my_run.yaml", "problems.jsonl"}
    assert len(files["my_reward.py"].strip().splitlines()) <= 25        # "about twenty lines"
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))         # what PYTHONPATH=. does
    sys.modules.pop("my_reward", None)
    importlib.invalidate_caches()

    assert main([*argv[:1], "--quiet", *argv[1:]]) == 0, capsys.readouterr().err

    import my_reward

    reward = my_reward.ShortNumericSteps(max_chars=60)   # the command's override
    records = [json.loads(line) for line in (tmp_path / "runs" / "my_run.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["trajectories"]
        for traj in record["trajectories"]:
            assert traj["step_scores"] == pytest.approx([reward.step_score(s) for s in traj["steps"]])
    sys.modules.pop("my_reward", None)


def test_a_typo_in_the_examples_options_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    files, argv = example()
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_reward", None)
    assert main([*argv[:1], "--quiet", *argv[1:], "reward.options.max_char=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ets: error:") and "max_char" in err and "max_chars" in err
    sys.modules.pop("my_reward", None)
