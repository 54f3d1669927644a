"""A reward given to `ets.search` / `ets.search_with` as an object is held to what a reward
named in a config is: checked before anything runs, what it raises one `PluginError` line
naming it, its bad scores named by its class, the steps it is handed its own copies; a
plug-in class named in a config receives `reward.model` as `model`. Real runs of the tiny
config's models."""

from __future__ import annotations

import logging
import math

import pytest

import ets
from ets.plugins import PluginError
from ets.rewards import ProcessRewardModel, RewardError
from ets.rewards.registry import register_reward
from tests.helpers import TINY

SMALL = ["data.limit=1", "width=2", "max_depth=2"]


class Raises(ProcessRewardModel):
    def score(self, questions, trajectories):
        raise ValueError("my model exploded")


class NaNScores(ProcessRewardModel):
    def score(self, questions, trajectories):
        return [[[math.nan] * len(steps) for steps in trajs] for trajs in trajectories]


class AppendsAStep(ProcessRewardModel):
    """Changes the lists it is handed, and scores what it was given."""

    def score(self, questions, trajectories):
        out = [[[0.5] * len(steps) for steps in trajs] for trajs in trajectories]
        for trajs in trajectories:
            for steps in trajs:
                steps.append("an extra step")
        return out


class ScoresLikeAPRM:
    def score(self, questions, trajectories):
        return [[[0.5] * len(steps) for steps in trajs] for trajs in trajectories]


class WithModel(ProcessRewardModel):
    """A plug-in that loads a model of its own (here it keeps the name)."""
    seen: list[str] = []

    def __init__(self, model: str, bonus: float = 0.0):
        WithModel.seen.append(model)

    def score(self, questions, trajectories):
        return [[[0.5] * len(steps) for steps in trajs] for trajs in trajectories]


class NoModel(ScoresLikeAPRM, ProcessRewardModel):
    pass


def test_what_a_reward_object_raises_is_one_plugin_error_naming_it():
    with pytest.raises(PluginError) as raised:
        ets.search(TINY, overrides=SMALL, reward=Raises())
    message = str(raised.value)
    assert "'Raises'" in message and "ValueError: my model exploded" in message and "\n" not in message
    assert isinstance(raised.value.__cause__, ValueError)
    with pytest.raises(PluginError, match="ZeroDivisionError"):
        ets.search_with(["What is 1 + 1?"], ets.build_policy(ets.load_config(TINY, SMALL)), lambda q, t: 1 / 0,
                        ets.SearchConfig(width=2, max_depth=2))


def test_bad_scores_name_the_reward_by_its_class():
    with pytest.raises(RewardError, match="reward 'NaNScores' returned nan"):
        ets.search(TINY, overrides=SMALL, reward=NaNScores())


@pytest.mark.parametrize("reward, words", [
    ("my_module:MyPRM", "'my_module:MyPRM' is a name; names go in the config (reward.name"),
    (42, "a int is not a reward"),
    (lambda q: 0.5, "must accept (questions, trajectories)"),
    (ScoresLikeAPRM(), "ScoresLikeAPRM has a score method but is not a ProcessRewardModel; subclass it"),
])
def test_what_is_no_reward_is_refused_before_any_model_loads(reward, words, monkeypatch):
    monkeypatch.setattr("ets.api.build_policy", lambda config: pytest.fail("a model was loaded"))
    with pytest.raises(ets.ConfigError) as raised:
        ets.search(TINY, ["What is 1 + 1?"], reward=reward)
    assert words in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(ets.ConfigError, match="reward"):
        ets.search_with(["What is 1 + 1?"], object(), reward)


def test_a_reward_that_changes_its_input_is_checked_against_what_it_was_given():
    """It was handed copies: its scores fit the steps the search has, and the records keep
    the steps the policy wrote."""
    records = ets.search(TINY, overrides=SMALL, reward=AppendsAStep())
    assert records and all("an extra step" not in t["steps"] for r in records for t in r["trajectories"])


def test_overrides_that_cannot_reach_a_reward_passed_in_are_said(caplog):
    with caplog.at_level(logging.WARNING, logger="ets.api"):
        ets.search(TINY, overrides=[*SMALL, "reward.options.tag=x"], reward=AppendsAStep())
    assert "reward.options.tag: the reward passed in is used as it was built" in caplog.text


def test_a_plugin_class_receives_reward_model_or_says_it_goes_unread(caplog):
    WithModel.seen.clear()
    ets.search(TINY, overrides=[*SMALL, f"reward.name={__name__}:WithModel", "reward.model=/models/my-prm"])
    assert WithModel.seen and set(WithModel.seen) == {"/models/my-prm"}
    with caplog.at_level(logging.WARNING, logger="ets.rewards.registry"):
        ets.search(TINY, overrides=[*SMALL, f"reward.name={__name__}:NoModel", "reward.model=/models/unread"])
    assert caplog.text.count("reward.model ('/models/unread') goes unread") == 1
    assert "takes no `model` argument (give its constructor one" in caplog.text


def test_register_reward_refuses_a_builtins_name_and_what_is_no_reward():
    with pytest.raises(ValueError, match="'step_tag' is a built-in reward's"):
        register_reward("step_tag", NaNScores)
    with pytest.raises(ValueError, match="a int is no reward"):
        register_reward("forty_two", 42)
