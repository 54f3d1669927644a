"""One run of `ets run`: problems from the config, searched, written as they finish.

    summary = run(load_config("configs/tiny.yaml", ["width=8"]))

The output JSONL is resumable (ets/app/jsonl.py): problems already in it are skipped, and the
summary (accuracy, throughput, KV figures) is written next to it as `<name>.summary.json`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ets.config import RunConfig
from ets.loop.controller import RunStats, SearchLoop
from ets.data import load_problems
from ets.app.jsonl import read_records
from ets.app.output import open_output, read_json, summary_path, write_json_atomic
from ets.policy.base import Policy
from ets.policy.build import build_policy
from search import build as build_strategy


def build_reward_for(config: RunConfig, policy: Policy):
    from rewards import build_reward

    # The policy's engine is offered for PRMs that share its weights (step_tag with
    # share_policy_engine); by default a PRM keeps its own KV pool (its own key,
    # reward.options.kv_budget_tokens), so the policy's KV figures count the policy alone.
    return build_reward(config.reward, config.policy, engine=getattr(policy, "engine", None))


def run(config: RunConfig, *, show_progress: bool = True, policy: Policy | None = None, reward=None,
        overwrite: bool = False) -> dict[str, Any]:
    """Search the problems not yet in `config.output`. An output made by another config is
    refused (ets/app/output.py) unless `overwrite`, which starts it afresh."""
    strategy = build_strategy(config.search)  # an unknown method fails before anything is read or loaded
    problems = load_problems(config.data)
    with open_output(config, problems, overwrite=overwrite) as writer:
        todo = [p for p in problems if p.id not in writer.done_ids]
        new_records: list[dict[str, Any]] = []
        run_stats: RunStats | None = None
        elapsed = 0.0
        if todo:
            # Models load before the clock starts: throughput measures the search alone.
            policy = policy or build_policy(config.policy, config.search)
            reward = reward or build_reward_for(config, policy)
            strategy.warm_up()
            bar = _progress(len(problems), len(problems) - len(todo), config.search.method, show_progress)

            def on_result(record: dict[str, Any]) -> None:
                writer.write(record)
                new_records.append(record)

            # Admission reads the KV capacity from the policy itself (policy.memory()).
            loop = SearchLoop(
                todo, policy, reward, config.search, strategy=strategy,
                concurrency=config.concurrency, on_result=on_result, progress=bar, save_trees=config.save_trees,
            )
            start = time.perf_counter()
            run_stats = loop.run().stats
            elapsed = time.perf_counter() - start
            if bar is not None:
                bar.close()
    records = read_records(config.output)
    stored = summary_path(config.output)
    kept = None if new_records else read_json(stored)
    if kept is not None:
        # Nothing new was searched: keep the throughput measured when the work was done
        # (an empty or truncated summary is rebuilt below, its throughput unknown).
        return kept
    summary = {**summarize(records, new_records, elapsed, policy, reward), **(run_stats._asdict() if run_stats else {})}
    write_json_atomic(stored, summary)
    return summary


def summarize(records: list[dict[str, Any]], new_records: list[dict[str, Any]], elapsed: float, policy,
              reward=None) -> dict[str, Any]:
    """Accuracy over every record in the file; throughput over the records made now. With
    new records: the policy's counters (`policy_stats`) and KV memory (`policy_memory`, its
    `ets.policy.base.KVMemory`), and the reward model's counters (`reward_stats`; for a PRM
    on its own engine, that second cache's pool and peak)."""
    n = len(records)
    new_tokens = sum(r["generated_tokens"] for r in new_records)
    measured = elapsed > 0 and bool(new_records)
    out = {
        "problems": n,
        "accuracy": sum(r["correct"] for r in records) / n if n else 0.0,
        "kv_size_sum": sum(r["kv_size"] for r in records),
        "kv_size_per_problem": sum(r["kv_size"] for r in records) / n if n else 0.0,
        "generated_tokens": sum(r["generated_tokens"] for r in records),
        "new_problems": len(new_records),
        # Unknown (None, printed n/a) when nothing was timed, e.g. a lost summary rebuilt.
        "wall_time": round(elapsed, 3) if measured else None,
        "problems_per_s": len(new_records) / elapsed if measured else None,
        "tokens_per_s": new_tokens / elapsed if measured else None,
    }
    totals: dict[str, float] = {}
    for r in records:
        for key, value in r.get("strategy_metrics", {}).items():
            totals[key] = totals.get(key, 0) + value
    if totals:  # e.g. ETS solver fallbacks: counted, never silent
        out["strategy_metrics"] = totals
    if policy is not None and new_records:
        out["policy_stats"] = policy.stats()
        out["policy_memory"] = policy.memory()._asdict()
    if reward is not None and new_records and hasattr(reward, "stats"):
        out["reward_stats"] = reward.stats()
    return out


def _progress(total: int, done: int, label: str, show: bool):
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc=label, unit="problem")
