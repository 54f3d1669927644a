"""Presets by model name (ets/config/model_presets.py): the policies and PRMs people search with
get their prompt and reading from their name; an explicit key always wins."""

from pathlib import Path

import pytest

from ets.app.cli import main
from ets.config import (MODEL_PRESETS, SAL_SYSTEM_PROMPT, ConfigError, load_config, model_preset,
                        model_preset_keys)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DATA = CONFIGS / "data" / "tiny.jsonl"


@pytest.mark.parametrize("name, kind, match", [
    ("Qwen/Qwen2.5-Math-1.5B-Instruct", "policy", "qwen2.5-math-*-instruct"),
    ("/models/Qwen2.5-Math-7B-Instruct/", "policy", "qwen2.5-math-*-instruct"),   # a local copy, by its folder name
    ("Qwen/Qwen2.5-7B-Instruct", "policy", "qwen2.5-*-instruct"),
    ("meta-llama/Llama-3.2-1B-Instruct", "policy", "llama-3.[123]-*-instruct"),
    ("nvidia/AceMath-7B-Instruct", "policy", "acemath-*-instruct"),
    ("ScalableMath/llemma-7b-sft-metamath-level-1to3-hf", "policy", "llemma-*-sft-*-hf"),
    ("Qwen/Qwen2.5-Math-PRM-7B", "reward", "qwen2.5-math-prm-*"),
    ("Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B", "reward", "skywork-o1-open-prm-qwen-2.5-*"),
    ("RLHFlow/Llama3.1-8B-PRM-Mistral-Data", "reward", "llama3.1-8b-prm-*"),
    ("peiyi9979/math-shepherd-mistral-7b-prm", "reward", "math-shepherd-mistral-7b-prm"),
    ("ScalableMath/llemma-7b-prm-prm800k-level-1to3-hf", "reward", "llemma-*-prm-*-hf"),
])
def test_each_listed_model_finds_its_row(name, kind, match):
    assert model_preset(name, kind)["match"] == match


def test_no_row_for_other_models():
    for name in ("tiny:llama", "gpt2", "/models/my-policy", "Qwen/Qwen2.5-Math-7B"):  # a base model: no chat
        assert model_preset(name, "policy") is None
    assert model_preset("Qwen/Qwen2.5-Math-1.5B-Instruct", "reward") is None  # a policy is no PRM


def test_a_qwen_pairing_is_configured_by_its_names():
    c = load_config(None, ["policy.model=Qwen/Qwen2.5-Math-1.5B-Instruct", "reward.model=Qwen/Qwen2.5-Math-PRM-7B"])
    assert c.policy.chat_template == "auto" and c.policy.step_delimiter == "\n\n"
    assert c.policy.system_prompt == "Please reason step by step, and put your final answer within \\boxed{}."
    assert c.reward.name == "token_classification" and c.reward.options == {"trust_remote_code": True}


def test_the_search_and_learn_pairing_pins_the_llama_date():
    c = load_config(None, ["policy.model=meta-llama/Llama-3.2-1B-Instruct",
                           "reward.model=RLHFlow/Llama3.1-8B-PRM-Deepseek-Data"])
    assert c.policy.system_prompt == SAL_SYSTEM_PROMPT
    assert c.policy.chat_template_kwargs == {"date_string": "26 Jul 2024"}
    assert c.reward.name == "chat_judgement"


def test_explicit_keys_win_over_a_preset():
    c = load_config(None, ["policy.model=Qwen/Qwen2.5-Math-1.5B-Instruct", "policy.system_prompt=mine",
                           "policy.chat_template=false", "reward.model=Qwen/Qwen2.5-Math-PRM-7B",
                           "reward.options.trust_remote_code=false"])
    assert c.policy.system_prompt == "mine" and c.policy.chat_template is False
    assert c.reward.options == {"trust_remote_code": False}


def test_a_reward_named_explicitly_keeps_its_own_options():
    c = load_config(None, ["reward.model=Qwen/Qwen2.5-Math-PRM-7B", "reward.name=value_head"])
    assert c.reward.name == "value_head" and c.reward.options == {}


def test_an_ets_model_type_applies_before_a_name_preset():
    c = load_config(None, ["policy.model=meta-llama/Llama-3.1-8B-Instruct", "policy_model_type=llama"])
    assert c.policy.chat_template is False          # the ETS code's hand-written chat turns
    assert c.policy.prompt_template.startswith("<|start_header_id|>system")


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.yaml")))
def test_the_shipped_configs_load_and_name_their_device(config):
    c = load_config(config, [])
    if "tiny" not in config.name:
        assert c.policy.device == "cuda" and c.policy.dtype == "bfloat16"
        assert model_preset(c.policy.model, "policy") is not None
        assert model_preset(c.reward.model, "reward") is not None


def test_check_names_the_presets_it_applied(capsys):
    config = CONFIGS / "qwen2.5-math-1.5b_qwen-prm-7b.yaml"
    assert main(["run", "--config", str(config), "--check", "policy.device=cpu", "data.hf_name=null",
                 f"data.path={DATA}"]) == 0
    out = capsys.readouterr().out
    assert "# policy.model matches the preset 'qwen2.5-math-*-instruct'" in out
    assert "# reward.model matches the preset 'qwen2.5-math-prm-*'" in out and "P(label 1)" in out
    assert "config OK" in out


def test_presets_are_one_table_and_a_row_prints_in_full(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert len(rows) == len(MODEL_PRESETS)
    assert main(["presets", "Qwen/Qwen2.5-Math-PRM-7B"]) == 0
    assert capsys.readouterr().out.splitlines() == ["reward.name: 'token_classification'",
                                                    "reward.options.trust_remote_code: True"]
    with pytest.raises(ConfigError, match="no preset matches"):
        model_preset_keys("gpt2")
