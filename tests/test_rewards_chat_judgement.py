"""The chat-judgement PRM (RLHFlow convention) against RLHFlow's reference reading: one
conversation per step prefix, the row 3 from the end (the token before the assistant's
"+", then "+" and the end of turn), softmax over [+, -]."""

import pytest
import torch

from ets.config import ConfigError, PolicyConfig, RewardConfig
from ets.rewards import build_reward
from ets.rewards.chat_judgement import ChatJudgementOptions, ChatJudgementPRM
from tests import tiny_prms

QUESTIONS = ["Tom has 3 apples and buys 4 more. How many?", "What is 2 + 2?"]
TRAJS = [[["3 + 4 = 7\n\n", "The answer is 7.\n\n"], ["3 + 4 = 8\n\n"]], [["2 + 2 = 4\n\n"], []]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_prms.chat_judge(tmp_path_factory.mktemp("chat_judge"))


def flat(scores):
    return [v for q in scores for t in q for v in t]


def build(model, policy_backend="hf", **options):
    return build_reward(RewardConfig(name="chat_judgement", model=str(model), options=options),
                        PolicyConfig(model="tiny:llama", backend=policy_backend))


@pytest.fixture(scope="module")
def prm(checkpoint):
    return build(checkpoint)


def test_each_step_is_a_user_turn_answered_by_the_assistant(prm):
    marked = prm.render("Q?", ["a + b\n\n", "c\n\n"])
    turn = "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>"
    assert marked.text == "<s>" + "".join(turn.format(*m) for m in [("user", "Q? a + b"), ("assistant", "+"),
                                                                      ("user", "c"), ("assistant", "+")])
    ids, positions = prm.encode("Q?", ["a + b\n\n", "c\n\n"])
    # Read at the token before each judgement: the row that predicts it.
    assert [prm.tokenizer.decode(ids[p + 1:p + 2]) for p in positions] == ["+", "+"]
    assert ids.count(prm.tokenizer.bos_token_id) == 1       # the template's BOS, not a second one


def rlhflow_reference(prm, question, steps):
    tok, model = prm.tokenizer, prm.backend.model
    plus, minus = tok.convert_tokens_to_ids("+"), tok.convert_tokens_to_ids("-")
    conversation, scores = [], []
    for k, step in enumerate(steps):
        conversation.append({"role": "user", "content": question + " " + step.strip() if k == 0 else step.strip()})
        conversation.append({"role": "assistant", "content": "+"})
        ids = tok.apply_chat_template(conversation, tokenize=True, return_dict=True)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, -3, [plus, minus]]
        scores.append(torch.softmax(logits, -1)[0].item())
    return scores


def test_scores_match_rlhflows_reference(prm):
    scores = prm(QUESTIONS, TRAJS)
    assert [[len(t) for t in q] for q in scores] == [[2, 1], [1, 0]]
    for q, (question, trajs) in enumerate(zip(QUESTIONS, TRAJS)):
        for t, steps in enumerate(trajs):
            assert scores[q][t] == pytest.approx(rlhflow_reference(prm, question, steps), abs=1e-5)


def test_options_frame_the_conversation(checkpoint):
    prm = build(checkpoint, system_prompt="Judge each step.", first_turn="Problem: {question}\nStep: {step}")
    text = prm.render("What is {x}?", ["a\n\n"]).text
    assert "<|start_header_id|>system<|end_header_id|>\n\nJudge each step.<|eot_id|>" in text
    assert "Problem: What is {x}?\nStep: a<|eot_id|>" in text       # braces in the question stay
    other = build("tiny:llama", chat_template="{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")
    assert other.render("Q?", ["a", "b"]).text == "[user] Q? a\n[assistant] +\n[user] b\n[assistant] +\n"
    assert len(other(["Q?"], [[["a", "b"]]])[0][0]) == 2


def test_misconfigurations_fail_when_built(checkpoint):
    with pytest.raises(ConfigError, match="has no chat template; set reward.options.chat_template"):
        build("tiny:llama")
    with pytest.raises(ConfigError, match="no single token for the bad token '--'"):
        build(checkpoint, bad_token="--")
    with pytest.raises(ConfigError, match="option 'tag' frames step_tag's text"):
        build(checkpoint, tag=" <step>")
    with pytest.raises(ConfigError, match="'first_turn' = '{question}' must contain {step}"):
        build(checkpoint, first_turn="{question}")
    with pytest.raises(ConfigError, match="unknown option 'good'"):
        build(checkpoint, good="+")


def test_the_engine_gives_the_forward_scores_and_shares_the_conversation(checkpoint, prm):
    on_engine = build(checkpoint, policy_backend="engine")
    assert type(on_engine.backend).__name__ == "EngineBackend"
    assert flat(on_engine(QUESTIONS, TRAJS)) == pytest.approx(flat(prm(QUESTIONS, TRAJS)), abs=1e-5)
    on_engine.backend.engine.check()


def test_from_model_defaults_to_its_own_options(prm):
    plain = ChatJudgementPRM.from_model(prm.backend.model, prm.tokenizer)
    assert isinstance(plain.options, ChatJudgementOptions)
    assert flat(plain(QUESTIONS, TRAJS)) == pytest.approx(flat(prm(QUESTIONS, TRAJS)))
