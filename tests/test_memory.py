"""Memory has one owner: `policy.kv_budget_tokens` sizes the engine's pool, the policy
reports it (`memory()`), admission reads it from there; the step-tag PRM's own pool has
its own key and shows in the run summary."""

from pathlib import Path

import pytest

from ets.app.run import run
from ets.config import PolicyConfig, SearchConfig, load_config
from ets.engine import DEFAULT_KV_TOKENS as ENGINE_DEFAULT
from ets.loop import SearchLoop
from ets.policy.base import ExpandRequest, KVMemory, Policy
from ets.policy.engine import EnginePolicy

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"


def test_the_config_key_stays_and_defaults_to_the_backends_default():
    assert PolicyConfig().kv_budget_tokens is None
    assert load_config(TINY, ["policy.kv_budget_tokens=1024"]).policy.kv_budget_tokens == 1024
    with pytest.raises(ValueError, match="policy.kv_budget_tokens"):
        PolicyConfig(kv_budget_tokens=0)


@pytest.mark.parametrize("budget, pool", [(None, ENGINE_DEFAULT), (1024, 1024)])
def test_engine_policy_reports_its_pool(budget, pool):
    search = SearchConfig(max_step_tokens=4)
    policy = EnginePolicy.from_config(PolicyConfig(model="tiny:llama", step_delimiter="\n", kv_budget_tokens=budget), search)
    assert isinstance(policy, Policy)
    assert policy.memory() == KVMemory(capacity_tokens=pool, live_tokens=0, peak_live_tokens=0, mean_live_tokens=0.0)
    prompt = policy.format_prompt("What is 1 + 1?")
    steps = policy.expand([ExpandRequest("q", prompt.token_ids, 2)])[0]
    # Live = what the handles lock: the prompt and both steps, minus each step's last token.
    memory = policy.memory()
    assert memory.live_tokens == policy.engine.stats()["locked_kv_tokens"] > len(prompt.token_ids)
    assert memory.peak_live_tokens >= memory.live_tokens and memory.mean_live_tokens == memory.live_tokens
    policy.release([s.handle for s in steps])
    assert policy.memory().live_tokens == 0 and policy.memory().capacity_tokens == pool
    policy.engine.check()


def test_admission_reads_the_capacity_from_the_policy():
    search = SearchConfig(max_step_tokens=4)
    policy = EnginePolicy.from_config(PolicyConfig(model="tiny:llama", kv_budget_tokens=777), search)
    loop = SearchLoop([], policy, lambda q, t: [], search)
    assert loop.admission.capacity_tokens == 777


def test_the_summary_shows_both_pools_each_from_its_own_key(tmp_path):
    base = ["policy.backend=engine", "policy.kv_budget_tokens=4096", "data.limit=2", "width=2"]
    summary = run(load_config(TINY, [*base, f"output={tmp_path / 'a.jsonl'}"]), show_progress=False)
    assert summary["policy_memory"]["capacity_tokens"] == 4096
    assert summary["policy_stats"]["pool_kv_tokens"] == 4096
    prm = summary["reward_stats"]
    # The PRM's pool is its own: the engine's default, not the policy's 4096.
    assert prm["owns_engine"] is True and prm["pool_kv_tokens"] == ENGINE_DEFAULT
    assert 0 < prm["peak_kv_tokens"] <= prm["pool_kv_tokens"]
    assert summary["rounds"] > 0 and summary["peak_active"] >= 1

    summary = run(load_config(TINY, [*base, "reward.options.kv_budget_tokens=2048", f"output={tmp_path / 'b.jsonl'}"]),
                  show_progress=False)
    assert summary["reward_stats"]["pool_kv_tokens"] == 2048 and summary["policy_memory"]["capacity_tokens"] == 4096


def test_the_hf_baseline_reports_no_capacity(tmp_path):
    summary = run(load_config(TINY, ["data.limit=1", "width=2", f"output={tmp_path / 'r.jsonl'}"]), show_progress=False)
    assert summary["policy_memory"] == {"capacity_tokens": None, "live_tokens": 0, "peak_live_tokens": None,
                                        "mean_live_tokens": None}
    assert "pool_kv_tokens" not in summary["reward_stats"]  # the forward backend keeps no cache


@pytest.mark.parametrize("overrides, key", [
    (["policy.backend=engine"], "policy.kv_budget_tokens"),
    (["reward.options.backend=engine"], "reward.options.kv_budget_tokens"),
])
def test_a_pool_the_machine_cannot_hold_is_refused_before_the_run(tmp_path, capsys, monkeypatch, overrides, key):
    """The pool takes its memory as it fills (ets/engine/pool.py lazy_zeros), so one larger
    than the machine's available memory would only fail when full; it is refused at the
    start instead, naming its key, and nothing is written."""
    from tests.helpers import one_line_error, run_cli

    monkeypatch.setattr("ets.engine.pool.available_bytes", lambda: 1 << 20)  # 1 MiB free
    out = tmp_path / "r.jsonl"
    line = one_line_error(capsys, run_cli(*overrides, f"output={out}"))
    assert f"ets: error: {key}: a KV pool of 65,536 tokens takes" in line and "0.0 GiB available" in line
    assert "lower kv_budget_tokens" in line and not out.exists()


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux's per-process page counts")
def test_a_pool_takes_small_pages_as_it_is_written():
    """A pool is written sparsely (a token's K and V, a row per layer and kv head), so it
    takes the kernel's 4 KB pages, not transparent huge ones (ets/engine/pool.py
    anonymous_zeros; numpy's zeros, its memory before, advised huge pages, each zeroed when
    first written): writing one slot of every kv head of a layer's K adds no huge page."""
    import torch

    from ets.engine.pool import lazy_zeros

    def huge_kb() -> int:
        with open("/proc/self/smaps_rollup") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("AnonHugePages:"))

    before = huge_kb()
    k = lazy_zeros((4, 1 << 20, 32), torch.float32, "cpu")  # 512 MiB, 128 MiB a kv head
    k[:, 1000] = 1.0
    assert huge_kb() - before < 2048
    assert float(k[:, 990:1010].sum()) == 4 * 32 and not k[:, 1001:1 << 16].any()
