"""Rewards by name: built-ins, module:attr plug-ins, entry points, and the errors users see."""

import importlib
import math
import sys
import textwrap

import pytest

from ets.config import ConfigError, PolicyConfig, RewardConfig
from ets.rewards import ProcessRewardModel, RewardError, build_reward, known_rewards, register_reward
from ets.rewards.options import parse_options
from ets.rewards.step_tag import StepTagOptions

QUESTIONS = ["What is 1+1?", "What is 2*3?"]
TRAJS = [[["1+1=2\n", "So 2.\n"], ["It is 3.\n"]], [["2*3=6\n"]]]


# --- plug-ins defined here, named as tests.test_rewards_registry:<attr> -------------------

def constant(questions, trajectories, value=0.5):
    return [[[value] * len(steps) for steps in trajs] for trajs in trajectories]


def wrong_shape(questions, trajectories):
    return [[[0.5] for _ in trajs] for trajs in trajectories]   # one score per trajectory


def returns_nan(questions, trajectories):
    return [[[math.nan] * len(steps) for steps in trajs] for trajs in trajectories]


def too_big(questions, trajectories):
    return [[[1.5] * len(steps) for steps in trajs] for trajs in trajectories]


class LengthPRM(ProcessRewardModel):
    def __init__(self, scale: float = 10.0):
        self.scale = scale

    def score(self, questions, trajectories):
        return [[[min(1.0, len(s) / self.scale) for s in steps] for steps in trajs] for trajs in trajectories]


class NotAPRM:
    pass


HERE = __name__


def build(name, **options):
    return build_reward(RewardConfig(name=name, options=options), PolicyConfig(model="tiny:llama"))


def test_function_plugin_with_options():
    prm = build(f"{HERE}:constant", value=0.25)
    assert prm.name == f"{HERE}:constant"
    assert prm(QUESTIONS, TRAJS) == [[[0.25, 0.25], [0.25]], [[0.25]]]


def test_class_plugin_gets_options_as_kwargs():
    prm = build(f"{HERE}:LengthPRM", scale=100.0)
    assert isinstance(prm, LengthPRM) and prm.scale == 100.0
    assert prm(QUESTIONS, TRAJS)[0][0] == [0.06, 0.06]


def test_register_reward_by_name():
    register_reward("length_test", LengthPRM)
    assert "length_test" in known_rewards()
    assert isinstance(build("length_test"), LengthPRM)


def test_unknown_name_lists_known_ones():
    with pytest.raises(ConfigError) as err:
        build("math_shepherd_typo")
    msg = str(err.value)
    assert "math_shepherd_typo" in msg
    for name in ("step_tag", "token_classification", "verifier"):
        assert name in msg


@pytest.mark.parametrize(
    "name, options, expected",
    [
        (f"{HERE}:constant", {"valeu": 1}, ["valeu", "value"]),
        (f"{HERE}:LengthPRM", {"scal": 1}, ["scal", "scale"]),
        ("step_tag", {"step_tag": " ки"}, ["step_tag", "allowed options", "good_token", "template"]),
        ("step_tag", {"backend": "gpu"}, ["backend", "gpu", "forward"]),
        ("step_tag", {"max_batch_tokens": "many"}, ["max_batch_tokens", "int"]),
        ("step_tag", {"template": "{question}"}, ["template", "{steps}"]),
        ("token_classification", {"sep": "<x>"}, ["sep", "separator"]),
        (f"{HERE}:NotAPRM", {}, ["NotAPRM", "ProcessRewardModel"]),
        ("no_such_module_xyz:f", {}, ["no_such_module_xyz", "cannot import"]),
        (f"{HERE}:missing_attr", {}, ["missing_attr"]),
    ],
)
def test_bad_config_names_the_problem(name, options, expected):
    with pytest.raises(ConfigError) as err:
        build(name, **options)
    for word in expected:
        assert word in str(err.value)
    assert name in str(err.value) or "step_tag" in name


@pytest.mark.parametrize(
    "fn, expected",
    [("wrong_shape", "1 step score for question 0 trajectory 0, expected 2"),
     ("returns_nan", "nan for question 0 trajectory 0 step 0"),
     ("too_big", "1.5 for question 0 trajectory 0 step 0")],
)
def test_bad_scores_are_caught_with_the_rewards_name(fn, expected):
    prm = build(f"{HERE}:{fn}")
    with pytest.raises(RewardError) as err:
        prm(QUESTIONS, TRAJS)
    assert f"reward '{HERE}:{fn}'" in str(err.value) and expected in str(err.value)


def test_options_dataclass_rejects_wrong_types():
    assert parse_options(StepTagOptions, {"good_token": 648}, "step_tag").good_token == 648
    with pytest.raises(ConfigError, match="strip_steps"):
        parse_options(StepTagOptions, {"strip_steps": "yes"}, "step_tag")


def test_entry_point_registers_a_reward_by_name(tmp_path, monkeypatch):
    """An installed package declares `[project.entry-points."ets.rewards"]`."""
    (tmp_path / "ep_reward_pkg.py").write_text(textwrap.dedent("""
        def half(questions, trajectories):
            return [[[0.5] * len(s) for s in t] for t in trajectories]
    """))
    dist = tmp_path / "ep_reward_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-reward-pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ets.rewards]\nhalf_reward = ep_reward_pkg:half\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert "half_reward" in known_rewards()
    prm = build("half_reward")
    assert prm(QUESTIONS, TRAJS) == [[[0.5, 0.5], [0.5]], [[0.5]]]
    sys.modules.pop("ep_reward_pkg", None)


def test_verifier_is_registered_lazily():
    # The demo task's checker lives in rewards/verifier.py (another module's job); the name
    # is known either way, and resolves once that file exists.
    assert "verifier" in known_rewards()
    try:
        importlib.import_module("ets.rewards.verifier")
    except ModuleNotFoundError:
        with pytest.raises(ConfigError, match="verifier"):
            build("verifier")
    else:
        assert isinstance(build("verifier"), ProcessRewardModel)
