"""Step embeddings from the models' own hidden states (`search.embedder: policy` / `prm`):
what the engine, the hf policy and the PRMs hand out equals the mean of a plain
transformers forward's final hidden states over the same tokens, L2-normalised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ets.config import PolicyConfig, RewardConfig, SearchConfig
from ets.engine import Engine
from ets.models.load import load_causal_lm
from ets.models.tiny import build_tiny_model
from ets.policy.base import ExpandRequest
from ets.policy.engine import EnginePolicy
from ets.policy.hf import HFPolicy
from ets.rewards import build_reward
from tests import tiny_prms
from tests.helpers import random_tokens

DEMO = Path(__file__).resolve().parents[1] / "ets" / "demo" / "checkpoints"
QUESTION = "Ann buys 7 vases at 146 dollars each and 3 cups at 25 dollars each. How much does she spend?"


def reference(model, tokens: list[int], lo: int, hi: int) -> torch.Tensor:
    """The mean of a plain forward's last hidden states (after the final norm) over
    positions lo..hi-1, L2-normalised."""
    with torch.inference_mode():
        states = model.base_model(input_ids=torch.tensor([tokens])).last_hidden_state[0]
    return torch.nn.functional.normalize(states[lo:hi].float().mean(0), dim=0)


def assert_sampled_from(model, path: list[int], new: list[int], embedding) -> None:
    """`embedding` is the pooled state of every position a new token was sampled from."""
    want = reference(model, path + new, len(path) - 1, len(path) + len(new) - 1)
    assert torch.allclose(torch.as_tensor(embedding), want, atol=1e-5), (torch.as_tensor(embedding) - want).abs().max()


@pytest.fixture(scope="module")
def demo_policy():
    return load_causal_lm(str(DEMO / "policy"), "cpu", "float32")


@pytest.fixture(scope="module", params=["tiny:llama", "demo policy"])
def model_tok(request, demo_policy):
    return build_tiny_model("llama", seed=5) if request.param == "tiny:llama" else demo_policy


def test_engine_expand_hands_out_the_pooled_states_its_tokens_were_sampled_from(model_tok):
    model, tok = model_tok
    engine = Engine(model, tok, kv_budget_tokens=4096)
    prompt = tok(QUESTION + "\n")["input_ids"]
    first = engine.expand([(prompt, 3, 7)], max_new_tokens=12, stop=["\n"], embed=True)[0]
    for c in first:
        assert c.embedding.shape == (model.config.hidden_size,) and c.embedding.dtype == torch.float32
        assert_sampled_from(model, prompt, c.token_ids, c.embedding)
    # a second round from a child: the path is cached, the new states come from the decode
    child = prompt + first[0].token_ids
    second = engine.expand([(child, 2, 8), (prompt, 1, 9)], max_new_tokens=12, stop=["\n"], embed=True)
    for path, conts in zip((child, prompt), second):
        for c in conts:
            assert_sampled_from(model, path, c.token_ids, c.embedding)
    assert engine.stats()["embedded_steps"] == 6
    # without `embed`, nothing is pooled
    assert engine.expand([(child, 1, 3)], max_new_tokens=4)[0][0].embedding is None
    assert engine.stats()["embedded_steps"] == 6


def test_a_preempted_sequence_pools_each_position_once():
    """A pool far smaller than the call: sequences are preempted and resume from the
    cache; each position's state is still counted once, from where it was computed."""
    model, tok = build_tiny_model("llama", seed=5)
    engine = Engine(model, tok, kv_budget_tokens=128)
    prompts = [random_tokens(20, seed=i) for i in range(4)]
    conts = engine.expand([(p, 3, 10 + i) for i, p in enumerate(prompts)], max_new_tokens=16, embed=True,
                          ignore_eos=True)
    assert engine.stats()["preempted"] > 0
    for prompt, cs in zip(prompts, conts):
        for c in cs:
            assert_sampled_from(model, prompt, c.token_ids, c.embedding)


def test_score_pooled_reads_a_span_even_where_its_tokens_are_cached(demo_policy):
    model, tok = demo_policy
    engine = Engine(model, tok, kv_budget_tokens=4096)
    tokens = tok(QUESTION + "\n7 vases, the tens: 7 * 40 = 280\n")["input_ids"]
    engine.score([tokens], [[len(tokens) - 1]])                      # the whole sequence is cached now
    rows, pooled = engine.score_pooled([tokens, tokens[:30]], [[], [29]], [(25, len(tokens)), None])
    assert torch.equal(rows[1], engine.score([tokens[:30]], [[29]])[0])  # the logits asked for, as `score` gives them
    assert torch.allclose(pooled[0], reference(model, tokens, 25, len(tokens)), atol=1e-5)
    assert not pooled[1].any()                                       # no span: a zero row
    engine.check()


