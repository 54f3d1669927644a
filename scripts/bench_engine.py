"""Benchmark: the engine against the plain `transformers` baseline on a tree-shaped workload.

Several problems searched at once, as the controller does: every round, each problem's
frontier nodes get children (width W in all), one batched `expand` call per round for all
problems; then each problem keeps its `beams` best children (a fixed pseudo-random score,
the same for both backends) and gives each W / beams children. Both backends run in this
process on the same model object, through their `Policy` classes (ets/policy/engine.py,
ets/policy/hf.py). Prints tokens/s of each, the ratio, resident KV of each, and a last line
`speedup: X.XX`.

    python scripts/bench_engine.py [--problems 4 --width 16 --steps 6 --step-tokens 32 --threads 2]
"""

from __future__ import annotations

import os

# On a shared machine, OpenMP threads that spin while waiting steal the core their sibling
# needs: with 2 threads on 2 busy cores a 0.2 ms matmul was measured at 10-15 ms. Passive
# waiting (set before torch loads OpenMP) removes that for both backends alike.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from ets.config import PolicyConfig, SearchConfig  # noqa: E402
from ets.engine import Engine  # noqa: E402
from ets.policy.engine import EnginePolicy  # noqa: E402
from ets.policy.hf import HFPolicy  # noqa: E402
from ets.policy.base import ExpandRequest  # noqa: E402
from ets.models.tiny import build_tokenizer, tiny_config  # noqa: E402


def build_model(arch: str, hidden: int, layers: int, seed: int):
    tok = build_tokenizer()
    config = tiny_config(arch, vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                         num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 128),
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval(), tok


def unique_tokens(paths: list[list[int]]) -> int:
    """Tokens of the union of `paths` (shared prefixes counted once): a trie's size."""
    trie: dict = {}
    count = 0
    for path in paths:
        node = trie
        for t in path:
            if t not in node:
                node[t] = {}
                count += 1
            node = node[t]
    return count


