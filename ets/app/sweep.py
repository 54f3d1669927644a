"""`ets sweep`: every (method, width) pair on one dataset -> CSV, Markdown and plots.

Each pair writes its own resumable results file `<out>/<method>_w<width>.jsonl` (and its
summary), so an interrupted sweep resumes without redoing finished pairs or duplicating
rows; the table is rebuilt from the summaries at the end.

With seeds (`--seeds 0,1,2`), each (method, width, seed) is one run with `search.seed` set
(every problem's random stream derives from it) into `<method>_w<width>_s<seed>.jsonl`;
only the config's own seed alone keeps the name without `_s<seed>`, so folders made before
seeds existed still resume. The table then has one row per pair: the mean over seeds of
every numeric column, with `<column>_sd` (sample standard deviation), `<column>_min` and
`<column>_max` beside it, `seeds` (how many) and `seed_list`; `table_runs.csv` has the
per-seed rows (a `seed` column) the means are made of.

With `jobs` > 1, that many runs go at once, each in its own process (spawned, with its own
models) with the machine's cores shared out as torch threads (unless the config sets
`torch_threads`). A run's records do not depend on it; its wall time and throughput do (it
shares the CPU), which is why the default is one run at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
from pathlib import Path
from typing import Any, Sequence

from ets.config import ConfigError, RunConfig


def _parse_ints(text: str, flag: str, example: str, empty: str | None = None) -> list[int]:
    """`1,2,3` -> [1, 2, 3]; anything else a ConfigError naming `flag` with `example`
    (`empty` instead when no value is given)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: {example}") from exc
    if not values:
        raise ConfigError(f"{flag} {text!r}: {empty or example}")
    return values


def parse_widths(text: str) -> list[int]:
    """`16,64` -> [16, 64]; each width is validated where every width is, by SearchConfig
    (`pair_config`)."""
    return _parse_ints(text, "--widths", "give integers separated by commas, e.g. 16,64,256",
                       empty="give at least one width, e.g. 16,64,256")


def parse_seeds(text: str) -> list[int]:
    """`0,1,2` -> [0, 1, 2]: whole numbers >= 0 and below 2**63 (what torch and numpy take)."""
    example = "give whole numbers >= 0 separated by commas, e.g. --seeds 0,1,2"
    seeds = _parse_ints(text, "--seeds", example)
    for seed in seeds:
        if not 0 <= seed < 2**63:
            raise ConfigError(f"--seeds {text!r}: seed {seed} is out of range; {example} (each below 2**63)")
    return seeds


def parse_methods(text: str) -> list[str]:
    import ets.strategies as search

    methods = [m.strip() for m in text.split(",") if m.strip()]
    if not methods:
        raise ConfigError("--methods is empty; e.g. --methods best_of_n,beam,dvts,rebase,ets")
    return [search.canonical_name(m) for m in methods]  # KeyError lists the known names


def pair_config(base: RunConfig, method: str, width: int, out: Path, seed: int | None = None,
                tagged: bool = False) -> RunConfig:
    """One run of a sweep: `seed` (default: the config's) into `<method>_w<width>.jsonl`,
    or `<method>_w<width>_s<seed>.jsonl` when `tagged`."""
    seed = base.search.seed if seed is None else seed
    name = f"{method}_w{width}" + (f"_s{seed}" if tagged else "")
    return dataclasses.replace(
        base,
        search=dataclasses.replace(base.search, method=method, width=width, seed=seed),
        output=str(out / f"{name}.jsonl"),
    )


def sweep_configs(base: RunConfig, methods: Sequence[str], widths: Sequence[int], out: Path,
                  seeds: Sequence[int] | None = None) -> list[RunConfig]:
    """Every run of a sweep, seed by seed (a sweep stopped early has whole seeds done), each
    validated. File names carry the seed unless the only seed is the config's own."""
    seeds = [base.search.seed] if seeds is None else list(seeds)
    tagged = seeds != [base.search.seed]
    return [pair_config(base, m, w, Path(out), s, tagged) for s in seeds for w in widths for m in methods]


