"""`ets run --workers N [--ray-address ADDR]`: a dataset's problems sharded over Ray actors.

    summary = run_distributed(config, workers=2)                  # a local Ray, started and stopped here
    summary = run_distributed(config, workers=8, address="auto")  # an existing cluster (`ray start`)

Each worker is one Ray actor (`Worker`) holding its own policy (`ets.policy.build_policy`:
engine, vLLM or transformers), reward model (`rewards.build_reward`) and strategy
(`search.build`); with GPUs it holds one GPU (`gpus_per_worker`, default 1 when
`policy.device` is cuda; Ray sets CUDA_VISIBLE_DEVICES, so the actor's `cuda` is its own
GPU), on a CPU machine `cpus_per_worker` torch threads (default: the machine's cores
shared out).

The driver (this process) alone opens and writes the one resumable JSONL, through the
same writer, provenance and lock as a single-process run (ets/app/output.py): it hands each
worker a chunk of problems at a time (a few per worker, so work balances; one chunk in
flight per worker), gathers the finished records and writes each once. A record whose id
is already written is dropped, so nothing is written twice, whatever Ray reports.

A problem's record depends only on the config, its seed and the problem (each node's
request seed is derived from them, ets/loop/controller.py), so N workers write the same
records as one process; only `wall_time` differs.

Faults:
- a worker whose process dies (kill -9, out of memory) or whose node leaves: its chunk's
  problems go back to the front of the queue, one problem per chunk (to isolate a
  culprit), for the other workers; a fresh actor replaces it (at most `max_restarts`
  replacements in a run, default 2 per worker), loading its models again;
- an exception inside a worker that is the project's own error (bad config, data, model
  path: what `ets` reports as `ets: error: ...`) ends the run at once, as it would in one
  process; any other exception is retried like a death;
- a problem that fails `max_failures` times (default 2; on distinct workers while there
  are others) is not retried again: it is listed in the summary (`workers.failed`, one
  line per problem naming the workers and the error) and left out of the output, so a
  later rerun of the same command searches it again;
- the summary counts `restarts` (replaced workers) and `retries` (problems handed out again).

The summary is a single-process summary (accuracy, throughput over the wall time of the
search, KV figures) plus `workers`: per worker its host, pid, problems, KV memory and
process memory, and their total. With several workers `policy_memory` and `policy_stats`
are the workers' sums (each worker's own pool and peak are under `workers.per_worker`; the
sum of peaks bounds the simultaneous total from above).

Ray is imported only here and only when a run asks for workers: `pip install 'ets[ray]'`.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from ets.app.device_share import share_device
from ets.app.terminal import plural
from ets.app.worker import Worker
from ets.config import ConfigError, RunConfig
from ets.data import Problem
from ets.loop.controller import PHASES

log = logging.getLogger(__name__)

CHUNKS_PER_WORKER = 4   # the queue holds ~this many chunks per worker: enough to balance, few enough to batch
MAX_FAILURES = 2


# --------------------------------------------------------------------------- Ray itself
def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("--workers / --ray-address need Ray: pip install 'ets[ray]' (or pip install ray)") from None
    return ray


@contextmanager
def ray_session(address: str | None, *, num_cpus: int | None = None, quiet: bool = False) -> Iterator[Any]:
    """Ray for the duration of the block: joins `address` (e.g. "auto" or "HOST:6379") or
    starts a local instance, and stops what it started. Reentrant: inside another session
    (a sweep's pairs) it reuses the running one."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=not quiet,
                                  logging_level=logging.ERROR if quiet else logging.WARNING)
    if address is None:
        kwargs["num_cpus"] = num_cpus
    # ray.init puts a SIGTERM handler of its own in place (it exits with 1, no finally run):
    # SIGTERM stops the command as it would without Ray (ets/app/stopping.py), and the
    # block's end shuts Ray down
    on_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, **kwargs)
    except ConnectionError as exc:
        raise ConfigError(f"--ray-address {address!r}: {exc}; start a cluster with `ray start --head` "
                          "or leave --ray-address out to run a local Ray") from None
    finally:
        if threading.current_thread() is threading.main_thread() and on_sigterm is not None:
            signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield ray
    finally:
        ray.shutdown()


