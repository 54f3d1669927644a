"""Benchmark: the engine's speed by torch thread count and OpenMP waiting, to choose them.

OpenMP reads its settings once, when torch loads, so each setting runs in a process of its
own: `bench_engine.py --suite tree --no-hf --repeats 1` (the tree workload on the engine)
under that setting's environment, the settings interleaved within each repeat. A setting
is a thread count T with idle OpenMP threads asleep (`OMP_WAIT_POLICY=PASSIVE`, what the
CLI sets: ets/app/cli.py) or, for T > 1, spinning N rounds before they sleep
(`GOMP_SPINCOUNT=N`, libgomp's; it overrides the policy). `--shared K` also runs K copies
of each setting at once, so the cores are shared, as when other work runs beside a search.
`--heaps kept,glibc` also runs each setting with glibc's malloc as it is
(`ETS_KEEP_FREED_MEMORY=0`) beside the heap the engine keeps (ets/engine/heap.py).

Waking a sleeping thread costs every parallel op some microseconds; a spinning thread
holds a core that another process may be waiting for. Which wins depends on the machine,
the model and what else runs, hence a measurement (docs/results.md, "Engine speed on the CPU").

    python scripts/bench_threads.py                                # 1 and 2 threads, asleep and spinning 10,000
    python scripts/bench_threads.py --threads 1,4,8 --spins 1000,10000 --shared 2
    python scripts/bench_threads.py --threads 2 --heaps kept,glibc --model <folder>   # the kept heap's gain
    python scripts/bench_threads.py --model tiny:llama -- --problems 4   # after --: bench_engine.py's options
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().with_name("bench_engine.py")
TOKS = re.compile(r"^engine: \d+ tokens/run, tok/s ([\d,]+)", re.M)


HEAPS = {"kept": {}, "glibc": {"ETS_KEEP_FREED_MEMORY": "0"}}


def settings(threads: list[int], spins: list[int], heaps: list[str] = ("kept",)) -> list[tuple[str, int, dict]]:
    """(label, threads, environment) of every setting: asleep at each thread count, and
    spinning at each count above one (a single thread has no team to wait for it); each
    with every heap of `heaps` (HEAPS; named in the label when there are several)."""
    out = []
    for t in threads:
        out.append((f"{t} thread{'s' * (t > 1)}, asleep", t, {"OMP_WAIT_POLICY": "PASSIVE"}))
        out += [(f"{t} threads, spin {s:,}", t, {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": str(s)})
                for s in spins if t > 1]
    if len(heaps) == 1:
        return [(label, t, {**env, **HEAPS[heaps[0]]}) for label, t, env in out]
    return [(f"{label}, heap {heap}", t, {**env, **HEAPS[heap]}) for label, t, env in out for heap in heaps]


def measure(threads: int, env: dict, copies: int, model: str, extra: list[str]) -> list[float]:
    """The engine's tok/s in each of `copies` processes run at once under `env`."""
    cmd = [sys.executable, str(BENCH), "--suite", "tree", "--no-hf", "--repeats", "1",
           "--threads", str(threads), "--model", model, *extra]
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", *HEAPS["glibc"])}
    procs = [subprocess.Popen(cmd, env={**base, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(copies)]
    figures = []
    for p in procs:
        out, err = p.communicate()
        found = TOKS.search(out)
        if p.returncode != 0 or found is None:
            sys.exit(f"bench_engine.py failed under {env} with {threads} threads (exit {p.returncode}): "
                     f"{(err or out).strip().splitlines()[-1:]}")
        figures.append(float(found.group(1).replace(",", "")))
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="torch thread counts, comma-separated (default 1,2)")
    ap.add_argument("--spins", default="10000", help="GOMP_SPINCOUNT values to try above one thread, comma-separated "
                    "(empty: asleep only)")
    ap.add_argument("--heaps", default="kept", help="kept, glibc or both comma-separated: the C heap the engine "
                    "keeps for reuse (ets/engine/heap.py) and glibc's malloc as it is")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; medians are reported")
    ap.add_argument("--shared", type=int, default=0, metavar="K",
                    help="also run K copies of each setting at once (the cores shared); 0: alone only")
    ap.add_argument("--model", default="demo", help="as bench_engine.py's --model (demo | qwen1.5b | tiny:<arch>)")
    ap.add_argument("extra", nargs="*", help="after --: options passed on to bench_engine.py (e.g. --problems 4)")
    args = ap.parse_args()
    try:
        threads = [int(t) for t in args.threads.split(",")]
        spins = [int(s) for s in args.spins.split(",") if s]
    except ValueError:
        ap.error(f"--threads {args.threads!r} / --spins {args.spins!r}: use whole numbers, comma-separated")
    heaps = args.heaps.split(",")
    if not set(heaps) <= set(HEAPS):
        ap.error(f"--heaps {args.heaps!r}: use kept, glibc or kept,glibc")
    if min(threads) < 1 or (spins and min(spins) < 0) or args.repeats < 1 or args.shared < 0 or args.shared == 1:
        ap.error("--threads >= 1, --spins >= 0, --repeats >= 1, --shared 0 or at least 2")
    from bench_engine import summary  # after the checks: it loads torch and transformers

    modes = [("alone", 1)] + ([(f"{args.shared} at once", args.shared)] if args.shared else [])
    cells = settings(threads, spins, heaps)
    results: dict[tuple[str, str], list[float]] = {(label, mode): [] for label, _, _ in cells for mode, _ in modes}
    for rep in range(args.repeats):
        for mode, copies in modes:
            for label, t, env in cells:
                figures = measure(t, env, copies, args.model, args.extra)
                results[label, mode] += figures
                print(f"  repeat {rep + 1}, {mode}, {label}: {', '.join(f'{f:,.0f}' for f in figures)} tok/s", flush=True)
    print(f"\nthe engine on the tree workload (bench_engine.py --suite tree, model {args.model}), tok/s per process, "
          f"median [min-max] of {args.repeats} interleaved repeats; the ratio is to {cells[0][0]} in the same mode")
    width = max(len(label) for label, _, _ in cells)
    for mode, _ in modes:
        print(f"== {mode} ==")
        base = statistics.median(results[cells[0][0], mode])
        for label, _, _ in cells:
            values = results[label, mode]
            print(f"{label:{width}s}  {summary(values):>24s}  {statistics.median(values) / base:5.2f}x")
        best = max(cells, key=lambda c: statistics.median(results[c[0], mode]))
        print(f"fastest {mode}: {best[0]}")


if __name__ == "__main__":
    main()
