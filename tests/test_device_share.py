"""Runs that share one device size their KV pools from their share of it (ets/app/device_share.py):
`ets sweep --jobs N` and Ray workers given a fraction of a GPU."""

import json
import os
from pathlib import Path

from ets.app.cli import main
from ets.app.device_share import share_device
from ets.app.distributed import Driver
from ets.app.sweep import job_configs
from ets.config import load_config
from ets.engine.memory import DEFAULT_CUDA_FRACTION

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"


def _config(*overrides: str):
    return load_config(TINY, ["policy.backend=engine", *overrides])


def test_a_gpu_run_takes_its_share_of_the_fraction_it_would_take_alone():
    assert share_device(_config("policy.device=cuda"), 0.5).policy.memory_fraction == DEFAULT_CUDA_FRACTION / 2
    assert share_device(_config("policy.device=cuda", "policy.memory_fraction=0.6"), 0.25).policy.memory_fraction == 0.15
    # the same keys read the machine's free memory on the CPU
    assert share_device(_config("policy.memory_fraction=0.5"), 0.5).policy.memory_fraction == 0.25


def test_runs_whose_memory_is_not_sized_from_the_device_are_left_as_they_are():
    for config in (_config("policy.device=cuda", "policy.kv_budget_tokens=4096"),  # the user's own split
                   _config(),                                                        # the CPU's fixed pools
                   load_config(TINY, ["policy.device=cuda"])):                       # hf: no pool
        assert share_device(config, 0.5) == config
    assert share_device(_config("policy.device=cuda"), 1.0) == _config("policy.device=cuda")


def test_jobs_and_fractional_gpu_workers_share_the_device():
    configs = [_config("policy.device=cuda", f"width={w}") for w in (2, 4)]
    shared = job_configs(configs, 2)
    assert [c.policy.memory_fraction for c in shared] == [DEFAULT_CUDA_FRACTION / 2] * 2
    assert [c.search.width for c in shared] == [2, 4]
    assert all(c.torch_threads == max(1, (os.cpu_count() or 1) // 2) for c in shared)
    assert job_configs(configs, 1)[0].policy.memory_fraction is None

    def driver(gpus: float | None) -> Driver:
        return Driver(None, configs[0], [], lambda record: None, set(), workers=2, chunk=None, cpus_per_worker=None,
                      gpus_per_worker=gpus, max_restarts=None, max_failures=2)

    assert driver(0.5).config.policy.memory_fraction == DEFAULT_CUDA_FRACTION / 2  # two workers a GPU
    assert driver(None).config is configs[0]                                      # a GPU each


def test_two_jobs_each_size_their_pools_from_half_the_fraction(tmp_path):
    """`ets sweep --jobs 2` on the engine with pools sized from free memory: each job's
    summary reports half the fraction the config gives (its policy's pool and its PRM's,
    sized together on the device)."""
    out = tmp_path / "sw"
    assert main(["sweep", "--quiet", "--config", str(TINY), "--methods", "beam,rebase", "--widths", "2",
                 "--out", str(out), "--jobs", "2", "data.limit=1", "max_depth=2", "policy.backend=engine",
                 "policy.memory_fraction=0.1"]) == 0
    summaries = [json.loads(f.read_text()) for f in sorted(out.glob("*.summary.json"))]
    assert len(summaries) == 2
    assert [[plan["memory_fraction"] for plan in s["kv_memory"]] for s in summaries] == [[0.05], [0.05]]