# Per-run details the summary holds as mappings; the table keeps their headline figures.
_DETAILS = ("policy_stats", "policy_memory", "reward_stats")


def pair_row(config: RunConfig, summary: dict[str, Any]) -> dict[str, Any]:
    """One table row: the pair, its summary, and the policy's own KV memory figures
    (`ets.policy.base.KVMemory`: None where the backend does not measure them)."""
    memory = summary.get("policy_memory", {})
    return {
        "method": config.search.method,
        "width": config.search.width,
        "seed": config.search.seed,
        "aggregation": config.search.aggregation,
        "vote": config.search.vote,
        "vote_rule": f"{config.search.vote} ({config.search.aggregation})",  # the table's "vote (aggregation)"
        **{k: v for k, v in summary.items() if k not in _DETAILS},
        # the ETS code's KV metric (None, printed n/a, in a summary written before it was kept)
        "kv_size_ref_per_problem": summary.get("kv_size_ref_per_problem"),
        "peak_kv_tokens": memory.get("peak_live_tokens"),
        "mean_kv_tokens": memory.get("mean_live_tokens"),
    }


def run_sweep(
    base: RunConfig,
    methods: Sequence[str],
    widths: Sequence[int],
    out: str | Path,
    *,
    show_progress: bool = True,
    fresh_policy_per_pair: bool = True,
    title: str = "",
    workers: int = 1,
    ray_address: str | None = None,
    seeds: Sequence[int] | None = None,
    jobs: int = 1,
    overwrite: bool = False,
) -> list[dict[str, Any]]:
    """Run every pair (methods x widths) once per seed (default: the config's seed);
    returns the table rows (one per pair, means over seeds: `aggregate_seeds`), writes
    table and plots. With `workers` > 1 or a `ray_address`, each run is on that many Ray
    workers (fresh ones per run, loading their own models); one Ray session serves the
    whole sweep. With `jobs` > 1, that many runs at once, one process each (`run_in_jobs`).
    `title` starts the plots' titles (default "ets sweep"). `overwrite`: each run starts
    its output afresh (cleared when it writes its first result)."""
    from ets.app.report import markdown_table, plot_methods, plot_sweep, plot_title, write_csv
    from ets.api import build_reward
    from ets.app.run import run
    from ets.policy.build import build_policy

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    configs = sweep_configs(base, methods, widths, out, seeds)  # validate all first
    runs, reward, policy = [], None, None
    distributed = workers > 1 or ray_address is not None
    if jobs > 1 and distributed:
        raise ConfigError(f"--jobs {jobs} and --workers/--ray-address both share out the machine; use one of them")
    if jobs > 1:
        runs = [pair_row(c, s) for c, s in zip(configs, run_in_jobs(configs, jobs, show_progress, overwrite))]
    with _ray_for(base, workers, ray_address, show_progress) if distributed else contextlib.nullcontext():
        for config in configs if jobs == 1 else ():
            if distributed:
                summary = run(config, show_progress=show_progress, workers=workers, ray_address=ray_address,
                              overwrite=overwrite)
                runs.append(pair_row(config, summary))
                continue
            # A fresh policy and reward model per pair keep each pair's peak KV (the policy's
            # pool and the PRM's own) that pair's alone, and a PRM that scores on the policy's
            # engine (share_policy_engine) on this pair's engine, not the first pair's.
            if policy is None or fresh_policy_per_pair:
                # The last pair's models first go, pools and all: they sit in reference
                # cycles (engine <-> policy <-> reward), which only the cycle collector
                # frees, and a demo pair's two KV pools are ~2.7 GB (five pairs ran a test
                # out of memory).
                policy = reward = None
                gc.collect()
                policy = build_policy(config.policy, config.search)
                reward = build_reward(config, policy)
            summary = run(config, show_progress=show_progress, policy=policy, reward=reward, overwrite=overwrite)
            runs.append(pair_row(config, summary))
    policy = reward = None
    gc.collect()
    rows = aggregate_seeds(runs)
    (out / "table.md").write_text(markdown_table(rows) + "\n")
    write_csv(rows, out / "table.csv")
    if len({r["seed"] for r in runs}) > 1:
        write_csv(runs, out / "table_runs.csv")
    heading = plot_title(base, rows, title or "ets sweep")
    if len(widths) > 1:
        plot_sweep(rows, out, title=heading)
    else:
        plot_methods(rows, out / "methods.png", title=heading)
    return rows


