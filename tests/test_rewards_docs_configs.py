"""Every `reward:` example in docs/rewards.md is a valid config: its name resolves and
its options pass the reward's own validation, so the docs cannot drift from the code."""

import re
from pathlib import Path

import pytest
import yaml

from ets.rewards import resolve_reward
from ets.rewards.options import parse_options

DOC = Path(__file__).resolve().parents[1] / "docs" / "rewards.md"
EXAMPLES = [b for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S) if b.startswith("reward:")]


def test_the_docs_show_every_model_based_builtin():
    names = {yaml.safe_load(b)["reward"]["name"] for b in EXAMPLES}
    assert names == {"step_tag", "token_classification", "value_head", "chat_judgement"}


@pytest.mark.parametrize("block", EXAMPLES, ids=lambda b: yaml.safe_load(b)["reward"]["model"].rsplit("/", 1)[-1])
def test_each_documented_config_validates(block):
    reward = yaml.safe_load(block)["reward"]
    cls = resolve_reward(reward["name"])
    options = parse_options(cls.Options, reward.get("options"), reward["name"])
    for key, value in (reward.get("options") or {}).items():
        assert getattr(options, key) == value
