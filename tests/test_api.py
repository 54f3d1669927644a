"""The Python API (ets/api.py): `ets.search(config, problems)` builds what `ets run` builds
from the same config, with the same functions, and finds the same records; the parts one
at a time (`load_config`, `build_policy`, `build_reward`, `load_problems`); `search_with`
for parts built by hand; `Problem(question)`. Real runs of the tiny config's models."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import ets
from ets.data import question_id
from tests.helpers import TINY, run_cli

# Two problems of the tiny config's data, W=2: each search takes a fraction of a second.
SMALL = ["data.limit=2", "width=2", "max_depth=2"]


def without_clock(records):
    """Records as a rerun reproduces them: all but the wall time."""
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in records]


def test_search_from_a_config_file_finds_what_ets_run_writes(tmp_path):
    """The config's own problems (problems=None), its policy, reward and search: the records
    `ets run` writes for that config, line for line."""
    out = tmp_path / "r.jsonl"
    assert run_cli(*SMALL, f"output={out}") == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    records = ets.search(TINY, overrides=SMALL)
    assert [r["id"] for r in records] == [p.id for p in ets.load_problems(ets.load_config(TINY, SMALL))]
    assert without_clock(records) == without_clock(written)
    assert all(isinstance(r["correct"], bool) for r in records)


def test_the_parts_built_one_at_a_time_search_as_the_one_call_does():
    config = ets.load_config(TINY, SMALL)
    policy = ets.build_policy(config)
    reward = ets.build_reward(config, policy)
    problems = ets.load_problems(config)
    by_parts = ets.search_with(problems, policy, reward, config.search)
    # the parts given to `search` are used, not built again
    given = ets.search(config, problems, policy=policy, reward=reward)
    assert without_clock(by_parts) == without_clock(given) == without_clock(ets.search(config))


def test_a_dict_config_with_questions_strings_dicts_and_problems():
    """A dict holds a config file's keys; problems may be question strings, dicts or
    Problems, searched in order, their ids the hash of the question unless given."""
    config = {"method": "beam", "width": 2, "max_depth": 2, "max_step_tokens": 8, "max_tokens": 32,
              "policy": {"model": "tiny:llama", "backend": "hf", "step_delimiter": "\n"},
              "reward": {"name": "step_tag", "model": "tiny:llama"}}
    problems = ["What is 2 + 3?", {"question": "What is 4 + 4?", "answer": "8"},
                ets.Problem("What is 1 + 6?", answer=7, id="seven")]
    records = ets.search(config, problems, overrides=["width=3"])
    assert [r["id"] for r in records] == [question_id("What is 2 + 3?"), question_id("What is 4 + 4?"), "seven"]
    assert [r["ground_truth"] for r in records] == [None, "8", "7"]
    assert [(r["method"], r["width"]) for r in records] == [("beam", 3)] * 3


def test_search_sets_torch_threads_from_the_config():
    """`torch_threads` in the config is torch's thread count for the search (as for `ets
    run`): on small models one thread can be ten times faster than one per core."""
    torch.set_num_threads(2)
    try:
        ets.search(TINY, ["What is 2 + 3?"], overrides=[*SMALL, "torch_threads=1"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)  # the test session's (tests/conftest.py)


def test_problems_given_in_python_may_lack_an_answer_and_an_id():
    p = ets.Problem("What is 2 + 3?")
    assert (p.answer, p.id) == (None, question_id("What is 2 + 3?"))
    (record,) = ets.search(TINY, [p], overrides=SMALL)
    assert record["ground_truth"] is None and record["correct"] is None


def test_a_dicts_ground_truth_is_read_as_a_data_file_would_give_it(tmp_path):
    """A dict's ground truth: `ground_truth` before `answer` (a results record fed back has
    both, `answer` being the one it chose), a GSM8K solution's `####` number as `ets run`
    reads it from a GSM8K file, a MATH solution's last box; an id is text either way."""
    from ets.config import DataConfig
    from ets.data import as_problems, load_problems

    solution = "She has 3 + 4 = 7 apples.\n#### 7"
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(json.dumps({"question": "How many apples?", "answer": solution}) + "\n")
    (from_file,) = load_problems(DataConfig(path=str(path)))
    record = {"id": 5, "question": "What is 2 + 3?", "ground_truth": "5", "answer": "6", "correct": False}
    problems = as_problems([{"question": "How many apples?", "answer": solution}, record,
                            {"problem": "What is 1 + 2?", "solution": "So it is $\\boxed{3}$."}])
    assert problems[0] == from_file and problems[0].answer == "7"
    assert (problems[1].answer, problems[1].id) == ("5", "5") and problems[1].raw == record
    assert problems[2].answer == "3"
    assert ets.Problem("What is 1 + 1?", id=7).id == "7"
    assert ets.Problem("What is 1 + 1?", id=" ").id == question_id("What is 1 + 1?")