# Columns that name a run rather than measure it: never averaged.
_KEYS = ("method", "width", "seed")


def aggregate_seeds(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (method, width), in the order the pairs first appear. A pair run with
    one seed keeps its row as it is. With several: every numeric column (not a bool)
    becomes the mean over the seeds that know it (None where none does), with `<key>_sd`
    (sample standard deviation, n - 1), `<key>_min` and `<key>_max` beside it, except a
    whole number every seed shares (`problems`), which stays as it is (with a spread of 0
    where another row's seeds differ in it); a column that is not a number keeps its value where the seeds agree (else their values joined
    by "/"); `seeds` is the number of seeds and `seed_list` them, e.g. "0,1,2"."""
    import statistics

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["method"], r["width"]), []).append(r)
    rows = []
    for (method, width), group in groups.items():
        if len(group) == 1:
            rows.append(dict(group[0]))
            continue
        row: dict[str, Any] = {"method": method, "width": width}
        keys = list(dict.fromkeys(k for r in group for k in r if k not in _KEYS))
        for key in keys:
            values = [r.get(key) for r in group]
            known = [v for v in values if v is not None]
            if not known:
                row[key] = None  # unknown in every seed, e.g. live KV on a backend that does not measure it
            elif all(isinstance(v, int) and not isinstance(v, bool) for v in known) and len(set(known)) == 1:
                row[key] = known[0]  # a count every seed shares (problems): no spread to report
            elif all(_number(v) for v in known):
                row[key] = statistics.fmean(known)
                row[f"{key}_sd"] = statistics.stdev(known) if len(known) > 1 else 0.0
                row[f"{key}_min"], row[f"{key}_max"] = min(known), max(known)
            elif all(v == values[0] for v in values):
                row[key] = values[0]
            elif any(isinstance(v, (dict, list)) for v in values):
                row[key] = values  # per seed, in seed order (the CSV leaves such columns out)
            else:
                row[key] = "/".join(dict.fromkeys(str(v) for v in values))
        row["seeds"] = len(group)
        row["seed_list"] = ",".join(str(r["seed"]) for r in group)
        rows.append(row)
    # A count the seeds of one row share has a spread in another's (rounds, say): there it
    # is 0, so that a column has a value in every row of several seeds
    spread = {k.removesuffix("_sd") for row in rows for k in row if k.endswith("_sd")}
    for row in rows:
        for key in spread:
            if row.get("seeds", 1) > 1 and f"{key}_sd" not in row and _number(row.get(key)):
                row[f"{key}_sd"], row[f"{key}_min"], row[f"{key}_max"] = 0.0, row[key], row[key]
    return rows


class RunProcessLost(RuntimeError):
    """A process running one of a sweep's runs ended without a result or an error."""


def run_in_jobs(configs: Sequence[RunConfig], jobs: int, show_progress: bool = True,
                overwrite: bool = False) -> list[dict[str, Any]]:
    """Each run's summary, in the order given, `jobs` runs at a time, each in a fresh
    spawned process with its own models; the first error stops the rest (finished runs
    and the records written so far stay, so the same command resumes)."""
    import concurrent.futures as cf
    import multiprocessing

    from tqdm import tqdm

    from ets.app.stopping import Terminated, terminated

    if not configs:
        return []
    jobs = min(jobs, len(configs))
    # What the strategies load from disk is made here first (ETS: a static embedder's
    # distillation, ~25 s with its own progress bar): once, before the driver's bar, not
    # in two workers at once with their bars cutting through it.
    from ets.strategies import build

    for config in configs:      # after the first, a look at the cache
        build(config.search).prefetch()
    configs = job_configs(configs, jobs)
    bar = tqdm(total=len(configs), unit="run", desc=f"{jobs} runs at a time") if show_progress else None
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                initializer=_set_up_worker, initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(_job, c, overwrite, jobs) for c in configs]
        try:
            for done in cf.as_completed(futures):
                done.result()  # a job's error, raised here
                if bar is not None:
                    bar.update(1)
        except BaseException as stop:
            lost = isinstance(stop, cf.BrokenExecutor)  # a worker killed (the OOM killer, say)
            # (Ctrl-C reaches the workers itself; SIGTERM only this process)
            if not (isinstance(stop, Terminated) or terminated()):
                for f in futures:
                    f.cancel()
            else:
                # The workers ended here; the pool then fails the futures left as it breaks
                # (cancelling them first races that: Python 3.11's pool raises
                # InvalidStateError on a cancelled one, a traceback from its thread)
                workers = multiprocessing.active_children()
                for worker in workers:
                    worker.terminate()  # each stops its run as on Ctrl-C, then ends (_job)
                for worker in workers:
                    worker.join(WORKER_GRACE_SECONDS)
                    if worker.is_alive():
                        worker.kill()
            if lost:  # (the pool has stopped the other runs as on SIGTERM: their finished problems are kept)
                raise RunProcessLost("a run's process ended abruptly (killed by a signal: the kernel's out-of-memory "
                                     "killer, say); the finished runs and problems are kept: the same command "
                                     "resumes") from None
            raise
        finally:
            if bar is not None:
                bar.close()
        return [f.result() for f in futures]