def worker_env(cpus: int, gpus: float) -> dict[str, str]:
    """The environment a worker's process starts with: OpenMP's waiting as in this process
    (passive unless the user chose otherwise: ets/app/cli.py; their GOMP_SPINCOUNT too) and,
    on CPUs, its share of the cores as OpenMP threads."""
    env = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"), "TOKENIZERS_PARALLELISM": "false"}
    if "GOMP_SPINCOUNT" in os.environ:
        env["GOMP_SPINCOUNT"] = os.environ["GOMP_SPINCOUNT"]
    if not gpus:
        env["OMP_NUM_THREADS"] = str(cpus)
    return env


@dataclass
class _Slot:
    index: int
    generation: int = 0
    handle: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    ready: bool = False
    retired: bool = False

    @property
    def label(self) -> str:
        return f"w{self.index}" if self.generation == 0 else f"w{self.index}.{self.generation}"

    @property
    def pid(self) -> int | None:
        return self.info.get("pid")


class Driver:
    """Hands chunks to the workers, writes each record once, replaces dead workers."""

    def __init__(self, ray, config: RunConfig, todo: Sequence[Problem], write: Callable[[dict[str, Any]], None],
                 done_ids: set, *, workers: int, chunk: int | None, cpus_per_worker: int | None,
                 gpus_per_worker: float | None, max_restarts: int | None, max_failures: int, bar=None,
                 hook: Callable[["Driver"], None] | None = None):
        self.ray, self.write, self.done_ids, self.bar, self.hook = ray, write, done_ids, bar, hook
        self.workers = workers
        n = len(todo)
        self.chunk = chunk or max(1, min(config.concurrency, math.ceil(n / (workers * CHUNKS_PER_WORKER))))
        self.queue: deque[list[Problem]] = deque(list(todo[i:i + self.chunk]) for i in range(0, n, self.chunk))
        self.cpus, self.gpus = worker_resources(config, workers, cpus_per_worker, gpus_per_worker)
        # what each worker runs: with a fraction of a GPU, its share of the GPU's memory
        self.config = share_device(config, self.gpus) if self.gpus else config
        self.max_restarts = 2 * workers if max_restarts is None else max_restarts
        self.max_failures = max_failures
        self.slots = [_Slot(i) for i in range(workers)]
        self.inflight: dict[Any, tuple[str, _Slot, list[Problem] | None]] = {}
        self.failures: dict[str, list[tuple[str, str]]] = {}
        self.failed: dict[str, str] = {}
        self.snapshots: dict[str, dict[str, Any]] = {}   # each worker's latest statistics, dead ones' too
        self.where: dict[str, dict[str, Any]] = {}
        self.restarts = self.retries = self.duplicates = self.written = 0
        self.load_seconds = 0.0
        self._actor_class = None

    # ------------------------------------------------------------------ workers
    def _start(self, slot: _Slot) -> None:
        ray = self.ray
        if self._actor_class is None:
            self._actor_class = ray.remote(Worker)
        env = worker_env(self.cpus, self.gpus)
        slot.handle = self._actor_class.options(
            num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=0, max_task_retries=0,
            runtime_env={"env_vars": env},
        ).remote(slot.label, self.cpus if not self.gpus else None, logging.getLogger().getEffectiveLevel())
        slot.ready = False
        self.inflight[slot.handle.setup.remote(self.config)] = ("setup", slot, None)

    def _replace(self, slot: _Slot, why: str) -> None:
        try:
            self.ray.kill(slot.handle)
        except Exception:  # already gone
            pass
        if self.restarts >= self.max_restarts:
            slot.retired = True
            log.warning("worker %s is lost (%s) and not replaced: %d replacements already (max_restarts)",
                        slot.label, why, self.restarts)
            return
        self.restarts += 1
        slot.generation += 1
        log.warning("worker %s is lost (%s); starting %s in its place", f"w{slot.index}", why, slot.label)
        self._start(slot)

    def _dispatch(self, slot: _Slot) -> None:
        if not slot.ready or slot.retired or not self.queue:
            return
        # A retried problem goes to another worker than the one it failed on, where it can.
        pick = next((c for c in self.queue if not any(w == slot.label for p in c for w, _ in self.failures.get(p.id, ()))),
                    self.queue[0])
        self.queue.remove(pick)
        self.inflight[slot.handle.search.remote(pick)] = ("search", slot, pick)

    # ------------------------------------------------------------------ the loop
    def start(self) -> None:
        """Start every worker and wait for their models (before the clock, as one process does)."""
        t = time.perf_counter()
        for slot in self.slots:
            self._start(slot)
        while any(kind == "setup" for kind, _, _ in self.inflight.values()):
            self._next(dispatch=False)
        self.load_seconds = time.perf_counter() - t
        self._check_alive()

    def run(self) -> None:
        for slot in self.slots:
            self._dispatch(slot)
        while self.inflight:
            self._next(dispatch=True)
            self._check_alive()

    def _check_alive(self) -> None:
        if (self.queue or self.inflight) and all(s.retired for s in self.slots):
            raise ConfigError(f"every worker was lost and {self.restarts} replacements were made (max_restarts); "
                              f"{plural(self.written, 'problem')} written, {sum(map(len, self.queue))} left: rerun the "
                              "same command to resume (Ray's logs, e.g. /tmp/ray/session_latest/logs, say why)")

    def _next(self, dispatch: bool) -> None:
        ready, _ = self.ray.wait(list(self.inflight), num_returns=1)
        ref = ready[0]
        kind, slot, chunk = self.inflight.pop(ref)
        self._handle(ref, kind, slot, chunk, dispatch)
        if self.hook is not None:
            self.hook(self)

    def _handle(self, ref, kind: str, slot: _Slot, chunk: list[Problem] | None, dispatch: bool) -> None:
        ray = self.ray
        from ray.exceptions import RayActorError, RayError, RayTaskError

        try:
            value = ray.get(ref)
        except RayTaskError as exc:  # an exception raised inside the worker (which lives on)
            cause = exc.cause if exc.cause is not None else exc
            if isinstance(cause, _user_errors()):
                raise cause from None  # deterministic: the run ends as it would in one process
            reason = _one_line(cause)
            if kind == "setup":
                self._replace(slot, f"setup failed: {reason}")
            else:
                self._failed_chunk(slot, chunk, reason)
                if dispatch:
                    self._dispatch(slot)
            return
        except (RayActorError, RayError) as exc:  # the worker's process or node is gone
            reason = f"worker died ({type(exc).__name__})"
            if kind == "search":
                self._failed_chunk(slot, chunk, reason)
            self._replace(slot, reason)
            return
        if kind == "setup":
            slot.ready = True
            slot.info = value
            self.where[slot.label] = value
            if dispatch:
                self._dispatch(slot)
            return
        records, snapshot = value
        self.snapshots[slot.label] = snapshot
        for record in records:
            if record["id"] in self.done_ids:
                self.duplicates += 1  # never written twice
                continue
            self.write(record)
            self.written += 1
            if self.bar is not None:
                self.bar.update(1)
        if dispatch:
            self._dispatch(slot)
        if self.bar is not None:
            self.bar.set_postfix(workers=sum(not s.retired for s in self.slots), restarts=self.restarts,
                                 retries=self.retries, refresh=False)

    def _failed_chunk(self, slot: _Slot, chunk: list[Problem], reason: str) -> None:
        for problem in reversed(chunk):  # each alone at the front: a culprit fails alone next time
            if problem.id in self.done_ids:
                continue
            seen = self.failures.setdefault(problem.id, [])
            seen.append((slot.label, reason))
            if len(seen) >= self.max_failures:
                workers = ", ".join(w for w, _ in seen)
                self.failed[problem.id] = f"failed {len(seen)} times (on {workers}): {reason}"
                log.error("problem %r is not retried again: %s", problem.id, self.failed[problem.id])
                continue
            self.retries += 1
            self.queue.appendleft([problem])

    def stop(self) -> None:
        for slot in self.slots:
            if slot.handle is not None:
                try:
                    self.ray.kill(slot.handle)
                except Exception:
                    pass

    # ------------------------------------------------------------------ the summary
    def summary(self) -> dict[str, Any]:
        snaps = self.snapshots
        per_worker = []
        for label, snap in snaps.items():
            info = self.where.get(label, {})
            per_worker.append({
                "worker": label, "host": info.get("host"), "pid": info.get("pid"), "gpus": info.get("gpus"),
                "problems": snap["problems"], "policy_memory": snap["policy_memory"],
                "peak_rss_mib": snap["peak_rss_mib"], **({"cuda_peak_mib": snap["cuda_peak_mib"]}
                                                         if "cuda_peak_mib" in snap else {}),
            })
        total = {
            "capacity_tokens": _sum(w["policy_memory"]["capacity_tokens"] for w in per_worker),
            "peak_live_tokens": _sum(w["policy_memory"]["peak_live_tokens"] for w in per_worker),
            "peak_rss_mib": round(sum(w["peak_rss_mib"] for w in per_worker), 1),
        }
        if any("cuda_peak_mib" in w for w in per_worker):
            total["cuda_peak_mib"] = round(sum(w.get("cuda_peak_mib", 0) for w in per_worker), 1)
        rs = [s["run_stats"] for s in snaps.values()]
        rounds = sum(r["rounds"] for r in rs)
        problems = sum(s["problems"] for s in snaps.values())
        out: dict[str, Any] = {
            "rounds": rounds,
            "mean_active": sum(r["active_sum"] for r in rs) / rounds if rounds else 0.0,
            "peak_active": max((r["peak_active"] for r in rs), default=0),
            "mean_search_peak_kv": sum(r["search_peak_kv_sum"] for r in rs) / problems if problems else 0.0,
            # summed over workers: seconds of work, not of the run's wall clock
            **{key: sum(r.get(key, 0.0) for r in rs) for key in PHASES},
            "workers": {
                "count": self.workers, "chunk": self.chunk, "cpus_per_worker": self.cpus,
                "gpus_per_worker": self.gpus, "restarts": self.restarts, "retries": self.retries,
                "duplicates_dropped": self.duplicates, "failed": dict(self.failed),
                "load_seconds": round(self.load_seconds, 3), "per_worker": per_worker, "memory_total": total,
            },
        }
        if snaps:
            out["policy_stats"] = _merge([s["policy_stats"] for s in snaps.values()])
            out["policy_memory"] = _merge([s["policy_memory"] for s in snaps.values()])
            rewards = [s["reward_stats"] for s in snaps.values() if "reward_stats" in s]
            if rewards:
                out["reward_stats"] = _merge(rewards)
        return out