@pytest.mark.parametrize("config, problems, error, words", [
    (ets.SearchConfig(), None, ets.ConfigError, "ets.search_with(problems, policy, reward, search_config)"),
    (TINY, ["What is 1 + 1?", "What is 1 + 1?"], ets.DataError, "problem 0 and problem 1 have the same problem id"),
    (TINY, [3], ets.DataError, "problem 0: expected a Problem, a question string or a dict"),
    (TINY, None, ets.ConfigError, "unknown key 'widht'"),
    (["What is 1 + 1?"], None, ets.ConfigError, "got list; the problems come second (ets.search(config, problems))"),
    # one problem, not a list: iterated, it was searched character by character (key by key)
    (TINY, "What is 1 + 1?", ets.DataError, "give a list of problems, not one str ('What is 1 + 1?'); wrap it"),
    (TINY, {"question": "What is 1 + 1?"}, ets.DataError, "give a list of problems, not one dict"),
    # a misspelt key would have lost the answer silently
    (TINY, [{"question": "What is 1 + 1?", "Answer": "2"}], ets.DataError,
     "problem 0: unknown key 'Answer' (did you mean 'answer'?)"),
    (TINY, "overrides", ets.ConfigError, "overrides: give a list of key=value strings, e.g. ['width=2'], not one"),
    (TINY, "reward class", ets.ConfigError, "reward: ProcessRewardModel is a class; pass an instance"),
    (TINY, "reward option", ets.ConfigError, "reward 'step_tag': unknown option 'nope'; allowed options: tag, "),
])
def test_bad_input_is_one_clear_error_before_any_model_loads(config, problems, error, words, monkeypatch):
    monkeypatch.setattr("ets.api.build_policy", lambda config: pytest.fail("a model was loaded"))
    # (problems named by a word: the case is in the overrides or the reward)
    case = problems if problems in ("overrides", "reward class", "reward option") else None
    overrides = {"overrides": "width=2", "reward option": ["reward.options.nope=1"]}.get(case, [])
    overrides = ["widht=2"] if "widht" in words else overrides
    reward = ets.rewards.ProcessRewardModel if case == "reward class" else None
    problems = ["What is 1 + 1?"] if case else problems
    with pytest.raises(error) as raised:
        ets.search(config, problems, overrides=overrides, reward=reward)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_search_with_refuses_what_is_not_a_search_config_in_one_line():
    run_config = ets.load_config(TINY)
    for config, words in [(run_config, "pass run_config.search"), ({"width": 2}, "got dict")]:
        with pytest.raises(ets.ConfigError, match=words):
            ets.search_with(["What is 1 + 1?"], object(), lambda q, t: [], config)


def test_import_ets_stays_cheap_and_every_public_name_resolves():
    code = "import ets, sys; print(sorted(m for m in ('torch', 'transformers', 'ets.loop', 'rewards') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
    assert all(getattr(ets, name) is not None for name in ets.__all__)
    assert set(ets.__all__) <= set(dir(ets))
