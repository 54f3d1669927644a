"""Does a search's cost per token grow with the number of searches in flight?

The same problems are searched with `concurrency` C = 1, 4, 16, ... (the loop's cap on
problems in flight; each round then batches C problems' requests into one policy call and
one PRM call). Per generated token it prints the wall time, the policy's phase alone
(RunStats.expand_seconds: decode and prefill), the reward's (score_seconds), the
process's CPU time (all threads) and its minor page faults (the symptom of fresh large
allocations per call). Flat or falling with C is the engine doing its job; rising is what
the engine showed before it kept its decode buffers (17.2M faults at C=32 against 2.35M at
C=4 for the same work).

Every (repeat, C) starts from empty caches (the policy's and the PRM's prefix caches are
evicted, their counters reset) on one policy and one PRM object, the values of C
interleaved within each repeat (order rotated per repeat); medians and [min, max] are
printed, with the ratio of each C's median to C=1's. The records must be the same for every
C (each problem's samples are seeded by the problem and node alone): a line says whether
they are.

    python scripts/bench_concurrency.py                       # demo, rebase W=16, 16 problems
    python scripts/bench_concurrency.py --method ets --width 64 --problems 8 --concurrency 1,8
    python scripts/bench_concurrency.py --concurrency 16 --rounds whole,in-flight   # rounds in flight or whole
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from ets.api import build_reward  # noqa: E402
from ets.config import load_config  # noqa: E402
from ets.data import load_problems  # noqa: E402
from ets.engine.heap import freeze_loaded  # noqa: E402
from ets.loop.controller import SearchLoop  # noqa: E402
from ets.policy.build import build_policy  # noqa: E402
from ets.strategies import build as build_strategy  # noqa: E402

DEMO = REPO / "ets" / "demo" / "demo.yaml"


def fresh(policy, reward) -> None:
    """Empty prefix caches and zeroed counters: no run starts warm from the one before; and
    what the process holds frozen out of the cycle collector's way, as `ets run` does
    before its search (ets/engine/heap.py)."""
    freeze_loaded()
    engine = getattr(policy, "engine", None)
    if engine is not None:
        engine.evict()
        engine.reset_stats()
    backend = getattr(reward, "backend", None)
    if hasattr(backend, "clear_cache"):
        backend.clear_cache()


def one_run(problems, policy, reward, config, concurrency: int, in_flight: bool | None = None) -> dict:
    fresh(policy, reward)
    strategy = build_strategy(config.search)
    strategy.warm_up()
    faults0, cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time(), time.perf_counter()
    records, stats = SearchLoop(problems, policy, reward, config.search, strategy=strategy,
                                concurrency=concurrency, in_flight=in_flight).run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    tokens = sum(r["generated_tokens"] for r in records)
    return {
        "tokens": tokens, "in_flight": stats.mean_active,
        "wall_us": 1e6 * wall / tokens, "policy_us": 1e6 * stats.expand_seconds / tokens,
        "reward_us": 1e6 * stats.score_seconds / tokens,
        "cpu_us": 1e6 * cpu / tokens, "faults_per_1k": 1e3 * faults / tokens,
        "answers": [(r["id"], r.get("answer"), r["generated_tokens"], r["kv_size"]) for r in records],
    }


def spread(values: list[float], fmt: str = ",.1f") -> str:
    """median [min-max]"""
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(DEMO))
    ap.add_argument("--method", default="rebase")
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--concurrency", default="1,4,16", help="comma-separated values of C")
    ap.add_argument("--rounds", default="in-flight",
                    help="comma-separated: in-flight (each problem's round on its own, the default) and/or whole "
                         "(every problem waits for the round's longest step)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the machine is shared)")
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    config = load_config(args.config, [f"method={args.method}", f"width={args.width}",
                                       f"data.limit={args.problems}", *args.overrides])
    problems = load_problems(config.data)
    policy = build_policy(config.policy, config.search)
    reward = build_reward(config, policy)
    modes = {"in-flight": True, "whole": False}
    values = [(int(c), m) for c in args.concurrency.split(",") for m in args.rounds.split(",")]
    if any(m not in modes for _, m in values):
        ap.error(f"--rounds: choose from {', '.join(modes)}")
    print(f"{args.method} W={args.width}, {len(problems)} problems, {args.threads} thread(s), "
          f"{args.repeats} interleaved repeats, policy {config.policy.model} on {config.policy.backend}")

    # One untimed run first: the pools' pages are touched once, outside every measurement.
    one_run(problems[:2], policy, reward, config, max(c for c, _ in values))
    runs: dict[tuple[int, str], list[dict]] = {v: [] for v in values}
    for rep in range(args.repeats):
        order = values[rep % len(values):] + values[:rep % len(values)]
        for c, mode in order:
            runs[c, mode].append(one_run(problems, policy, reward, config, c, modes[mode]))
            r = runs[c, mode][-1]
            print(f"  repeat {rep + 1}, C={c}, {mode} rounds: {r['tokens']:,} tokens, {r['wall_us']:.1f} us/token",
                  flush=True)

    base = statistics.median(r["wall_us"] for r in runs[values[0]])
    print(f"\n| C | rounds | in flight (mean) | wall us/token | policy us/token | reward us/token | CPU us/token "
          f"| minor faults / 1k tokens | wall vs C={values[0][0]}, {values[0][1]} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c, mode in values:
        rs = runs[c, mode]
        ratio = statistics.median(r["wall_us"] for r in rs) / base
        print(f"| {c} | {mode} | {rs[0]['in_flight']:.1f} | {spread([r['wall_us'] for r in rs])} "
              f"| {spread([r['policy_us'] for r in rs])} | {spread([r['reward_us'] for r in rs])} "
              f"| {spread([r['cpu_us'] for r in rs])} "
              f"| {spread([r['faults_per_1k'] for r in rs])} | {ratio:.2f}x |")
    answers = {tuple(map(tuple, r["answers"])) for rs in runs.values() for r in rs}
    print(f"\nrecords identical across C, rounds and repeats: {'yes' if len(answers) == 1 else 'NO'}")


if __name__ == "__main__":
    main()