def worker_resources(config: RunConfig, workers: int, cpus: int | None, gpus: float | None) -> tuple[int, float]:
    """(CPUs, GPUs) per worker: one GPU each when the policy runs on cuda, else the
    machine's cores shared out (torch threads in each worker)."""
    if gpus is None:
        gpus = 1.0 if str(config.policy.device).startswith("cuda") else 0.0
    if cpus is None:
        cpus = 1 if gpus else max(1, (os.cpu_count() or 1) // workers)
    return cpus, gpus


def _sum(values) -> float | None:
    values = list(values)
    return None if not values or any(v is None for v in values) else sum(values)


def _merge(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    """Numbers summed over workers (None when any worker has none); nested dicts merged
    likewise; anything else kept when every worker agrees, else listed per worker."""
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for d in dicts for k in d):
        values = [d.get(key) for d in dicts]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = sum(values)
        elif all(isinstance(v, dict) for v in values):
            out[key] = _merge(values)
        elif all(v == values[0] for v in values):
            out[key] = values[0]
        elif all(v is None or isinstance(v, (int, float)) for v in values):
            out[key] = None
        else:
            out[key] = values
    return out


def _user_errors() -> tuple[type[BaseException], ...]:
    from ets.app.cli import user_errors

    return user_errors()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --------------------------------------------------------------------------- `ets run --workers`
def run_distributed(config: RunConfig, *, workers: int, address: str | None = None, show_progress: bool = True,
                    overwrite: bool = False, chunk: int | None = None, cpus_per_worker: int | None = None,
                    gpus_per_worker: float | None = None, max_restarts: int | None = None,
                    max_failures: int = MAX_FAILURES, hook: Callable[[Driver], None] | None = None) -> dict[str, Any]:
    """`ets.app.run.run` over `workers` Ray actors: same output, provenance, lock and
    summary, plus `workers` in the summary. `hook(driver)` is called after each event (a
    worker ready or lost, a chunk written; tests kill a worker there)."""
    from ets.app.output import open_output
    from ets.app.run import _progress, finish_summary, inert_keys_notes, summarize, with_embedding_cost
    from ets.data import load_problems
    from ets.strategies import build as build_strategy

    if workers < 1:
        raise ConfigError(f"--workers {workers}: give at least 1")
    strategy = build_strategy(config.search)  # an unknown method fails before anything is read or started
    for note in inert_keys_notes(config):
        log.warning(note)
    problems = load_problems(config.data)
    new_records: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    elapsed = 0.0
    with open_output(config, problems, overwrite=overwrite) as writer:
        todo = [p for p in problems if p.id not in writer.done_ids]
        if todo:
            if address is None:  # a Ray of this machine: its workers find made here what they load
                strategy.prefetch()
            workers_used = min(workers, len(todo))
            cpus, _ = worker_resources(config, workers_used, cpus_per_worker, gpus_per_worker)
            with ray_session(address, num_cpus=max(os.cpu_count() or 1, workers_used * cpus),
                             quiet=not show_progress) as ray:
                def write(record: dict[str, Any]) -> None:
                    writer.write(record)
                    new_records.append(record)

                driver = Driver(ray, config, todo, write, writer.done_ids, workers=workers_used, chunk=chunk,
                                cpus_per_worker=cpus, gpus_per_worker=gpus_per_worker, max_restarts=max_restarts,
                                max_failures=max_failures, hook=hook)
                _check_resources(ray, driver, address)
                try:
                    driver.start()  # models load before the clock starts, as in one process
                    driver.bar = _progress(len(problems), len(problems) - len(todo),
                                           f"{config.search.method} x{workers_used}", show_progress)
                    start = time.perf_counter()
                    driver.run()
                    elapsed = time.perf_counter() - start
                finally:
                    if driver.bar is not None:
                        driver.bar.close()
                    driver.stop()
                extra = driver.summary()
    worked = bool(new_records or extra.get("workers", {}).get("failed"))
    return finish_summary(config.output, writer.records, worked,
                          lambda records: with_embedding_cost({**summarize(records, new_records, elapsed, None, None),
                                                               **extra}, config.search, new_records))


def _check_resources(ray, driver: Driver, address: str | None) -> None:
    """Refuse, naming the numbers, a run the cluster cannot place (it would wait for ever)."""
    have = ray.cluster_resources()
    need_gpus = driver.gpus * driver.workers
    if need_gpus and have.get("GPU", 0) < need_gpus:
        where = f"the cluster at {address!r}" if address else "this machine"
        raise ConfigError(f"--workers {driver.workers} with {driver.gpus:g} GPU each needs {need_gpus:g} GPUs; "
                          f"{where} has {have.get('GPU', 0):g} (fewer --workers, or policy.device=cpu)")
    need_cpus = driver.cpus * driver.workers
    if have.get("CPU", 0) < need_cpus:
        raise ConfigError(f"--workers {driver.workers} with {driver.cpus} CPU each needs {need_cpus} CPUs; "
                          f"the cluster has {have.get('CPU', 0):g} (fewer --workers)")
