"""Problems sharded over Ray actors (ets/app/distributed.py), on a local Ray with the tiny
models of configs/tiny.yaml.

- 2 workers write the same records as one process with the same seeds (answers,
  trajectories, step texts and tokens; step scores to 1e-6; `wall_time` and the
  strategies' `*_seconds` apart);
- a worker killed with SIGKILL mid-way (its pid from the actor's own `where()`) is
  replaced, its chunk is handed out again, and every problem is written exactly once,
  with the same records as one process;
- a rerun of a finished output searches nothing and starts no worker.

One local Ray serves the whole module (starting one costs seconds).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'ets[ray]'): the distributed run is untested")

from ets.app.distributed import run_distributed  # noqa: E402
from ets.app.run import run  # noqa: E402
from ets.config import load_config  # noqa: E402
from test_determinism import assert_same_records, write_problems  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"


@pytest.fixture(scope="module")
def cluster():
    # Two 1-CPU workers; the module's runs join this Ray instead of starting their own.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_problems(tmp_path_factory.mktemp("data") / "problems.jsonl", 8)


def config(data: Path, out: Path, *extra: str):
    return load_config(TINY, [f"data.path={data}", "policy.backend=engine", "method=rebase", f"output={out}", *extra])


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, data) -> Path:
    out = tmp_path_factory.mktemp("one") / "results.jsonl"
    run(config(data, out), show_progress=False)
    return out


def ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def test_two_workers_write_the_records_of_one_process(cluster, tmp_path, data, one_process):
    out = tmp_path / "two" / "results.jsonl"
    summary = run(config(data, out), show_progress=False, workers=2)
    assert sorted(ids(out)) == sorted(ids(one_process)) and len(set(ids(out))) == 8
    assert_same_records(one_process, out)
    w = summary["workers"]
    assert w["count"] == 2 and w["restarts"] == 0 and w["retries"] == 0 and w["failed"] == {}
    # both workers searched, and the summary merges their figures
    assert len(w["per_worker"]) == 2 and sum(p["problems"] for p in w["per_worker"]) == 8
    assert all(p["problems"] > 0 for p in w["per_worker"])
    per = [p["policy_memory"]["peak_live_tokens"] for p in w["per_worker"]]
    assert w["memory_total"]["peak_live_tokens"] == sum(per) == summary["policy_memory"]["peak_live_tokens"]
    assert summary["problems"] == summary["new_problems"] == 8 and summary["wall_time"] > 0
    # provenance as in one process: a rerun searches nothing (0 new) and keeps the summary
    assert (out.parent / "results.config.json").is_file()
    assert run(config(data, out), show_progress=False, workers=2) == {**summary, "new_problems": 0}


def test_a_worker_killed_mid_way_loses_nothing_and_writes_nothing_twice(cluster, tmp_path, data, one_process):
    out = tmp_path / "killed" / "results.jsonl"
    killed = []

    def kill_once(driver):
        # After the first chunk is written: kill a worker that holds a chunk now.
        if killed or not driver.written:
            return
        for kind, slot, chunk in driver.inflight.values():
            if kind == "search" and slot.pid is not None:
                os.kill(slot.pid, signal.SIGKILL)
                killed.append((slot.pid, [p.id for p in chunk]))
                return

    summary = run_distributed(config(data, out), workers=2, show_progress=False, chunk=2, hook=kill_once)
    assert killed, "no worker was killed"
    written = ids(out)
    assert len(written) == len(set(written)) == 8          # every problem exactly once
    assert_same_records(one_process, out)
    w = summary["workers"]
    assert w["restarts"] == 1 and w["retries"] >= 1 and w["failed"] == {}
    assert summary["problems"] == summary["new_problems"] == 8


def test_a_worker_that_keeps_dying_is_reported_not_retried_for_ever(cluster, tmp_path, data):
    """Every worker that takes the last problem is killed: it is reported after 2 failures
    (on 2 workers), not retried again, and every other problem is written once."""
    out = tmp_path / "poison" / "results.jsonl"
    cfg = config(data, out)
    from ets.data import load_problems

    poison = load_problems(cfg.data)[-1].id

    killed = set()

    def kill_holder(driver):
        # The hook runs again before the driver has seen the death: each worker is killed once.
        for kind, slot, chunk in list(driver.inflight.values()):
            if kind == "search" and slot.pid not in (None, *killed) and any(p.id == poison for p in chunk):
                killed.add(slot.pid)
                with contextlib.suppress(ProcessLookupError):  # it died on its own between the look and the kill
                    os.kill(slot.pid, signal.SIGKILL)

    summary = run_distributed(cfg, workers=2, show_progress=False, chunk=1, hook=kill_holder)
    assert sorted(ids(out)) == sorted(p.id for p in load_problems(cfg.data) if p.id != poison)
    w = summary["workers"]
    assert list(w["failed"]) == [poison] and "failed 2 times" in w["failed"][poison]
    assert w["restarts"] == 2


def test_workers_start_with_the_users_openmp_waiting_and_their_share_of_the_cores(monkeypatch):
    from ets.app.distributed import worker_env

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert worker_env(2, 0) == {"OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "2"}
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")  # a spin before sleeping, chosen by the user
    env = worker_env(1, 1.0)
    assert env["GOMP_SPINCOUNT"] == "10000" and "OMP_NUM_THREADS" not in env  # a GPU worker: threads its own


def test_the_driver_prefetches_what_workers_on_its_machine_load(cluster, tmp_path, data, monkeypatch):
    """ETS's static embedder is distilled by the driver before the workers start (as in a
    sweep's --jobs), not by every worker at once; recorded here, not distilled (the
    workers load the plain MiniLM)."""
    from ets.strategies.ets import ETS

    calls = []
    monkeypatch.setattr(ETS, "prefetch", lambda self: calls.append(self.config.embedder))
    out = tmp_path / "ets" / "results.jsonl"
    run(config(data, out, "method=ets", "data.limit=2"), show_progress=False, workers=2)
    assert calls == ["all-MiniLM-L6-v2"] and len(ids(out)) == 2


def test_sigterm_stops_a_run_on_workers_as_it_stops_one_without(tmp_path):
    """Ray puts a SIGTERM handler of its own in place (exit 1, no cleanup); the run still
    unwinds as on Ctrl-C: the one-line message and 143, Ray shut down."""
    from test_provenance import SLOW_REWARD

    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    out, scoring = tmp_path / "r.jsonl", tmp_path / "scoring"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    run = subprocess.Popen([sys.executable, "-m", "ets", "run", "--quiet", "--config", str(TINY), f"output={out}",
                            "data.limit=2", "reward.name=slow_reward:slow", "--workers", "2"], cwd=tmp_path,
                           env=env, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1800):  # a worker's first reward call: Ray and the workers are up
            if scoring.exists() or run.poll() is not None:
                break
            time.sleep(0.1)
        assert scoring.exists(), run.stderr.read() if run.poll() is not None else "no reward call"
        run.send_signal(signal.SIGTERM)
        assert run.wait(90) == 143
    finally:
        run.kill()
    err = run.stderr.read()
    assert "ets: interrupted; finished problems are saved" in err and "SIGTERM received" not in err
