"""One shard of a distributed run (ets/app/distributed.py): a Ray actor with its own policy,
reward model and strategy, searching the chunks of problems the driver hands it.

It is a plain class; the driver makes it an actor with `ray.remote(Worker)`, so this
module imports neither Ray nor the models until a worker is set up.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from ets.config import RunConfig
from ets.data import Problem
from ets.loop.controller import PHASES


class Worker:
    """One shard's search: its own policy, reward model and strategy. Created through
    `ray.remote` by the driver; `setup` loads the models, `search` runs a chunk."""

    def __init__(self, label: str, threads: int | None, log_level: int):
        self.label = label
        self.threads = threads
        logging.basicConfig(level=log_level, format=f"ets[{label}]: %(levelname)s: %(name)s: %(message)s")
        self.config: RunConfig | None = None
        self.problems = 0
        self._rounds = 0
        self._active_sum = 0.0
        self._peak_active = 0
        self._peak_kv_sum = 0.0
        self._phase_seconds = dict.fromkeys(PHASES, 0.0)

    def where(self) -> dict[str, Any]:
        """Where this worker runs: its process id (what a test kills), host and GPUs."""
        import ray

        return {"label": self.label, "pid": os.getpid(), "host": socket.gethostname(),
                "node_id": ray.get_runtime_context().get_node_id(), "gpus": [str(g) for g in ray.get_gpu_ids()]}

    def setup(self, config: RunConfig) -> dict[str, Any]:
        import torch

        from ets.api import build_reward
        from ets.engine.heap import freeze_loaded
        from ets.models.load import hide_loading_bars
        from ets.policy.build import build_policy
        from ets.strategies import build as build_strategy

        threads = config.torch_threads or self.threads  # the config's figure, else this worker's cores
        if threads:
            torch.set_num_threads(threads)
        hide_loading_bars()  # the driver's bar is the one bar
        self.config = config = _local_device(config)
        self.strategy = build_strategy(config.search)
        self.policy = build_policy(config.policy, config.search)
        self.reward = build_reward(config, self.policy)
        self.strategy.warm_up()
        freeze_loaded()  # the models and modules, out of the cycle collector's way
        return self.where()

    def search(self, problems: list[Problem]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The records of these problems (in finish order) and this worker's statistics."""
        from ets.loop.controller import SearchLoop

        config = self.config
        result = SearchLoop(problems, self.policy, self.reward, config.search, strategy=self.strategy,
                            concurrency=config.concurrency, save_trees=config.save_trees,
                            in_flight=None if config.rounds == "in_flight" else False).run()
        s = result.stats
        self.problems += len(problems)
        self._rounds += s.rounds
        self._active_sum += s.mean_active * s.rounds
        self._peak_active = max(self._peak_active, s.peak_active)
        self._peak_kv_sum += s.mean_search_peak_kv * len(problems)
        for key in PHASES:
            self._phase_seconds[key] += getattr(s, key)
        return result.records, self.stats()

    def stats(self) -> dict[str, Any]:
        import resource

        import torch

        out: dict[str, Any] = {
            "problems": self.problems,
            "run_stats": {"rounds": self._rounds, "active_sum": self._active_sum, "peak_active": self._peak_active,
                          "search_peak_kv_sum": self._peak_kv_sum, **self._phase_seconds},
            "policy_stats": self.policy.stats(),
            "policy_memory": self.policy.memory()._asdict(),
            # the process's peak resident memory (Linux reports KiB)
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        if hasattr(self.reward, "stats"):
            out["reward_stats"] = self.reward.stats()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["cuda_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        return out


def _local_device(config: RunConfig) -> RunConfig:
    """`cuda:N` -> `cuda`: Ray makes the actor's own GPU the only one it sees."""
    import dataclasses

    device = str(config.policy.device)
    if device.startswith("cuda:"):
        return dataclasses.replace(config, policy=dataclasses.replace(config.policy, device="cuda"))
    return config
