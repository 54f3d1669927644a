"""Every PRM convention run end to end through `ets run` on tiny stand-in checkpoints with
the right special tokens (tests/tiny_prms.py), and every misconfiguration failing when the
reward loads, before any search, with one `ets: error:` line and exit 2.

    convention                 reward                 stand-in
    Math-Shepherd (step tag)   step_tag               tiny:llama (its tokenizer has " ки")
    Llemma, ETS / REBASE code  value_head lm_logit    tiny:llama: the logit of " ки" at each " ки"
    Llemma, Easy-to-Hard       value_head lm_mean     tiny:llama, "# Question ... # Solution" framing
    Qwen2.5-Math-PRM           token_classification   own modelling code, <extra_0>, Qwen chat template
    *ForTokenClassification    token_classification   2 labels, plain template
    Skywork-o1-Open-PRM        value_head             Qwen2 body + v_head.summary weights
    one-label classifier       value_head             *ForTokenClassification, num_labels=1
    RLHFlow                    chat_judgement         Llama causal LM with a Llama-3-like chat template
"""

import json
from pathlib import Path

import pytest
import yaml

from tests import tiny_prms
from ets.app.cli import main

ROOT = Path(__file__).resolve().parents[1]
LLEMMA_E2H = "# Question\n\n{question}\n\n# Solution\n\n{steps}"

