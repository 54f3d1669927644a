"""Does ETS's smaller tree buy throughput when the policy's KV pool is the limit?

REBASE and ETS search the same problems under several KV budgets (the policy engine's
pool, `policy.kv_budget_tokens`); the loop admits as many searches as the pool holds
(ets/loop/admission.py) and the engine preempts, then recomputes, what does not fit. Per
budget and method it prints problems/s, tokens/s, the searches in flight, the sequences
preempted and the tokens computed per token generated (the work a full pool makes a search
redo), with ETS's problems/s over REBASE's, pair by pair: the paper reports 1.4x where
REBASE is memory-bound.

One process, one PRM object and one policy object per budget; every run starts from empty
caches (bench_concurrency.fresh). Within a repeat the budgets rotate and the two methods
alternate (REBASE first in even repeats, ETS first in odd ones): a run's place in the
sequence once moved REBASE's wall time by 13%, so a ratio is only read over both
orders. Records do not depend on the budget (each problem's samples are seeded by the
problem and node alone): a line says whether every run of a method wrote the same ones.

    python scripts/bench_budget.py      # demo, W=64, 24 problems, pools of 16k, 32k and 262k (demo.yaml's) tokens
    python scripts/bench_budget.py --budgets 32768 --problems 8 --repeats 2 seed=1
    python scripts/bench_budget.py --budgets 262144 --embedders static:all-MiniLM-L6-v2,policy,prm

`--embedders` runs ETS once per step embedder (`search.embedder`) against the same
REBASE runs: in each repeat the methods run in an order rotated by one from the last.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench_concurrency import DEMO, fresh, spread  # noqa: E402
from ets.api import build_reward  # noqa: E402
from ets.config import load_config  # noqa: E402
from ets.data import load_problems  # noqa: E402
from ets.loop.controller import SearchLoop  # noqa: E402
from ets.policy.build import build_policy  # noqa: E402
from ets.strategies import build as build_strategy  # noqa: E402


def one_run(problems, policy, reward, config) -> dict:
    fresh(policy, reward)
    strategy = build_strategy(config.search)
    strategy.warm_up()
    start = time.perf_counter()
    records, stats = SearchLoop(problems, policy, reward, config.search, strategy=strategy,
                                concurrency=config.concurrency).run()
    wall = time.perf_counter() - start
    engine = policy.engine.stats()  # the engine's own counters (EnginePolicy's generated_tokens is not reset)
    generated = sum(r["generated_tokens"] for r in records)
    return {
        "wall": wall, "problems_s": len(records) / wall, "tokens_s": generated / wall,
        "in_flight": stats.mean_active, "peak_in_flight": stats.peak_active,
        "search_peak": stats.mean_search_peak_kv, "preempted": engine["preempted"],
        "computed_per_generated": engine["computed_tokens"] / max(1, engine["generated_tokens"]),
        "accuracy": sum(bool(r["correct"]) for r in records) / len(records),
        "kv_per_problem": sum(r["kv_size"] for r in records) / len(records),
        "records": tuple(sorted((r["id"], r.get("answer"), r["generated_tokens"], r["kv_size"]) for r in records)),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(DEMO))
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--problems", type=int, default=24)
    ap.add_argument("--budgets", default="16384,32768,262144", help="policy KV pools in tokens, comma-separated")
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repeats (2: each method once in each place)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the machine is shared)")
    ap.add_argument("--embedders", default=None,
                    help="ETS once per step embedder, comma-separated (default: the config's)")
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value (e.g. seed=1)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    budgets = [int(b) for b in args.budgets.split(",")]
    # each method's name and its own overrides: REBASE, then ETS (once per embedder asked for)
    methods = {"rebase": ["method=rebase"]}
    if args.embedders is None:
        methods["ets"] = ["method=ets"]
    else:
        methods.update({f"ets, {e}": ["method=ets", f"embedder={e}"] for e in args.embedders.split(",")})
    configs = {(b, m): load_config(args.config, [*own, f"width={args.width}", f"data.limit={args.problems}",
                                                 f"policy.kv_budget_tokens={b}", *args.overrides])
               for b in budgets for m, own in methods.items()}
    names = list(methods)
    first = configs[budgets[0], names[0]]
    problems = load_problems(first.data)
    policies = {b: build_policy(configs[b, names[0]].policy, first.search) for b in budgets}
    reward = build_reward(first, policies[budgets[0]])
    against = "ETS" if args.embedders is None else f"ETS with each of {args.embedders}"
    print(f"REBASE against {against}, W={args.width}, {len(problems)} problems, seed {first.search.seed}, "
          f"{args.threads} thread(s), concurrency cap {first.concurrency}, {args.repeats} interleaved repeats, "
          f"policy {first.policy.model} on {first.policy.backend}, reward {first.reward.name}")

    # One untimed run of each method first: the pools' pages, the embedder and a compiled
    # forward's graphs are made once, outside every measurement.
    for b in budgets:
        for m in names:
            one_run(problems[:1], policies[b], reward, configs[b, m])
    runs: dict[tuple[int, str], list[dict]] = {key: [] for key in configs}
    for rep in range(args.repeats):
        shift = rep % len(budgets)
        # rotated by one each repeat (two methods: REBASE first in even repeats, ETS in odd ones)
        order = names[rep % len(names):] + names[:rep % len(names)]
        for b in budgets[shift:] + budgets[:shift]:
            for m in order:
                r = one_run(problems, policies[b], reward, configs[b, m])
                runs[b, m].append(r)
                print(f"  repeat {rep + 1}, budget {b:,}, {m}: {r['wall']:.1f} s, {r['problems_s']:.4f} problems/s, "
                      f"{r['in_flight']:.1f} in flight (peak {r['peak_in_flight']}), {r['preempted']:,} preempted", flush=True)
            # as it goes: a run stopped at a time limit (scripts/gpu_check.sh) still leaves each repeat's ratios
            for m in names[1:]:
                print(f"  repeat {rep + 1}, budget {b:,}: {m.replace('ets', 'ETS', 1)} / REBASE problems/s "
                      f"{runs[b, m][-1]['problems_s'] / runs[b, 'rebase'][-1]['problems_s']:.2f}", flush=True)

    print("\n| KV budget (tokens) | method | problems/s | tokens/s | in flight (mean / peak) | search peak KV (mean) "
          "| preempted | computed / generated | KV size/problem | accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b in budgets:
        for m in names:
            rs = runs[b, m]
            # admission, and so in flight, KV and accuracy, are the same in every run: the first's
            one = rs[0]
            print(f"| {b:,} | {m} | {spread([r['problems_s'] for r in rs], '.4f')} "
                  f"| {spread([r['tokens_s'] for r in rs], ',.0f')} | {one['in_flight']:.1f} / {one['peak_in_flight']} "
                  f"| {one['search_peak']:,.0f} | {spread([r['preempted'] for r in rs], ',.0f')} "
                  f"| {statistics.median(r['computed_per_generated'] for r in rs):.2f} "
                  f"| {one['kv_per_problem']:,.0f} | {100 * one['accuracy']:.1f}% |")
    print()
    for b in budgets:
        for m in names[1:]:
            ratios = [e["problems_s"] / r["problems_s"] for e, r in zip(runs[b, m], runs[b, "rebase"])]
            geomean = math.exp(statistics.fmean(math.log(x) for x in ratios))
            kv = runs[b, "rebase"][0]["kv_per_problem"] / runs[b, m][0]["kv_per_problem"]
            print(f"budget {b:,}: {m.replace('ets', 'ETS', 1)} / REBASE problems/s per repeat "
                  f"{', '.join(f'{x:.2f}' for x in ratios)} (geometric mean {geomean:.2f}); KV size {kv:.2f}x smaller")
    same = all(len({r["records"] for b in budgets for r in runs[b, m]}) == 1 for m in names)
    print(f"records of each method identical across budgets and repeats: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