def job_configs(configs: Sequence[RunConfig], jobs: int) -> list[RunConfig]:
    """The configs as `jobs` processes at a time run them: each with its share of the CPU
    cores as torch threads (unless it sets its own) and of the GPU's memory (device_share)."""
    from ets.app.device_share import share_device

    threads = max(1, (os.cpu_count() or 1) // jobs)
    configs = [c if c.torch_threads is not None else dataclasses.replace(c, torch_threads=threads) for c in configs]
    return [share_device(c, 1 / jobs) for c in configs]


# How long a worker whose driver is gone has to stop as on Ctrl-C before it is ended at once
WORKER_GRACE_SECONDS = 10


def _set_up_worker(driver: int) -> None:
    """Worker initializer, once per spawned process (the driver's settings do not reach it):
    no weight-loading bars (they would cut through the driver's one bar), and an end to this
    process once the driver is gone. A driver killed on its own (SIGTERM from a scheduler,
    SIGKILL) does not take its workers with it, and a worker in the middle of a run would go
    on searching, burning the CPU and holding the run's output lock, so that the resumed
    sweep finds its output "in use". Its records so far are whole lines (ets/app/writer.py
    drops a torn tail), so the resumed run loses nothing. SIGTERM, from the watch or from a
    driver stopped by one (`run_in_jobs`), stops the run as Ctrl-C does (ets/app/stopping.py):
    its output closed, then the process ends (`_job`)."""
    import signal
    import threading
    import time

    from ets.app.stopping import between_jobs, stop_on_sigterm
    from ets.models.load import hide_loading_bars

    hide_loading_bars()
    stop_on_sigterm(worker=True)
    between_jobs(True)
    # tqdm's default lock is a process-shared semaphore, which `_job`'s os._exit would leave
    # for the resource tracker to report as leaked; this process draws no bar to share.
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())

    def watch() -> None:
        while os.getppid() == driver:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)  # the run stops as on Ctrl-C: its output closed
        time.sleep(WORKER_GRACE_SECONDS)  # (a main thread deep in one long op takes a while)
        os._exit(1)

    threading.Thread(target=watch, name="ets-driver-watch", daemon=True).start()


