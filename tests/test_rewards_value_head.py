"""The value-head PRM against hand-computed references: Skywork's (a body, v_head.summary on
the last hidden state, each step encoded alone and followed by the step token's id), a
one-label token classifier, and the Llemma readings of a causal LM's logits."""

import pytest
import torch
from transformers import AutoModel, AutoModelForTokenClassification, AutoTokenizer

from ets.config import ConfigError, PolicyConfig, RewardConfig
from ets.models.tiny import STEP_TAG, build_tiny_model
from ets.rewards import RewardError, build_reward
from ets.rewards.heads import read_tensors
from tests import tiny_prms

QUESTION = "Tom has 3 apples and buys 4 more. How many?"
STEPS = ["3 + 4 = 7.\n\n", "The answer is 7.\n\n"]
TRAJS = [[STEPS, STEPS[:1], ["He has 8.\n\n"]], [["x = 2\n\n", "so 4\n\n"]]]
QUESTIONS = [QUESTION, "What is x squared if x = 2?"]


def build(model, **options):
    return build_reward(RewardConfig(name="value_head", model=str(model), options=options), PolicyConfig(model="tiny:llama"))


@pytest.fixture(scope="module")
def skywork(tmp_path_factory):
    return tiny_prms.skywork_prm(tmp_path_factory.mktemp("skywork"))


def test_skywork_scores_are_the_sigmoid_of_v_head_at_each_step_token(skywork):
    prm = build(skywork)
    tok = AutoTokenizer.from_pretrained(skywork)
    # Skywork's reference input: prompt "question\n", then each step encoded alone + the "\n" id.
    newline = tok.encode("\n", add_special_tokens=False)[-1]
    ids = tok.encode(QUESTION + "\n")
    flags = []
    for step in STEPS:
        ids += tok.encode(step.strip()) + [newline]
        flags.append(len(ids) - 1)
    assert prm.encode(QUESTION, STEPS) == (ids, flags)
    body = AutoModel.from_pretrained(skywork)
    head = read_tensors(skywork, "v_head.summary")
    with torch.no_grad():
        hidden = body(input_ids=torch.tensor([ids])).last_hidden_state[0, flags]
    expected = torch.sigmoid(hidden @ head["weight"].T + head["bias"])[:, 0].tolist()
    assert prm([QUESTION], [[STEPS]])[0][0] == pytest.approx(expected, abs=1e-5)


def test_a_batch_equals_one_by_one_on_either_padding_side(skywork):
    for side in ("left", "right"):
        prm = build(skywork, padding_side=side)
        batch = prm(QUESTIONS, TRAJS)
        assert [[len(t) for t in q] for q in batch] == [[2, 1, 1], [2]]
        for q, (question, trajs) in enumerate(zip(QUESTIONS, TRAJS)):
            for t, steps in enumerate(trajs):
                assert prm([question], [[steps]])[0][0] == pytest.approx(batch[q][t], abs=1e-5)


def test_a_one_label_token_classifier_is_a_value_head(tmp_path):
    path = tiny_prms.token_classifier(tmp_path, num_labels=1)
    prm = build(path, marker="<extra_0>", step_separator="\n")
    ids, positions = prm.encode(QUESTION, STEPS)
    model = AutoModelForTokenClassification.from_pretrained(path)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, positions, 0]
    assert prm([QUESTION], [[STEPS]])[0][0] == pytest.approx(torch.sigmoid(logits).tolist(), abs=1e-5)


@pytest.mark.parametrize("head", ["lm_logit", "lm_mean"])
def test_llemma_readings_of_a_causal_lm(head):
    """ETS / REBASE code: the logit of " ки" at each " ки"; Easy-to-Hard: the mean logit."""
    prm = build("tiny:llama", head=head, marker=STEP_TAG, template="{question} {steps}", step_separator="\n", tokenize="whole")
    assert prm.render("Q?", ["a\n\n", "b\n\n"]).text == "Q? a ки\nb ки"
    ids, positions = prm.encode(QUESTION, STEPS)
    model, tok = build_tiny_model("llama")
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, positions]
    value = logits[:, tok.convert_tokens_to_ids(STEP_TAG)] if head == "lm_logit" else logits.mean(-1)
    assert prm([QUESTION], [[STEPS]])[0][0] == pytest.approx(torch.sigmoid(value).tolist(), abs=1e-5)


def test_options_are_checked():
    with pytest.raises(ConfigError, match="head_token' is read only with head: lm_logit"):
        build("tiny:llama", head_token="+")
    with pytest.raises(ConfigError, match="option 'head' = 'value'"):
        build("tiny:llama", head="value")
    with pytest.raises(ConfigError, match="no single token for the marker 'ab'"):
        build("tiny:llama", head="lm_mean", marker="ab")


def test_a_head_of_the_wrong_width_fails_at_load(tmp_path):
    from safetensors.torch import load_file, save_file

    path = tiny_prms.skywork_prm(tmp_path)
    weights = load_file(path / "model.safetensors")
    weights["v_head.summary.weight"] = torch.zeros(1, 32)
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(RewardError, match=r"v_head.summary.weight .* has shape \[1, 32\], not \[outputs, 64\]"):
        build(path)
