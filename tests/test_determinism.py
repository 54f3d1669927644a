"""One answer per seed: a problem's record depends only on the config, the seed and the
problem, not on concurrency, the pool size, admission order or an interruption.

Real tiny models (configs/tiny.yaml: tiny:llama policy, step-tag PRM on tiny:llama),
sampled at temperature 1. Records are compared whole, minus what measures time
(`wall_time`, the strategies' `*_seconds`); on the engine, step scores bit for bit (its
forwards are shaped so that a sequence's numbers do not depend on its batch-mates:
tests/test_engine_batch_invariance.py), on the transformers backend to 1e-6.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ets.app.run import run
from ets.config import load_config
from ets.lp import StepClusterer

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"


def write_problems(path: Path, n: int) -> Path:
    with path.open("w") as f:
        for i in range(n):
            a, b = i + 2, 3 * i + 1
            f.write(json.dumps({"question": f"Ann has {a} pens and buys {b} more. How many pens now?",
                                "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}) + "\n")
    return path


def comparable(path: Path) -> dict[str, dict]:
    """The records of an output by id, minus wall-clock fields; step scores apart."""
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        r.pop("wall_time")
        r["strategy_metrics"] = {k: v for k, v in r["strategy_metrics"].items() if not k.endswith("_seconds")}
        out[r["id"]] = r
    return out


def assert_same_records(a: Path, b: Path, exact: bool = True) -> None:
    """The same records; `exact`: step scores too, bit for bit (else to 1e-6)."""
    ra, rb = comparable(a), comparable(b)
    assert sorted(ra) == sorted(rb) and ra
    for pid in ra:
        x, y = ra[pid], rb[pid]
        scores_x = [t.pop("step_scores") for t in x["trajectories"]]
        scores_y = [t.pop("step_scores") for t in y["trajectories"]]
        assert x == y, f"problem {pid}: records differ"
        assert [len(s) for s in scores_x] == [len(s) for s in scores_y]
        for sx, sy in zip(scores_x, scores_y):
            assert sx == (sy if exact else pytest.approx(sy, abs=1e-6))


def overrides(data: Path, backend: str, *extra: str) -> list[str]:
    return [f"data.path={data}", f"policy.backend={backend}", *extra]


def run_to(tmp_path: Path, name: str, over: list[str]) -> Path:
    out = tmp_path / name / "results.jsonl"
    run(load_config(TINY, [*over, f"output={out}"]), show_progress=False)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_problems(tmp_path_factory.mktemp("data") / "problems.jsonl", 6)


@pytest.mark.parametrize("method", ["rebase", "beam"])
def test_engine_records_do_not_depend_on_concurrency_or_the_pool(tmp_path, data, method):
    base = overrides(data, "engine", f"method={method}")
    alone = run_to(tmp_path, "c1", [*base, "concurrency=1"])
    together = run_to(tmp_path, "c4", [*base, "concurrency=4"])
    # A pool that holds one sequence and little more: the engine evicts and spills locks,
    # so paths are recomputed, and admission runs fewer problems at once.
    small = run_to(tmp_path, "pool", [*base, "concurrency=4", "policy.kv_budget_tokens=160"])
    summary = json.loads((small.parent / "results.summary.json").read_text())
    stats = summary["policy_stats"]
    assert stats["evicted_tokens"] + stats["spilled_handles"] + stats["preempted"] > 0
    assert_same_records(alone, together)
    assert_same_records(alone, small)
    # Sampled, not greedy: the W trajectories of a problem are not all alike.
    assert any(len({tuple(t["steps"]) for t in r["trajectories"]}) > 1 for r in comparable(alone).values())


def test_hf_records_do_not_depend_on_concurrency_and_match_the_engine(tmp_path, data):
    base = overrides(data, "hf")
    alone = run_to(tmp_path, "c1", [*base, "concurrency=1"])
    together = run_to(tmp_path, "c4", [*base, "concurrency=4"])
    # The PRM's scores on its plain forward are exact (tests/test_hf_determinism.py);
    # generate's padded batches round by their shape, which could move a draw (rarely)
    assert_same_records(alone, together, exact=False)
    # Both backends draw sample j of a node from (its seed, j) with the same sampling rule:
    # on these models their logits agree closely enough to give the same records.
    on_engine = run_to(tmp_path, "engine", overrides(data, "engine", "concurrency=2"))
    assert_same_records(alone, on_engine, exact=False)


def test_ets_strategy_records_do_not_depend_on_concurrency(tmp_path, data, monkeypatch):
    """ETS with a sentence model (MiniLM, tiny.yaml's default): a transformer's vector for a
    text moves in its last bits with its batch-mates, so the model must see the same
    batches, one problem's steps each, however many problems are in flight."""
    batches = []
    embed = StepClusterer.embed
    monkeypatch.setattr(StepClusterer, "embed", lambda self, texts: batches.append(tuple(texts)) or embed(self, texts))
    base = overrides(data, "engine", "method=ets")
    alone = run_to(tmp_path, "c1", [*base, "concurrency=1"])
    seen_alone, batches[:] = sorted(batches), []
    together = run_to(tmp_path, "c4", [*base, "concurrency=4"])
    assert seen_alone and sorted(batches) == seen_alone
    assert_same_records(alone, together)


def ets_run(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ets", "run", "--config", str(TINY), "--quiet", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_run_killed_and_resumed_gives_the_records_of_an_uninterrupted_one(tmp_path):
    data = write_problems(tmp_path / "problems.jsonl", 12)
    args = overrides(data, "engine", "concurrency=2", "width=6")
    out = tmp_path / "killed" / "results.jsonl"

    proc = ets_run([*args, f"output={out}"])
    deadline = time.monotonic() + 120
    while not (out.exists() and out.read_text().count("\n") >= 1):
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()}"
        assert time.monotonic() < deadline, "no result line within 120 s"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    written = out.read_text().count("\n")
    assert 1 <= written < 12, f"killed after {written} of 12 problems: not mid-way"

    resumed = ets_run([*args, f"output={out}"])
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    assert f"{12 - written} new" in stdout  # only the problems not yet written were searched

    uninterrupted = run_to(tmp_path, "whole", args)
    assert_same_records(out, uninterrupted)
