"""KV memory with one owner on a device (ets/engine/memory.py): the policy's pool and a
PRM's own, sized together from the device's free memory once both models are loaded
(`policy.memory_fraction`, `policy.reward_memory_share`); shown in the run summary and
forecast by `--check`; `kv_budget_tokens` still sizes a pool outright. Real tiny models
on the engine, on the CPU (where the same keys read the machine's free memory)."""

from __future__ import annotations

import json

import pytest
import torch

import ets
from ets.config import ConfigError
from ets.engine import Engine
from ets.engine.memory import ENGINE_MEMORY_MULTIPLE, MemoryPlan
from ets.engine.pool import PoolTooLarge
from tests.helpers import TINY, one_line_error, run_cli

GIB = 1 << 30
# The tiny config's models on the engine, the PRM on an engine of its own, two problems
ENGINE = ["policy.backend=engine", "reward.options.backend=engine", "data.limit=2", "width=2", "max_depth=2"]


def test_two_pools_get_the_same_tokens_unless_a_share_is_given():
    plan = MemoryPlan("cpu", 0.5)
    policy, reward = plan.claim("policy", 4096), plan.claim("reward", 6144, multiple=1)
    plan.resolve(free=10 * GIB)
    # 5 GiB over 3 x 4096 + 6144 bytes a token each: both the same tokens
    assert policy.tokens == reward.tokens == 5 * GIB // (3 * 4096 + 6144)
    shared = MemoryPlan("cpu", 0.5, reward_share=0.25)
    policy, reward = shared.claim("policy", 4096), shared.claim("reward", 6144, multiple=1)
    shared.resolve(free=10 * GIB)
    assert policy.tokens == int(0.75 * 5 * GIB) // (3 * 4096)
    assert reward.tokens == int(0.25 * 5 * GIB) // 6144
    report = shared.report()
    assert report["free_bytes"] == 10 * GIB and report["pools"]["reward"]["engine_bytes_at_most"] == reward.tokens * 6144


def test_a_pool_sized_by_its_own_key_is_set_aside_first():
    """A policy pool of fixed tokens: its engine's most (pool and buffers; on the CPU the
    pool too, whose pages are taken as it fills) comes off the free memory the PRM's pool
    is sized from."""
    plan = MemoryPlan("cpu", 0.5)
    plan.claim("policy", 4096, tokens=100_000)
    reward = plan.claim("reward", 6144, multiple=1)
    plan.resolve(free=10 * GIB)
    assert reward.tokens == int(0.5 * (10 * GIB - 100_000 * 4096 * ENGINE_MEMORY_MULTIPLE)) // 6144
    assert set(plan.report()["pools"]) == {"policy", "reward"}


def test_a_share_that_holds_no_token_is_refused():
    plan = MemoryPlan("cpu", 0.001)
    plan.claim("policy", 1 << 20)
    with pytest.raises(PoolTooLarge, match="memory_fraction"):
        plan.resolve(free=1 << 20)


def test_the_engine_builds_its_pool_when_first_used_at_its_size_in_the_plan():
    plan = MemoryPlan("cpu", 0.001)
    engine = Engine.from_pretrained("tiny:llama", memory=plan)
    assert "pool" not in vars(engine)  # nothing allocated until the plan is settled
    out = engine.generate([[1, 2, 3]], max_new_tokens=4, temperature=0.0)
    assert len(out[0]) == 4
    claim = plan.claims[0]
    assert engine.pool.num_slots == claim.tokens > 0
    assert engine.stats()["pool_kv_tokens"] == claim.tokens


def test_a_run_sizes_both_pools_from_free_memory_and_finds_the_same_records(tmp_path):
    """The summary shows the split; the records are those of fixed pools (memory is not a
    result)."""
    fixed, sized = tmp_path / "fixed.jsonl", tmp_path / "sized.jsonl"
    assert run_cli(*ENGINE, f"output={fixed}") == 0
    assert run_cli(*ENGINE, "policy.memory_fraction=0.01", f"output={sized}") == 0
    summary = json.loads(sized.with_suffix(".summary.json").read_text())
    [report] = summary["kv_memory"]
    pools = report["pools"]
    assert report["device"] == "cpu" and report["memory_fraction"] == 0.01
    assert pools["policy"]["pool_tokens"] == pools["reward"]["pool_tokens"] > 0
    assert summary["policy_memory"]["capacity_tokens"] == pools["policy"]["pool_tokens"]
    assert summary["reward_stats"]["pool_kv_tokens"] == pools["reward"]["pool_tokens"]
    used = pools["policy"]["engine_bytes_at_most"] + pools["reward"]["engine_bytes_at_most"]
    assert used <= 0.01 * report["free_bytes"]

    def records(path):
        return [{k: v for k, v in json.loads(line).items() if k != "wall_time"} for line in path.read_text().splitlines()]

    assert records(sized) == records(fixed)
    # the fixed run has no plan on the CPU: nothing to show
    assert "kv_memory" not in json.loads(fixed.with_suffix(".summary.json").read_text())


def test_check_forecasts_the_split_before_any_model_loads(capsys):
    from ets.app.cli import main

    assert main(["run", "--config", str(TINY), "--check", *ENGINE, "policy.memory_fraction=0.2",
                 "policy.reward_memory_share=0.5"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "KV memory" in line]
    assert len(lines) == 1 and "0.2 of about" in lines[0] and "policy" in lines[0] and "reward" in lines[0]
    assert main(["run", "--config", str(TINY), "--check", *ENGINE]) == 0
    [fixed] = [line for line in capsys.readouterr().out.splitlines() if "KV memory" in line]
    assert "fixed pools" in fixed and "65,536" in fixed


@pytest.mark.parametrize("override, words", [
    ("policy.memory_fraction=1.5", "policy.memory_fraction: 1.5 must be in (0, 1]"),
    ("policy.memory_fraction=0", "policy.memory_fraction: 0 must be in (0, 1]"),
    ("policy.reward_memory_share=1", "policy.reward_memory_share: 1 must be in (0, 1)"),
    ("policy.memory_fraction=1e-15", "policy.memory_fraction: 1e-15 of the"),
])
def test_bad_memory_keys_are_one_clear_error(override, words, capsys, tmp_path):
    code = run_cli(*ENGINE, override, f"output={tmp_path / 'r.jsonl'}")
    assert words in one_line_error(capsys, code)
    assert not (tmp_path / "r.jsonl").exists()


def test_vllm_sizes_its_own_memory():
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        ets.load_config(TINY, ["policy.backend=vllm", "policy.memory_fraction=0.5"])


def test_check_counts_the_prepacked_copy_of_the_weights(smollm2, monkeypatch):
    """On the CPU the engine prepacks its linears (ets/engine/linears.py), a copy of most of
    the weights: `--check` forecasts the free memory less the weights twice then."""
    from ets.app import memory_notes
    from ets.config import load_config

    monkeypatch.setattr(memory_notes, "free_bytes", lambda device: 8 * GIB)
    free = {}
    for prepack in ("on", "off"):
        config = load_config(TINY, [f"policy.model={smollm2}", "policy.backend=engine", "policy.memory_fraction=0.5",
                                    f"policy.prepack={prepack}"])
        [line] = memory_notes.check_memory_notes(config)
        free[prepack] = float(line.split(" of about ")[1].split(" GiB")[0])
    weights = memory_notes._weight_bytes(str(smollm2), torch.float32) / GIB
    assert free["off"] == pytest.approx(8 - weights, abs=0.01)
    assert free["on"] == pytest.approx(8 - 2 * weights, abs=0.01)
