"""What does a policy engine's pool make it compute again? A diagnostic, not a benchmark.

One search run on the demo (W=64 by default) at one KV pool, with the policy engine's
scheduler hooked so that each computed token is named by why it was computed:

- a position on the path the sequence was asked to extend (`Request.token_ids`): a kept
  path, or part of one, that was no longer cached (its lock spilled, then evicted), filled
  in again; the first prefill of each problem's prompt counts here too (a few hundred
  tokens);
- a position the sequence had computed itself before it was preempted: preemption churn;
- a first computation: one per generated token, about.

It prints the three counts beside the engine's own counters and a digest of the records,
which must not depend on the pool. Counts, not times, so the machine's load does not
matter. docs/results.md, "Throughput under a KV budget", has the pools it explains.

    python scripts/probe_recompute.py --budget 8192 --method rebase --problems 4
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402

from bench_budget import one_run  # noqa: E402
from bench_concurrency import DEMO  # noqa: E402
from ets.api import build_reward  # noqa: E402
from ets.config import load_config  # noqa: E402
from ets.data import load_problems  # noqa: E402
from ets.engine.scheduler import Scheduler  # noqa: E402
from ets.policy.build import build_policy  # noqa: E402


def hook(policy_scheduler: Scheduler, counts: collections.Counter) -> None:
    """Count, per chunk the policy's scheduler books, its positions by cause. A sequence's
    high-water mark before each preemption is kept on it (`_probe_done`); the PRM's own
    engine, if any, is left alone."""
    preempt, postprocess = Scheduler._preempt, Scheduler.postprocess

    def _preempt(self, seq):
        if self is policy_scheduler:
            seq._probe_done = max(getattr(seq, "_probe_done", 0), seq.kv_len)
        return preempt(self, seq)

    def _postprocess(self, plan, outputs, tokens):
        if self is policy_scheduler:
            for seq, chunk in zip(plan.owners, plan.chunks):
                start, end = seq.kv_len, seq.kv_len + len(chunk.token_ids)
                path_end = seq.n_prompt - 1            # the request's path; its last token is computed here
                on_path = max(0, min(end, path_end) - start)
                again = max(0, min(end, getattr(seq, "_probe_done", 0)) - max(start, path_end))
                counts["path filled in again"] += on_path
                counts["preempted, own tokens again"] += again
                counts["first computation"] += end - start - on_path - again
        return postprocess(self, plan, outputs, tokens)

    Scheduler._preempt, Scheduler.postprocess = _preempt, _postprocess


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(DEMO))
    ap.add_argument("--budget", type=int, default=8192, help="the policy's KV pool in tokens")
    ap.add_argument("--method", default="rebase")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value (e.g. seed=1)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    config = load_config(args.config, [f"method={args.method}", f"width={args.width}", f"data.limit={args.problems}",
                                       f"policy.kv_budget_tokens={args.budget}", *args.overrides])
    problems = load_problems(config.data)
    policy = build_policy(config.policy, config.search)
    reward = build_reward(config, policy)
    counts: collections.Counter = collections.Counter()
    hook(policy.engine.scheduler, counts)
    run = one_run(problems, policy, reward, config)  # bench_budget's run: empty caches, zeroed counters
    e = policy.engine.stats()
    print(f"{args.method}, W={args.width}, {len(problems)} problems, pool {args.budget:,}: "
          f"{e['computed_tokens']:,} tokens computed for {e['generated_tokens']:,} generated "
          f"({e['computed_tokens'] / e['generated_tokens']:.2f}); {e['preempted']:,} preempted, "
          f"{e['spilled_handles']:,} locks spilled, {e['evicted_tokens']:,} tokens evicted")
    for cause in ("first computation", "path filled in again", "preempted, own tokens again"):
        print(f"  {cause}: {counts[cause]:,}")
    print(f"records digest {hashlib.sha256(repr(run['records']).encode()).hexdigest()[:12]} (the same at every pool)")


if __name__ == "__main__":
    main()
