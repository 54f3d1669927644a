"""Check: a policy and a PRM on one device, their KV pools sized together from its free
memory (ets/engine/memory.py), then worked: the split as the run summary prints it, and
the device's peak memory after a search-like load against what the plan allowed.

The models are random-initialised from configs (nothing downloaded): a policy of
Qwen2.5-1.5B's shapes and a PRM of a 7B Mistral's (Math-Shepherd's), in bfloat16; `--quick`
takes small ones, for the CPU. The PRM reads the policy's tokens taken into its own vocabulary
(32,000 to the policy's 151,936): an id past an embedding's rows is a device-side assert on
CUDA. Both engines run eagerly unless `--compile` says otherwise: compiling models of these
sizes takes minutes, and what is checked here is memory.

    python scripts/check_memory_split.py --device cuda                 # 1.5B + 7B shapes
    python scripts/check_memory_split.py --device cpu --quick          # a smoke run
    python scripts/check_memory_split.py --device cuda --fraction 0.8 --reward-share 0.3
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, MistralConfig

from bench_engine import build_model
from ets.app.memory_notes import plan_line
from ets.engine import Engine
from ets.engine.memory import MemoryPlan, default_fraction, free_bytes


def build_prm(device: str, dtype: str, quick: bool, tok):
    """A random PRM of Mistral-7B's shapes (or a small one with `quick`)."""
    size = (dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2) if quick else
            dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                 num_key_value_heads=8))
    config = MistralConfig(vocab_size=len(tok) if quick else 32000, max_position_embeddings=32768, **size,
                           bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on the cpu")
    ap.add_argument("--quick", action="store_true", help="small models (a smoke run)")
    ap.add_argument("--fraction", type=float, default=None, help="policy.memory_fraction (default: the device's)")
    ap.add_argument("--reward-share", type=float, default=None, help="policy.reward_memory_share")
    ap.add_argument("--sequences", type=int, default=64, help="continuations decoded, then scored")
    ap.add_argument("--tokens", type=int, default=128, help="new tokens each")
    ap.add_argument("--compile", default="off", choices=("auto", "on", "off"), help="both engines' forward")
    args = ap.parse_args()
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    fraction = default_fraction(args.fraction, args.device) or 0.05  # the CPU: asked for, a small part

    t0 = time.perf_counter()
    policy, tok = build_model("tiny:qwen2" if args.quick else "qwen1.5b", args.device, dtype)
    prm = build_prm(args.device, dtype, args.quick, tok)
    weights = sum(p.numel() * p.element_size() for m in (policy, prm) for p in m.parameters())
    print(f"models on {args.device} ({dtype}): {weights / 2**30:.2f} GiB of weights, built in "
          f"{time.perf_counter() - t0:.1f} s")

    plan = MemoryPlan(args.device, fraction, args.reward_share)
    policy_engine = Engine(policy, tok, memory=plan, compile=args.compile)
    prm_engine = Engine(prm, tok, memory=plan, memory_name="reward", scoring_only=True, compile=args.compile)
    plan.resolve()
    print(plan_line(plan.report()))

    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
    prompt = list(range(3, 259))  # 256 tokens of one question
    t0 = time.perf_counter()
    conts = policy_engine.expand([(prompt, args.sequences)], max_new_tokens=args.tokens, temperature=1.0,
                                 ignore_eos=True)[0]
    vocab = prm.config.vocab_size
    paths = [[t % vocab for t in prompt + c.token_ids] for c in conts]
    rows = prm_engine.score(paths, [[len(p) - 1] for p in paths])
    if cuda:
        torch.cuda.synchronize()
    print(f"{args.sequences} continuations of {args.tokens} tokens decoded and scored in "
          f"{time.perf_counter() - t0:.1f} s ({len(rows)} rows)")
    for name, engine in (("policy", policy_engine), ("reward", prm_engine)):
        s = engine.stats()
        print(f"  {name}: pool {s['pool_kv_tokens']:,} tokens ({s['pool_kv_bytes'] / 2**30:.2f} GiB), "
              f"peak resident {s['peak_kv_tokens']:,}")
    if cuda:
        peak = torch.cuda.max_memory_allocated() - start
        allowed = sum(p["engine_bytes_at_most"] for p in plan.report()["pools"].values())
        total = torch.cuda.get_device_properties(torch.device(args.device)).total_memory
        print(f"  peak beyond the weights: {peak / 2**30:.2f} GiB (the plan's pools and buffers at most "
              f"{allowed / 2**30:.2f} GiB); device {total / 2**30:.1f} GiB, free now "
              f"{free_bytes(args.device) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