def test_hf_policy_hands_out_what_the_engine_does(demo_policy):
    """The baseline pools from `generate`'s own forwards (left-padded batches)."""
    model, tok = demo_policy
    search = SearchConfig(max_step_tokens=40)
    config = PolicyConfig(model="demo", step_delimiter="\n", chat_template=False)
    on_engine = EnginePolicy(Engine(model, tok, kv_budget_tokens=8192), config, search)
    on_hf = HFPolicy(model, tok, config, search)
    assert on_engine.embeds_steps and on_hf.embeds_steps
    long_prompt = on_engine.format_prompt(QUESTION).token_ids
    short_prompt = on_engine.format_prompt("Bob buys 2 hats at 12 dollars each. How much does he spend?").token_ids
    requests = [ExpandRequest(0, long_prompt, 3, 11, embed=True), ExpandRequest(1, short_prompt, 2, 12, embed=True)]
    got, want = on_hf.expand(requests), on_engine.expand(requests)
    for hf_steps, engine_steps, request in zip(got, want, requests):
        for a, b in zip(hf_steps, engine_steps):
            assert a.token_ids == b.token_ids and a.finish == b.finish
            assert isinstance(a.embedding, np.ndarray) and np.allclose(a.embedding, b.embedding, atol=1e-5)
            assert_sampled_from(model, request.token_ids, a.token_ids, a.embedding)
    assert on_hf.stats()["embedded_steps"] == 5
    assert on_hf.expand([ExpandRequest(0, short_prompt, 1, 3)])[0][0].embedding is None


TRAJECTORIES = [["7 vases at 146 dollars, the tens: 7 * 40 = 280\n", "Vases, ones: 7 * 6 = 42\n"],
                ["Vases, ones: 7 * 6 = 42\n"], ["Vases, ones: 7 * 6 = 42\n"], ["Vases, ones: 7 * 6 = 43\n"]]


def assert_newest_step_pooled(prm, model, questions, trajectories, twin=None) -> None:
    """`score_with_embeddings` scores as `score` does (on `twin`, a PRM built alike, when a
    second call on the same one would score otherwise), and each trajectory's vector is
    the PRM's pooled final states over the tokens of its newest step's own text."""
    scores, embeddings = prm.score_with_embeddings(questions, trajectories)
    assert scores == (twin or prm).score(questions, trajectories)
    for question, trajs, vectors in zip(questions, trajectories, embeddings):
        for steps, vector in zip(trajs, vectors):
            if not steps:
                assert vector is None
                continue
            ids, positions = prm.encode(question, steps)
            (lo, hi), = prm._newest_step_spans([(question, steps)], [(ids, positions)])
            assert prm.tokenizer.decode(ids[lo:hi]).strip() == steps[-1].strip()
            assert vector.dtype == np.float32
            assert np.allclose(vector, reference(model, ids, lo, hi).numpy(), atol=1e-5)


@pytest.mark.parametrize("backend", ["engine", "forward"])
def test_the_demo_prm_pools_its_states_over_the_newest_step(backend):
    # (its surprise readout asks a plain forward for fewer rows once it has read a step,
    # which moves the rows' last bits: the scores are compared with a twin's first call)
    options = {"backend": backend, "surprise": {"tag": 0.7849, "step": 0.2927, "path": 0.1141, "bias": 1.6002}}
    prm, twin = (build_reward(RewardConfig(name="step_tag", model=str(DEMO / "prm"), options=options),
                              PolicyConfig(model=str(DEMO / "policy"))) for _ in range(2))
    assert prm.embeds_steps
    model = prm.backend.engine.model if backend == "engine" else prm.backend.model
    assert_newest_step_pooled(prm, model, [QUESTION, "Bob buys 2 hats at 12 dollars each."],
                              [TRAJECTORIES, [["Hats: 2 * 12 = 24\n"], []]], twin)
    assert prm.stats()["embedded_steps"] == 5


def test_a_token_classification_prm_pools_inside_its_chat_template(tmp_path):
    path = tiny_prms.token_classifier(tmp_path / "prm", chat_template=tiny_prms.QWEN_CHAT,
                                      specials=("<extra_0>", "<|im_start|>", "<|im_end|>"))
    prm = build_reward(RewardConfig(name="token_classification", model=str(path)), PolicyConfig(model="tiny:llama"))
    assert_newest_step_pooled(prm, prm.backend.model, ["What is 2 + 3?"],
                              [[["2 + 3 = 5\n\n", "The answer is 5.\n\n"], ["2 + 3 = 6\n\n"]]])


def test_a_chat_judgement_prm_finds_each_step_in_its_turn(tmp_path):
    path = tiny_prms.chat_judge(tmp_path / "judge")
    prm = build_reward(RewardConfig(name="chat_judgement", model=str(path), options={"backend": "forward"}),
                       PolicyConfig(model="tiny:llama"))
    assert_newest_step_pooled(prm, prm.backend.model, ["What is 2 + 3?"],
                              [[["2 + 3 = 5", "The answer is 5."], ["2 + 3 = 6"]]])


def test_a_value_head_prm_that_encodes_pieces_pools_over_its_body(tmp_path):
    """Skywork's layout: a causal LM's body under a linear value head, its text encoded
    piece by piece. Its tokenizer here merges ".\n" into one token, so the whole text
    tokenizes otherwise than its pieces: the newest step is found in its own piece."""
    from transformers import AutoTokenizer

    path = tiny_prms.skywork_prm(tmp_path / "skywork")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.add_tokens([".\n"])
    tokenizer.save_pretrained(path)
    prm = build_reward(RewardConfig(name="value_head", model=str(path), options={"tokenize": "pieces"}),
                       PolicyConfig(model="tiny:llama"))
    question, steps = "What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]
    assert prm.tokenizer(prm.render(question, steps).text)["input_ids"] != prm.encode(question, steps)[0]
    assert prm.embeds_steps
    assert_newest_step_pooled(prm, prm.backend.model.body, [question], [[steps, ["2 + 3 = 6."]]])
