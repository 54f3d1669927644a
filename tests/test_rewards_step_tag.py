"""The step-tag PRM (Math-Shepherd convention) on tiny random models: input format, marker
positions, score shape and range, batch invariance, padding sides, and engine == forward."""

import pytest
import torch

from ets.config import ConfigError, PolicyConfig, RewardConfig
from ets.models.tiny import STEP_TAG, build_tiny_model
from ets.rewards import build_reward
from ets.rewards.marking import MarkerError, token_id
from ets.rewards.backends import EngineBackend
from ets.rewards.step_tag import StepTagOptions, StepTagPRM

QUESTIONS = ["Tom has 3 apples and buys 4 more. How many apples does he have?", "What is {x}^2 if x = 3?"]
# Two questions; siblings share history and differ in the newest step; one empty trajectory.
TRAJS = [
    [["3 + 4 = 7\n\n", "The answer is 7.\n\n"], ["3 + 4 = 7\n\n", "So 8.\n\n"], ["He has 7 apples.\n\n"]],
    [["x^2 = 9\n\n"], [], ["Square it: 3*3\n\n", "= 9\n\n", "The answer is 9.\n\n"]],
]


def sharpened(arch: str):
    """A tiny random model whose logits are spread out, so scores differ visibly."""
    model, tok = build_tiny_model(arch, seed=2)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model, tok


@pytest.fixture(scope="module")
def llama():
    return sharpened("llama")


@pytest.fixture(scope="module")
def prm(llama):
    return StepTagPRM.from_model(*llama)


def flat(scores):
    return [v for per_q in scores for per_t in per_q for v in per_t]


def test_input_is_math_shepherd_format_and_tags_are_found(prm):
    marked = prm.render("Q?", ["a = 1\n\n", "b = 2\n\n"])
    assert marked.text == "Q? a = 1 ки\nb = 2 ки"
    ids, positions = prm.encode("Q?", ["a = 1\n\n", "b = 2\n\n"])
    assert [prm.tokenizer.decode([ids[p]]) for p in positions] == [STEP_TAG, STEP_TAG]
    # A tag that the policy itself wrote inside a step is removed, not scored twice.
    ids, positions = prm.encode("Q? ки", ["x ки y\n\n"])
    assert len(positions) == 1 and positions[0] == len(ids) - 1


def test_scores_have_the_input_shape_and_lie_in_0_1(prm):
    scores = prm(QUESTIONS, TRAJS)
    assert [[len(t) for t in q] for q in scores] == [[len(t) for t in q] for q in TRAJS]
    values = flat(scores)
    assert all(0.0 <= v <= 1.0 for v in values)
    assert max(values) - min(values) > 0.05       # the sharpened model does discriminate


def test_a_batch_equals_one_by_one(prm):
    batch = prm(QUESTIONS, TRAJS)
    for q, (question, trajs) in enumerate(zip(QUESTIONS, TRAJS)):
        for t, steps in enumerate(trajs):
            alone = prm([question], [[steps]])[0][0]
            assert alone == pytest.approx(batch[q][t], abs=1e-5)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_padding_side_and_micro_batches_do_not_change_scores(arch):
    model, tok = sharpened(arch)
    reference = flat(StepTagPRM.from_model(model, tok)(QUESTIONS, TRAJS))
    for options in (StepTagOptions(padding_side="left"), StepTagOptions(padding_side="right", max_batch_tokens=40)):
        other = StepTagPRM.from_model(model, tok, options)
        assert flat(other(QUESTIONS, TRAJS)) == pytest.approx(reference, abs=1e-5)
    assert other.stats()["forward_calls"] > 1       # max_batch_tokens=40 split the round


def test_missing_tokens_fail_at_load_naming_the_token():
    def build(**options):
        return build_reward(RewardConfig(name="step_tag", options={"backend": "forward", **options}), PolicyConfig(model="tiny:llama"))

    with pytest.raises(ConfigError, match="step tag ' шаг'"):
        build(tag=" шаг")
    with pytest.raises(ConfigError, match="good token '\\+\\+'"):
        build(good_token="++")
    with pytest.raises(ConfigError, match="bad token id 99999"):
        build(bad_token=99999)


