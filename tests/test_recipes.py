"""The ETS code's recipes run unchanged: tests/fixtures/ets_recipes/ holds its three
`hype-parameters/ets_{16,64,256}_math500.yaml` byte for byte; every key is understood,
the model presets apply under the user's keys, and `ets run --check` / `ets presets`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ets.app.cli import main
from ets.config import PRESETS, ConfigError, config_from_dict, load_config

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "tests" / "fixtures" / "ets_recipes"
DATA = ROOT / "configs" / "data" / "tiny.jsonl"
LAMBDA_S = {16: 1.5, 64: 1.4, 256: 1.45}
# Tiny random models and a short search: what changes is the machine, not the file.
TINY = ["policy.model=tiny:llama", f"data.path={DATA}", "data.limit=1", "max_step_tokens=4", "max_tokens=8",
        "max_depth=2", "concurrency=1"]


def recipe(width: int) -> Path:
    return RECIPES / f"ets_{width}_math500.yaml"


def test_the_fixtures_are_the_ets_code_files_verbatim():
    text = recipe(16).read_text()
    assert text.startswith("temperature: 1.0 # sample temperature\n") and "num_threads: 8 # threads in SGLang\n" in text
    assert [len(recipe(w).read_text()) for w in (16, 64, 256)] == [388, 388, 392]  # the files' sizes


@pytest.mark.parametrize("width", [16, 64, 256])
def test_each_recipe_loads_with_every_key_understood(width):
    c = load_config(recipe(width))
    s = c.search
    assert (s.method, s.width, s.temperature, s.max_step_tokens, s.max_tokens) == ("ets", width, 1.0, 256, 1024)
    assert (s.softmax_temperature, s.lambda_c, s.lambda_s) == (0.2, 1.0, LAMBDA_S[width])
    assert c.num_threads == 8
    assert c.output == f"exp_results/ets_{width}_math500/results.jsonl"          # store_path: the folder
    assert (c.policy_model_type, c.reward_model_type) == ("llemma", "llemma")
    # the llemma preset: the ETS code's prompt (question + newline), stop at the step tag,
    # and its Llemma PRM read at each " ки"
    assert (c.policy.prompt_template, c.policy.step_delimiter) == ("{question}\n", "ки")
    assert c.reward.name == "value_head"
    assert c.reward.options == PRESETS["llemma"]["reward"]["options"]


@pytest.mark.parametrize("width", [16, 64, 256])
def test_each_recipe_runs_on_tiny_models(tmp_path, width, caplog):
    out = tmp_path / "results.jsonl"
    with caplog.at_level(logging.WARNING):
        assert main(["run", "--config", str(recipe(width)), "--output", str(out), *TINY]) == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["method"] == "ets" and record["width"] == width
    assert record["kv_size"] > record["kv_size_ref"] > 0        # the prompt counted, and as 2 tokens
    notes = [r.getMessage() for r in caplog.records if "num_threads" in r.getMessage()]
    assert len(notes) == 1 and "no effect here" in notes[0]


def test_a_rebase_recipe_runs_too(tmp_path):
    """REBASE's recipe has the same keys with select_method: softmax (the fixtures' README)."""
    text = recipe(16).read_text().replace('"softmax_costmodel"', '"softmax"')
    text = "".join(line + "\n" for line in text.splitlines() if not line.startswith(("lambdac", "lambdas")))
    path = tmp_path / "rebase.yaml"
    path.write_text(text)
    out = tmp_path / "results.jsonl"
    assert main(["run", "--quiet", "--config", str(path), "--output", str(out), *TINY]) == 0
    assert json.loads(out.read_text().splitlines()[0])["method"] == "rebase"


def test_mistral_gives_the_math_shepherd_prm_tokens():
    from ets.rewards import build_reward

    c = load_config(recipe(16), ["reward_model_type=mistral", "policy.model=tiny:llama"])
    assert c.reward.name == "step_tag"
    assert {k: c.reward.options[k] for k in ("tag", "good_token", "bad_token")} == {
        "tag": " ки", "good_token": "+", "bad_token": "-"}
    prm = build_reward(c.reward, c.policy)
    tok = prm.tokenizer
    assert prm.marker_id == tok.convert_tokens_to_ids(" ки")
    assert prm.backend.columns.tolist() == [tok.convert_tokens_to_ids("+"), tok.convert_tokens_to_ids("-")]


def test_explicit_keys_override_a_preset(tmp_path):
    c = load_config(recipe(16), ['policy.step_delimiter="\\n\\n"', "reward.options.marker=' ки'",
                                 "reward.options.head=lm_mean"])
    assert c.policy.step_delimiter == "\n\n" and c.policy.prompt_template == "{question}\n"  # the rest stays
    assert c.reward.options["head"] == "lm_mean" and c.reward.options["tokenize"] == "whole"
    # another reward named explicitly: the preset's reward options are not for it
    c = load_config(recipe(16), ["reward.name=step_tag"])
    assert c.reward.name == "step_tag" and c.reward.options == {}
    # an explicit output wins over store_path
    assert config_from_dict({"store_path": "a/", "output": "b.jsonl"}).output == "b.jsonl"
    # the two presets are independent
    c = config_from_dict({"policy_model_type": "llama", "reward_model_type": "mistral"})
    assert c.policy.step_delimiter == "\n\n" and "<|start_header_id|>user" in c.policy.prompt_template
    assert c.reward.name == "step_tag"


def test_the_llama_preset_is_the_ets_code_chat_and_rlhflow_judge():
    c = config_from_dict({"policy_model_type": "llama", "reward_model_type": "llama"})
    template = c.policy.prompt_template
    assert template.startswith("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023")
    assert "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct." in template
    assert template.endswith("{question}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert c.reward.name == "chat_judgement" and c.reward.options == {"good_token": "+", "bad_token": "-"}


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"policy_model_type": "qwen"}, ["policy_model_type", "'qwen'", "llemma, mistral, llama", "ets presets"]),
        ({"reward_model_type": 3}, ["reward_model_type", "not a preset"]),
        ({"num_threads": 0}, ["num_threads", ">= 1"]),
        ({"store_path": ""}, ["store_path", "folder"]),
    ],
)
def test_bad_recipe_values_are_named(raw, words):
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    for w in words:
        assert w in str(err.value)


def test_check_prints_the_resolved_settings_and_runs_nothing(tmp_path, capsys):
    out = tmp_path / "never.jsonl"
    assert main(["run", "--config", str(recipe(64)), "--output", str(out), "--check", f"data.path={DATA}"]) == 0
    text = capsys.readouterr().out
    assert "method: ets" in text and "width: 64" in text and "lambda_s: 1.4" in text
    assert 'step_delimiter: ки' in text and "name: value_head" in text
    assert "# data: 4 problems" in text and "no effect here" in text and "config OK" in text
    assert not out.exists() and not list(tmp_path.iterdir())
    # the printed settings are a config that loads to the same settings
    again = tmp_path / "resolved.yaml"
    again.write_text(text)
    assert load_config(again).to_dict() == load_config(recipe(64), [f"output={out}", f"data.path={DATA}"]).to_dict()


def test_check_fails_like_a_run_would(capsys):
    assert main(["run", "--config", str(recipe(16)), "--check", "data.path=/no/such.jsonl"]) == 2
    assert "ets: error:" in capsys.readouterr().err
    assert main(["run", "--config", str(recipe(16)), "--check", f"data.path={DATA}",
                 "reward.options.nope=1"]) == 2
    assert "unknown option 'nope'" in capsys.readouterr().err


def test_presets_are_listed_from_the_cli(capsys):
    assert main(["presets"]) == 0
    text = capsys.readouterr().out
    for name in PRESETS:
        assert f"{name}: " in text
    assert "reward_model_type: mistral -> reward.options.tag = ' ки'" in text
