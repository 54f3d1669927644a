"""The engine as the search controller's policy: same steps as the `transformers` baseline,
and locks that follow the live nodes of the search."""

import zlib

import pytest

from ets.config import PolicyConfig, SearchConfig
from ets.loop.controller import search
from ets.data import Problem
from ets.engine import Engine
from ets.policy.engine import EnginePolicy
from ets.policy.hf import HFPolicy
from ets.policy.base import ExpandRequest
from ets.models.tiny import build_tiny_model


@pytest.fixture(scope="module")
def model_tok():
    return build_tiny_model("qwen2", seed=3)


def test_engine_policy_matches_hf_policy_greedy(model_tok):
    model, tok = model_tok
    search = SearchConfig(temperature=0, max_step_tokens=8, width=4)
    policy_cfg = PolicyConfig(model="tiny:qwen2", step_delimiter="a")  # a delimiter that occurs
    engine_policy = EnginePolicy(Engine(model, tok, kv_budget_tokens=2048), policy_cfg, search)
    hf_policy = HFPolicy(model, tok, policy_cfg, search)
    prompt = engine_policy.format_prompt("What is 2 + 3?").token_ids
    paths = {("q", 0): prompt}
    parent_handles = []
    for depth in range(2):
        requests = [ExpandRequest(key, path, 2) for key, path in paths.items()]
        got = engine_policy.expand(requests)
        want = hf_policy.expand(requests)
        assert [[s[:3] for s in steps] for steps in got] == [[s[:3] for s in steps] for steps in want]
        assert all(s.handle is not None for steps in got for s in steps)
        engine_policy.release(parent_handles)  # the children now lock the parents' paths
        engine_policy.engine.check()
        # keep the first child of each request; release the others at once
        engine_policy.release([s.handle for steps in got for s in steps[1:]])
        parent_handles = [steps[0].handle for steps in got]
        paths = {("q", depth, i): r.token_ids + steps[0].token_ids for i, (r, steps) in enumerate(zip(requests, got))}
    # only the kept children hold locks now: exactly their paths, minus the last token
    # of each (its KV is computed when the path is extended)
    locked = [p[:-1] for p in paths.values()]
    unique_tokens = len({tuple(p[:k]) for p in locked for k in range(1, len(p) + 1)})
    assert engine_policy.stats()["locked_kv_tokens"] == unique_tokens
    engine_policy.release(parent_handles)
    assert engine_policy.stats()["locked_kv_tokens"] == 0
    engine_policy.engine.check()



def _score(questions, trajectories):
    """A deterministic reward: a hash of the newest step text, in [0, 1]."""
    return [[[zlib.crc32(s.encode()) % 1000 / 999 for s in traj] for traj in per_q] for per_q in trajectories]


@pytest.mark.parametrize("method", ["beam", "rebase"])
def test_controller_search_on_engine_equals_baseline(model_tok, method):
    model, tok = model_tok
    problems = [Problem(f"What is {i} + {i}?", str(2 * i), id=str(i)) for i in range(3)]
    cfg = SearchConfig(method=method, width=4, max_step_tokens=5, max_depth=3, max_tokens=100, temperature=0)
    policy_cfg = PolicyConfig(model="tiny:qwen2", step_delimiter="a")
    engine = Engine(model, tok, kv_budget_tokens=4096)
    on_engine = search(problems, EnginePolicy(engine, policy_cfg, cfg), _score, cfg, concurrency=2, save_trees=True)
    baseline = search(problems, HFPolicy(model, tok, policy_cfg, cfg), _score, cfg, concurrency=2, save_trees=True)
    assert [r["trajectories"] for r in on_engine] == [r["trajectories"] for r in baseline]
    engine.check()
    stats = engine.stats()
    assert stats["cache_hit_tokens"] > stats["computed_tokens"] / 2
    # The controller released every handle exactly once: nothing stays locked.
    assert stats["locked_kv_tokens"] == 0 and stats["live_handles"] == 0


def test_search_larger_than_the_pool_finishes_with_the_same_result(model_tok):
    """A KV pool smaller than one search's live tree: the engine evicts, preempts and
    spills locks, the search slows down, and its result is unchanged (greedy)."""
    model, tok = model_tok
    problems = [Problem("What is 1 + 1?", "2", id="0")]
    cfg = SearchConfig(method="rebase", width=4, max_step_tokens=5, max_depth=3, max_tokens=100, temperature=0)
    policy_cfg = PolicyConfig(model="tiny:qwen2", step_delimiter="a")
    tiny_pool = Engine(model, tok, kv_budget_tokens=40)
    small = search(problems, EnginePolicy(tiny_pool, policy_cfg, cfg), _score, cfg)
    roomy = search(problems, EnginePolicy(Engine(model, tok, kv_budget_tokens=4096), policy_cfg, cfg), _score, cfg)
    assert small[0]["trajectories"] == roomy[0]["trajectories"]
    stats = tiny_pool.stats()
    assert stats["evicted_tokens"] + stats["spilled_handles"] + stats["preempted"] > 0
    assert stats["peak_kv_tokens"] <= 40
    tiny_pool.check()