def _job(config: RunConfig, overwrite: bool = False, runs_at_a_time: int = 1) -> dict[str, Any]:
    """One run of `run_in_jobs`, in its own process: its models, its search, its summary."""
    from ets.app.run import run
    from ets.app.stopping import EXIT_CODE, Terminated, between_jobs

    between_jobs(False)
    try:
        return run(config, show_progress=False, overwrite=overwrite, runs_at_a_time=runs_at_a_time)
    except Terminated:
        os._exit(EXIT_CODE)  # its output closed: this process ends, as its driver is stopping
    finally:
        # The run's models sit in reference cycles (see run_sweep) and this process takes
        # the next run: free its KV pools now, not at the collector's next whim.
        gc.collect()
        between_jobs(True)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ray_for(base: RunConfig, workers: int, address: str | None, show_progress: bool):
    """One Ray session (joined, or local and stopped at the end) for every pair of a sweep."""
    import os

    from ets.app.distributed import ray_session, worker_resources

    cpus, _ = worker_resources(base, workers, None, None)
    return ray_session(address, num_cpus=max(os.cpu_count() or 1, workers * cpus), quiet=not show_progress)


def relative_to_rebase(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per width, as lines: ETS against REBASE and REBASE against best-of-N (the paper's two
    comparisons): the KV-size change (on both metrics), the throughput ratio and the
    accuracy difference. On rows aggregated over seeds (`aggregate_seeds`), ratios of the
    means, said in the line. Where the rows carry each problem's outcome
    (`correct_by_problem`), the accuracy difference is paired over the problems both
    searched, with its confidence interval (ets/app/paired.py)."""
    from ets.app.paired import kv_change
    from ets.app.terminal import COMPARISONS

    lines = []
    by = {(r["method"], r["width"]): r for r in rows}
    for width in sorted({r["width"] for r in rows}):
        for method, base, name in COMPARISONS:
            a, b = by.get((method, width)), by.get((base, width))
            if not (a and b):
                continue
            kv = kv_change(b["kv_size_per_problem"], a["kv_size_per_problem"], b.get("kv_size_ref_per_problem"),
                           a.get("kv_size_ref_per_problem"))
            tp = _ratio(a.get("tokens_per_s"), b.get("tokens_per_s"))
            pp = _ratio(a.get("problems_per_s"), b.get("problems_per_s"))
            lines.append(f"W={width}{_over(a, b)}: {name}: KV size {kv}, throughput {pp} problems/s "
                         f"({tp} tokens/s), accuracy {_accuracy_difference(a, b)}")
    return lines


def _over(a: dict[str, Any], b: dict[str, Any]) -> str:
    seeds = min(a.get("seeds", 1), b.get("seeds", 1))
    return f" (means over {seeds} seeds)" if seeds > 1 else ""


def _accuracy_difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    """a's accuracy minus b's: paired, with its interval, when both rows know their
    problems' outcomes; else the difference of the two accuracies."""
    from ets.app.paired import paired_difference

    if a.get("correct_by_problem") and b.get("correct_by_problem"):
        paired = paired_difference(a["correct_by_problem"], b["correct_by_problem"])
        if paired is not None:
            return paired.text()
    return f"{100 * (a['accuracy'] - b['accuracy']):+.1f} points"


def _ratio(a: float | None, b: float | None) -> str:
    """`a / b` as "1.23x", or "n/a" when either is unknown (a summary rebuilt without
    timings) or the divisor is 0."""
    return f"{a / b:.2f}x" if a is not None and b else "n/a"
