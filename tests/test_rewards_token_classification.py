"""The token-classification PRM (Qwen2.5-Math-PRM convention) on a tiny random
Qwen2ForTokenClassification saved to disk and loaded by path, as a real one would be."""

import pytest
import torch
from transformers import AutoModelForTokenClassification

from ets.config import ConfigError, PolicyConfig, RewardConfig
from ets.models.tiny import build_tokenizer, tiny_config
from ets.rewards import build_reward
from tests.tiny_prms import vocab_rows

SEP = "<extra_0>"
CHAT = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
QUESTIONS = ["What is 2 + 3?", "Name an even prime."]
TRAJS = [[["2 + 3 = 5\n\n", "The answer is 5.\n\n"], ["2 + 3 = 6\n\n"]], [["It is 2.\n\n"], []]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A folder holding a tiny 2-label token classifier whose tokenizer has <extra_0>."""
    tok = build_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": [SEP]})
    tok.chat_template = CHAT
    config = tiny_config("qwen2", vocab_size=vocab_rows(tok), num_labels=2, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_config(config)
    with torch.no_grad():
        model.score.weight.mul_(4.0)           # spread the random head's probabilities
    path = tmp_path_factory.mktemp("tiny_token_prm")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def build(path, **options):
    return build_reward(RewardConfig(name="token_classification", model=str(path), options=options), PolicyConfig(model="tiny:llama"))


@pytest.fixture(scope="module")
def prm(checkpoint):
    return build(checkpoint)


def test_input_uses_the_chat_template_with_a_separator_after_each_step(prm):
    marked = prm.render("Q?", ["a\n\n", "b\n\n"])
    assert marked.text == (
        "<|system|>Please reason step by step, and put your final answer within \\boxed{}.\n"
        "<|user|>Q?\n<|assistant|>a<extra_0>b<extra_0>\n"
    )
    ids, positions = prm.encode("Q?", ["a\n\n", "b\n\n"])
    assert [prm.tokenizer.decode([ids[p]]) for p in positions] == [SEP, SEP]


def test_score_is_p_positive_at_each_separator(prm):
    scores = prm(QUESTIONS, TRAJS)
    assert [[len(t) for t in q] for q in scores] == [[2, 1], [1, 0]]
    ids, positions = prm.encode(QUESTIONS[0], TRAJS[0][0])
    with torch.no_grad():
        logits = prm.backend.model(input_ids=torch.tensor([ids])).logits[0, positions]
    expected = torch.softmax(logits, -1)[:, 1].tolist()
    assert scores[0][0] == pytest.approx(expected, abs=1e-5)
    values = [v for q in scores for t in q for v in t]
    assert all(0 <= v <= 1 for v in values)


def test_a_batch_equals_one_by_one_with_left_padding(checkpoint):
    prm = build(checkpoint, padding_side="left", chat_template=False)
    assert prm.render("Q?", ["a"]).text == "Q?\na<extra_0>"
    batch = prm(QUESTIONS, TRAJS)
    for q, (question, trajs) in enumerate(zip(QUESTIONS, TRAJS)):
        for t, steps in enumerate(trajs):
            assert prm([question], [[steps]])[0][0] == pytest.approx(batch[q][t], abs=1e-5)


def test_missing_separator_or_bad_label_fails_at_load(checkpoint):
    with pytest.raises(ConfigError, match="step separator '<extra_9>'"):
        build(checkpoint, separator="<extra_9>")
    with pytest.raises(ConfigError, match="positive_label 2"):
        build(checkpoint, positive_label=2)


def test_a_prm_with_its_own_code_loads_with_trust_remote_code_and_reads_its_head(tmp_path):
    """Qwen2.5-Math-PRM's layout: `Qwen2ForProcessRewardModel` in the checkpoint's own code."""
    from ets.rewards.base import RewardError
    from tests import tiny_prms

    path = tiny_prms.qwen_math_prm(tmp_path)
    with pytest.raises(RewardError, match="set reward.options.trust_remote_code: true"):
        build(path)
    prm = build(path, trust_remote_code=True)
    assert type(prm.backend.model).__name__ == "Qwen2ForProcessRewardModel"
    assert prm.render("Q?", ["a\n\n"]).text == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\na<extra_0><|im_end|>\n"
    )
    ids, positions = prm.encode(QUESTIONS[0], TRAJS[0][0])
    with torch.no_grad():
        logits = prm.backend.model(input_ids=torch.tensor([ids])).logits[0, positions]
    assert prm([QUESTIONS[0]], [TRAJS[0][:1]])[0][0] == pytest.approx(torch.softmax(logits, -1)[:, 1].tolist(), abs=1e-5)


def test_a_jinja_chat_template_replaces_the_tokenizers(checkpoint):
    """As the policy's `policy.chat_template`: a PRM trained on another frame is given it inline."""
    prm = build(checkpoint, chat_template="{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}|{% endfor %}",
                system_prompt="")
    assert prm.render("Q?", ["a\n\n"]).text == "[user] Q?|[assistant] a<extra_0>|"
