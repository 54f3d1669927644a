"""The step-tag PRM read with its LM's surprise (option `surprise`, rewards/surprise.py), on a
tiny random model: the readout is the formula on a plain forward's full logits, it reduces
to the tag alone, it carries doubt along a path, engine == forward, and bad weights fail
in one line. The demo's own figures are scripts/demo_quality.py's."""

import math

import numpy as np
import pytest
import torch

from ets.config import ConfigError, RewardConfig
from ets.engine import Engine
from ets.models.tiny import STEP_TAG, build_tiny_model
from ets.rewards import build_reward
from ets.rewards.step_tag import StepTagOptions, StepTagPRM
from ets.rewards.surprise import fit_readout, readout_features

QUESTION = "Tom has 37 apples and buys 45 more. How many?"
TRAJS = [["37 + 45 = 82\n\n", "The answer is 82.\n\n"], ["37 + 45 = 72\n\n", "So 72 apples.\n\n"],
         ["Add them.\n\n", "Then 82.\n\n"]]
W = {"tag": 1.3, "step": 0.4, "path": 0.25, "bias": -0.2}


@pytest.fixture(scope="module")
def model_tok():
    model, tok = build_tiny_model("llama", seed=2)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)          # spread the logits, so scores differ visibly
    return model, tok


def by_hand(model, tok, steps, w):
    """The readout's formula from one plain forward's full logits."""
    text = QUESTION + " " + "\n".join(s.strip() + STEP_TAG for s in steps)
    enc = tok(text, return_offsets_mapping=True)
    ids = enc["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    good, bad = tok.convert_tokens_to_ids("+"), tok.convert_tokens_to_ids("-")
    tag = tok.convert_tokens_to_ids(tok.tokenize(STEP_TAG))[-1]
    tags = [t for t, i in enumerate(ids) if i == tag]
    out, lowest, start = [], 0.0, len(QUESTION) + 1
    for k, t in enumerate(tags):
        end = start + len(steps[k].strip())
        s = min([logp[u - 1, ids[u]].item() for u, (a, b) in enumerate(enc["offset_mapping"])
                 if start <= a < end and text[a:b].isdigit()] or [0.0])
        lowest = min(lowest, s)
        z = w["tag"] * (logp[t, good] - logp[t, bad]).item() + w["step"] * s + w["path"] * lowest + w["bias"]
        out.append(1 / (1 + math.exp(-z)))
        start = end + len(STEP_TAG) + 1
    return out


def test_the_readout_is_its_formula_on_the_full_logits(model_tok):
    prm = StepTagPRM.from_model(*model_tok, StepTagOptions(surprise=W))
    scores = prm([QUESTION], [TRAJS])[0]
    for steps, got in zip(TRAJS, scores):
        assert got == pytest.approx(by_hand(*model_tok, steps, W), abs=1e-5)
    # The numbers of the question are not the step's: a step without numbers has s_k = 0.
    (logits, surprise), = prm.surprise_features([QUESTION], [[TRAJS[2]]])[0]
    assert surprise[0] == 0.0 and surprise[1] < 0.0


def test_tag_weight_one_alone_is_the_tag_only_prm(model_tok):
    tag_only = StepTagPRM.from_model(*model_tok)([QUESTION], [TRAJS])[0]
    readout = StepTagPRM.from_model(*model_tok, StepTagOptions(surprise={"tag": 1, "step": 0, "path": 0, "bias": 0}))
    for got, want in zip(readout([QUESTION], [TRAJS])[0], tag_only):
        assert got == pytest.approx(want, abs=1e-6)


def test_path_weight_carries_a_surprise_to_the_later_steps(model_tok):
    prm = StepTagPRM.from_model(*model_tok, StepTagOptions(surprise={"tag": 0, "step": 0, "path": 1, "bias": 0}))
    (logits, surprise), = prm.surprise_features([QUESTION], [[TRAJS[0]]])[0]
    scores = prm([QUESTION], [[TRAJS[0]]])[0][0]
    assert scores == pytest.approx([1 / (1 + math.exp(-min(surprise[:k + 1]))) for k in range(2)], abs=1e-6)
    assert [f[2] for f in readout_features(logits, surprise)] == [min(surprise[:1]), min(surprise)]


def test_engine_backend_equals_forward_step_by_step(model_tok):
    model, tok = model_tok
    forward = StepTagPRM.from_model(model, tok, StepTagOptions(surprise=W))([QUESTION], [TRAJS])[0]
    engine = StepTagPRM.from_model(model, tok, StepTagOptions(surprise=W), engine=Engine.from_pretrained(model, tokenizer=tok))
    # As a search asks: one step more each round, the history's rows memoised.
    for depth in (1, 2):
        got = engine([QUESTION], [[steps[:depth] for steps in TRAJS]])[0]
        assert [g[-1] for g in got] == pytest.approx([f[depth - 1] for f in forward], abs=1e-5)


def test_fit_readout_recovers_the_weights_that_made_the_labels():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20000, 3))
    z = x @ np.array([1.2, 0.3, 0.6]) - 0.4
    good = rng.random(len(z)) < 1 / (1 + np.exp(-z))
    fitted = fit_readout([tuple(r) for r in x], good.tolist())
    assert [fitted.tag, fitted.step, fitted.path, fitted.bias] == pytest.approx([1.2, 0.3, 0.6, -0.4], abs=0.06)
    with pytest.raises(ValueError, match="both good and bad"):
        fit_readout([(0.0, 0.0, 0.0)] * 3, [True] * 3)


@pytest.mark.parametrize("surprise, says", [
    ({"tag": 1, "step": 0.3}, "must map exactly tag, step, path, bias"),
    ({"tag": 1, "step": "high", "path": 0, "bias": 0}, "step must be finite numbers"),
    ({"tag": True, "step": 0, "path": 0, "bias": 0}, "tag must be finite numbers"),
    (0.5, "must map exactly"),
])
def test_bad_weights_fail_in_one_line_naming_the_option(surprise, says):
    with pytest.raises(ConfigError, match=says) as err:
        build_reward(RewardConfig(name="step_tag", model="unused", options={"surprise": surprise}))
    assert "'surprise'" in str(err.value) and "\n" not in str(err.value)


def test_remembered_steps_give_the_scores_of_a_fresh_read(model_tok):
    """The readout remembers each step's s_k (a search re-scores whole paths every round)."""
    prm = StepTagPRM.from_model(*model_tok, StepTagOptions(surprise=W))
    prefixes = [[steps[:1] for steps in TRAJS]]
    prm([QUESTION], prefixes)                                 # the first steps, remembered
    again = prm([QUESTION], [TRAJS])[0]                       # ... now read from memory
    fresh = StepTagPRM.from_model(*model_tok, StepTagOptions(surprise=W))([QUESTION], [TRAJS])[0]
    for got, want in zip(again, fresh):
        assert got == pytest.approx(want, abs=1e-6)
    assert len(prm._surprise_memo) == sum(len(t) for t in TRAJS)