def run(policy, prompts: list[list[int]], args) -> dict:
    """The tree workload on `policy`; returns tokens, seconds and KV figures."""
    # frontier[p]: (handle, path) of the nodes to expand; the roots hold no handle.
    frontier = {p: [(None, prompts[p])] for p in range(len(prompts))}
    alloc = {p: [args.width] for p in frontier}
    generated, live_peak, locked_peak = 0, 0, 0
    before = policy.stats()
    start = time.perf_counter()
    for depth in range(args.steps):
        owners = [p for p in frontier for _ in frontier[p]]
        requests = [ExpandRequest((p, i), path, n) for p in frontier
                    for i, ((_, path), n) in enumerate(zip(frontier[p], alloc[p]))]
        steps = policy.expand(requests)
        # The children lock the parents' paths now: the parents' own handles can go.
        policy.release([h for p in frontier for h, _ in frontier[p]])
        children: dict[int, list] = {p: [] for p in frontier}
        for p, req, req_steps in zip(owners, requests, steps):
            for step in req_steps:
                generated += len(step.token_ids)
                children[p].append((step.handle, req.token_ids + step.token_ids))
        live = [path for kids in children.values() for _, path in kids]
        live_peak = max(live_peak, unique_tokens(live))
        locked_peak = max(locked_peak, policy.stats().get("locked_kv_tokens", 0))
        # Keep the `beams` best children by a score both backends agree on (a hash of depth
        # and rank, not of the tokens: the workload's shape must not depend on the samples).
        for p, kids in children.items():
            order = sorted(range(len(kids)), key=lambda i: zlib.crc32(f"{p}/{depth}/{i}".encode()))
            keep = sorted(order[: args.beams])
            policy.release([kids[i][0] for i in range(len(kids)) if i not in keep])
            frontier[p] = [kids[i] for i in keep]
            alloc[p] = [args.width // args.beams] * args.beams
    policy.release([h for p in frontier for h, _ in frontier[p]])
    seconds = time.perf_counter() - start
    return {"tokens": generated, "seconds": seconds, "tok_s": generated / seconds,
            "live_unique_peak": live_peak, "locked_peak": locked_peak, "stats": _delta(before, policy.stats())}


def _delta(before: dict, after: dict) -> dict:
    """Counters of one run (peaks and gauges as they are at the end)."""
    counters = ("computed_tokens", "generated_tokens", "cache_hit_tokens", "evicted_tokens", "preempted")
    return {k: v - before.get(k, 0) if k in counters else v for k, v in after.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="llama")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--beams", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--step-tokens", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-budget", type=int, default=32768)
    ap.add_argument("--repeats", type=int, default=3, help="runs per backend, alternated; the fastest counts")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model, tok = build_model(args.arch, args.hidden, args.layers, seed=0)
    gen = torch.Generator().manual_seed(1)
    # Byte tokens 32..126 (printable, no newline): the step delimiter is rare, so steps
    # mostly run to --step-tokens, and both backends see the same step lengths.
    prompts = [torch.randint(32, 127, (args.prompt_tokens,), generator=gen).tolist() for _ in range(args.problems)]
    search = SearchConfig(width=args.width, max_step_tokens=args.step_tokens, temperature=1.0, seed=0)
    policy_cfg = PolicyConfig(model="tiny:" + args.arch, kv_budget_tokens=args.kv_budget)

    engine = Engine(model, tok, kv_budget_tokens=args.kv_budget, max_batch_tokens=policy_cfg.max_batch_tokens)
    engine_policy = EnginePolicy(engine, policy_cfg, search)
    hf_policy = HFPolicy(model, tok, policy_cfg, search)

    warm = argparse.Namespace(**{**vars(args), "steps": 1, "problems": 1})
    run(engine_policy, prompts[:1], warm)  # warm-up: first-call costs out of the timing
    run(hf_policy, prompts[:1], warm)
    engine_policy.release_all()
    engine.evict()
    # Alternate the backends and keep each one's fastest run: other load on a shared
    # machine then slows both alike instead of whichever happened to run during it.
    results: dict[str, dict] = {}
    for _ in range(args.repeats):
        for name, policy in (("engine", engine_policy), ("hf", hf_policy)):
            if name == "engine":
                engine_policy.release_all()
                engine.evict()  # every repeat starts from an empty cache
                engine.reset_stats()
            r = run(policy, prompts, args)
            if name not in results or r["seconds"] < results[name]["seconds"]:
                results[name] = r
    engine.check()
    e, h = results["engine"], results["hf"]
    est, hst = e["stats"], h["stats"]
    print(f"workload: {args.problems} problems x width {args.width} ({args.beams} beams), {args.steps} steps "
          f"of <= {args.step_tokens} tokens, prompts {args.prompt_tokens} tokens; model {args.arch} "
          f"hidden {args.hidden} x {args.layers} layers; {args.threads} threads; best of {args.repeats}")
    print(f"engine: {e['tokens']} tokens in {e['seconds']:.2f}s = {e['tok_s']:.1f} tok/s")
    print(f"hf:     {h['tokens']} tokens in {h['seconds']:.2f}s = {h['tok_s']:.1f} tok/s")
    print(f"ratio (engine / hf): {e['tok_s'] / h['tok_s']:.2f}")
    print(f"engine KV: peak live {est['peak_live_kv_tokens']} tokens (locked paths + running samples), "
          f"peak resident {est['peak_kv_tokens']} (with the unlocked LRU cache; pool {est['pool_kv_tokens']}); "
          f"locked after a round at most {e['locked_peak']} vs {e['live_unique_peak']} unique tokens of "
          f"the live paths (a handle does not hold its path's last, uncomputed token)")
    print(f"engine work: computed {est['computed_tokens']} tokens, cache hits {est['cache_hit_tokens']}, "
          f"evicted {est['evicted_tokens']}, preempted {est['preempted']}")
    print(f"hf KV:     peak resident {hst['peak_kv_tokens']} tokens (no sharing; padded batch), computed {hst['computed_tokens']}")
    print(f"speedup: {e['tok_s'] / h['tok_s']:.2f}")


if __name__ == "__main__":
    main()