CONVENTIONS = {
    "math_shepherd": ("step_tag", "tiny:llama", {}),
    "llemma_ets_code": ("value_head", "tiny:llama", {"head": "lm_logit", "marker": " ки", "template": "{question} {steps}",
                                                     "step_separator": "\n", "tokenize": "whole"}),
    "llemma_easy_to_hard": ("value_head", "tiny:llama", {"head": "lm_mean", "marker": "\n", "step_separator": "\n",
                                                         "template": LLEMMA_E2H, "tokenize": "whole"}),
    "qwen_math_prm": ("token_classification", "qwen_math_prm", {"trust_remote_code": True}),
    "token_classifier": ("token_classification", "token_classifier", {}),
    "skywork": ("value_head", "skywork_prm", {}),
    "one_label_classifier": ("value_head", "one_label", {}),
    "rlhflow": ("chat_judgement", "chat_judge", {}),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("prms")
    return {
        "qwen_math_prm": tiny_prms.qwen_math_prm(root / "qwen_math_prm"),
        "qwen_no_auto_map": tiny_prms.qwen_math_prm(root / "qwen_no_auto_map", with_auto_map=False),
        "token_classifier": tiny_prms.token_classifier(root / "token_classifier", 2),
        "one_label": tiny_prms.token_classifier(root / "one_label", 1),
        "skywork_prm": tiny_prms.skywork_prm(root / "skywork_prm"),
        "chat_judge": tiny_prms.chat_judge(root / "chat_judge"),
        "bare_body": tiny_prms.bare_body(root / "bare_body"),
        "causal_lm": tiny_prms.causal_lm(root / "causal_lm"),
    }


def ets_run(tmp_path, checkpoints, name, model, options, **top):
    """`ets run` on configs/tiny.yaml with this reward, 2 problems, width 2; (exit code, output)."""
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw.update(method="beam", width=2, max_depth=3, concurrency=2, output=str(tmp_path / "r.jsonl"), **top)
    raw["data"] = {"path": str(ROOT / "configs" / "data" / "tiny.jsonl"), "limit": 2}
    raw["reward"] = {"name": name, "model": str(checkpoints.get(model, model)), "options": options}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return main(["run", "--quiet", "--config", str(config)]), tmp_path / "r.jsonl"


@pytest.mark.parametrize("convention", list(CONVENTIONS))
def test_each_convention_runs_end_to_end_with_a_score_per_step(tmp_path, checkpoints, convention, capsys):
    name, model, options = CONVENTIONS[convention]
    code, out = ets_run(tmp_path, checkpoints, name, model, options)
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2
    scores = []
    for record in records:
        assert record["trajectories"]
        for t in record["trajectories"]:
            assert t["steps"] and len(t["step_scores"]) == len(t["steps"])
            scores += t["step_scores"]
    assert all(0.0 < s < 1.0 for s in scores)
    assert len(set(scores)) > 1                       # read per step, not one constant


MISCONFIGURED = {
    # Qwen2.5-Math-PRM without trust_remote_code: transformers would load the bare Qwen2 body.
    "custom code, no trust_remote_code": (
        "token_classification", "qwen_math_prm", {},
        ["is a Qwen2ForProcessRewardModel with its own modelling code", "set reward.options.trust_remote_code: true"]),
    # The same checkpoint whose config lost its auto_map: the body loads, the head is dropped.
    "head dropped": (
        "token_classification", "qwen_no_auto_map", {},
        ["loaded as Qwen2Model left the checkpoint's weights score.0.bias", "trust_remote_code: true"]),
    "bare body": (
        "token_classification", "bare_body", {},
        ["(a Qwen2Model) is a body without a head: it returns 64 hidden dimensions per token"]),
    "bare body forced to a classifier": (
        "token_classification", "bare_body", {"auto_class": "token_classification"},
        ["has no trained weights for score.bias, score.weight (transformers initialised them at random)"]),
    "one-label head as a two-class classifier": (
        "token_classification", "one_label", {},
        ["has 1 output per token", "use reward.name: value_head"]),
    "label count option": (
        "token_classification", "token_classifier", {"num_labels": 3},
        ["option num_labels = 3 but the head", "has 2 outputs"]),
    # (a separator the tokenizer has: tokens are checked first, before the weights load)
    "causal LM as token classification": (
        "token_classification", "causal_lm", {"separator": " ки"},
        ["(a LlamaForCausalLM) loaded as LlamaModel left the checkpoint's weights lm_head.weight unused",
         "use reward.name: step_tag or chat_judgement"]),
    "causal LM forced to a classifier": (
        "token_classification", "causal_lm", {"separator": " ки", "auto_class": "token_classification"},
        ["loaded as LlamaForTokenClassification has no trained weights for score.bias, score.weight"]),
    "two-label head as a value head": (
        "value_head", "token_classifier", {},
        ["has 2 outputs per token", "use reward.name: token_classification"]),
    "causal LM as a value head": (
        "value_head", "causal_lm", {},
        ["has no value head: no weights v_head.summary.weight", "head: lm_logit or lm_mean"]),
    "value head as token classification": (
        "token_classification", "skywork_prm", {"separator": " ки"},
        ["v_head.summary.bias, v_head.summary.weight unused", "use reward.name: value_head"]),
    "no chat template": (
        "chat_judgement", "tiny:llama", {},
        ["the tokenizer has no chat template; set reward.options.chat_template"]),
    "step tag not in the vocabulary": (
        "step_tag", "tiny:llama", {"tag": " шаг"},
        ["no single token for the step tag ' шаг'"]),
    "good token not in the vocabulary": (
        "chat_judgement", "chat_judge", {"good_token": "++"},
        ["no single token for the good token '++'"]),
    "separator not in the vocabulary": (
        "token_classification", "token_classifier", {"separator": "<extra_9>"},
        ["no single token for the step separator '<extra_9>'"]),
    "marker not in the vocabulary": (
        "value_head", "skywork_prm", {"marker": "<step>"},
        ["no single token for the marker '<step>'"]),
    "head token not in the vocabulary": (
        "value_head", "tiny:llama", {"head": "lm_logit", "head_token": "+-"},
        ["no single token for the head token '+-'"]),
}


@pytest.mark.parametrize("case", list(MISCONFIGURED))
def test_each_misconfiguration_fails_at_load_with_one_line(tmp_path, checkpoints, case, capsys):
    name, model, options, expected = MISCONFIGURED[case]
    code, out = ets_run(tmp_path, checkpoints, name, model, options)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("ets: error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"ets: error: reward '{name}'")
    for text in expected:
        assert text in lines[0]
    assert not out.exists() or not out.read_text().strip()     # nothing was searched