# ---- the search config's sampling settings go with every request (ets.search_with(..., config)) ----

def _both(model, tok, built: SearchConfig):
    """Both backends, built with `built` (the settings a call may override)."""
    policy_cfg = PolicyConfig(model="tiny:qwen2", step_delimiter="a")
    return {"engine": EnginePolicy(Engine(model, tok, kv_budget_tokens=4096), policy_cfg, built),
            "hf": HFPolicy(model, tok, policy_cfg, built)}


def test_search_with_samples_with_the_config_it_is_given(model_tok):
    import ets

    model, tok = model_tok
    built = SearchConfig(temperature=1.0, max_step_tokens=8)   # what the policies were built with
    problems = ["What is 2 + 3?", "What is 4 + 4?"]
    greedy = SearchConfig(method="rebase", width=4, temperature=0, max_step_tokens=5, max_depth=3, max_tokens=100)
    got = {}
    for name, policy in _both(model, tok, built).items():
        got[name] = ets.search_with(problems, policy, _score, greedy)
        for r in got[name]:
            # T=0: every child of a node is the same, so all W trajectories are one.
            assert len(r["trajectories"]) == 4 and len({tuple(t["steps"]) for t in r["trajectories"]}) == 1
            # max_step_tokens=5 of the call, not the build-time 8: at most 3 steps of 5 tokens.
            assert all(t["tokens"] <= 15 for t in r["trajectories"])
        sampled = ets.search_with(problems, policy, _score, SearchConfig(
            method="rebase", width=4, temperature=1.0, max_step_tokens=5, max_depth=3, max_tokens=100))
        assert any(len({tuple(t["steps"]) for t in r["trajectories"]}) > 1 for r in sampled)
    assert [r["trajectories"] for r in got["engine"]] == [r["trajectories"] for r in got["hf"]]


@pytest.mark.parametrize("backend", ["engine", "hf"])
def test_a_requests_sampling_settings_are_honoured(model_tok, backend):
    from ets.policy.base import SamplingSettings

    model, tok = model_tok
    policy = _both(model, tok, SearchConfig(temperature=1.0, max_step_tokens=8))[backend]
    prompt = policy.format_prompt("What is 2 + 3?").token_ids
    short = policy.expand([ExpandRequest("q", prompt, 6, seed=7, sampling=SamplingSettings(1.0, 1.0, 0, 3))])[0]
    assert all(len(s.token_ids) <= 3 for s in short) and any(s.finish == "length" for s in short)
    assert all(s.finish != "length" or len(s.token_ids) == 3 for s in short)
    greedy = policy.expand([ExpandRequest("q", prompt, 3, seed=7, sampling=SamplingSettings(0.0, 1.0, 0, 8))])[0]
    assert len({tuple(s.token_ids) for s in greedy}) == 1
    # Without settings, the build-time ones (T=1, 8 tokens); top_k=1 is greedy too.
    top1 = policy.expand([ExpandRequest("q", prompt, 3, seed=7, sampling=SamplingSettings(1.0, 1.0, 1, 8))])[0]
    assert [s.token_ids for s in top1] == [s.token_ids for s in greedy]
    policy.release([s.handle for s in [*short, *greedy, *top1]])


def test_without_a_config_search_with_uses_the_policys_own(model_tok):
    import ets

    model, tok = model_tok
    built = SearchConfig(method="beam", width=4, temperature=0, max_step_tokens=4, max_depth=2, max_tokens=100)
    policy = _both(model, tok, built)["engine"]
    record = ets.search_with(["What is 2 + 3?"], policy, _score)[0]
    assert record["method"] == "beam" and record["width"] == 4
    assert len({tuple(t["steps"]) for t in record["trajectories"]}) == 1


def test_a_request_seed_fixes_its_samples_whatever_else_is_in_the_call(model_tok):
    model, tok = model_tok
    for policy in _both(model, tok, SearchConfig(temperature=1.0, max_step_tokens=6)).values():
        a = policy.format_prompt("What is 2 + 3?").token_ids
        b = policy.format_prompt("What is 7 + 1?").token_ids
        alone = policy.expand([ExpandRequest("a", a, 3, seed=42)])[0]
        others, crowd = policy.expand([ExpandRequest("b", b, 5, seed=1), ExpandRequest("a", a, 3, seed=42)])
        assert [s.token_ids for s in alone] == [s.token_ids for s in crowd]
        assert len({tuple(s.token_ids) for s in alone}) > 1   # sampled: j picks its own stream
        policy.release([s.handle for s in [*alone, *others, *crowd]])