def test_token_id_accepts_single_tokens_and_ids(llama):
    _, tok = llama
    assert token_id(tok, STEP_TAG, "step tag") == tok.convert_tokens_to_ids(STEP_TAG)
    assert token_id(tok, "+", "good token") == tok.encode("+", add_special_tokens=False)[0]
    assert token_id(tok, 5, "good token") == 5
    with pytest.raises(MarkerError, match="'ab'"):
        token_id(tok, "ab", "good token")


def test_build_by_name_with_forward_backend():
    prm = build_reward(RewardConfig(name="step_tag", options={"backend": "forward"}), PolicyConfig(model="tiny:llama"))
    assert type(prm.backend).__name__ == "ForwardBackend"
    assert len(flat(prm(QUESTIONS, TRAJS))) == 9




def engine_prm(model, tok, **backend_options):
    from ets.engine import Engine

    engine = Engine.from_pretrained(model, kv_budget_tokens=4096, device="cpu", dtype="float32", tokenizer=tok)
    return StepTagPRM(tok, StepTagOptions(), lambda cols: EngineBackend(engine, cols, **backend_options)), engine


@pytest.mark.parametrize("memo", [True, False])
def test_engine_and_plain_forward_agree(llama, memo):
    model, tok = llama
    on_engine, engine = engine_prm(model, tok, **({} if memo else {"max_cached_rows": 0}))
    plain = StepTagPRM.from_model(model, tok)
    for _ in range(2):   # the second time everything is cached
        assert flat(on_engine(QUESTIONS, TRAJS)) == pytest.approx(flat(plain(QUESTIONS, TRAJS)), abs=1e-5)
        engine.check()
    assert on_engine.stats()["computed_tokens"] < plain.stats()["computed_tokens"] / 2


def test_engine_computes_only_the_newest_steps_of_a_round(llama):
    """Round 2 of a search: siblings extend round 1's trajectories by one step each."""
    model, tok = llama
    on_engine, engine = engine_prm(model, tok)
    plain = StepTagPRM.from_model(model, tok)
    q = [QUESTIONS[0]]
    round1 = [[["3 + 4 = 7\n\n"], ["He buys 4.\n\n"]]]
    round2 = [[round1[0][0] + ["The answer is 7.\n\n"], round1[0][0] + ["So 8.\n\n"], round1[0][1] + ["3 + 4 = 7\n\n"]]]
    on_engine(q, round1)
    before, plain_before = on_engine.stats(), plain.stats()
    assert flat(on_engine(q, round2)) == pytest.approx(flat(plain(q, round2)), abs=1e-5)
    computed = on_engine.stats()["computed_tokens"] - before["computed_tokens"]
    recomputed = plain.stats()["computed_tokens"] - plain_before["computed_tokens"]
    # Only each newest step (its text, the separator and its tag) is new, and what the two
    # siblings of the first history begin their steps with alike is computed once for both.
    newest = [tok.encode("\n" + s[-1].strip() + STEP_TAG, add_special_tokens=False) for s in round2[0]]
    alike = next(i for i, (a, b) in enumerate(zip(newest[0], newest[1])) if a != b)
    assert alike >= 1  # the separator at least
    assert computed == sum(map(len, newest)) - alike < recomputed / 4
    engine.check()


def test_build_by_name_uses_the_engine_when_the_policy_does():
    prm = build_reward(RewardConfig(name="step_tag", options={"backend": "auto"}), PolicyConfig(model="tiny:llama", backend="engine"))
    assert type(prm.backend).__name__ == "EngineBackend"
    assert len(flat(prm(QUESTIONS, TRAJS))) == 9


def test_the_policy_engine_is_shared_only_on_request_and_for_the_same_model():
    from ets.engine import Engine

    policy_engine = Engine.from_pretrained("tiny:llama", kv_budget_tokens=1024)
    policy = PolicyConfig(model="tiny:llama", backend="engine")

    def backend_engine(model=None, **options):
        prm = build_reward(RewardConfig(name="step_tag", model=model, options=options), policy, engine=policy_engine)
        return prm.backend.engine

    assert backend_engine(share_policy_engine=True) is policy_engine
    assert backend_engine() is not policy_engine                    # default: its own KV pool
    assert backend_engine("tiny:qwen2", share_policy_engine=True) is not policy_engine
