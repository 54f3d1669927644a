"""Where to cut ETS's dendrogram on the demo task: cosine distances between sibling steps.

    python scripts/calibrate_cluster_cut.py            # 40 validation problems, MiniLM and its static form
    python scripts/calibrate_cluster_cut.py --embedder all-MiniLM-L6-v2   # one embedder

ETS rewards covering *semantically different* steps (docs/algorithms.md, "ETS: the integer program"). The paper cuts
at cosine distance 0.05 with its own embedder on long steps; on short demo steps MiniLM
puts two wordings of the same computation further apart than that. For the first step of
each problem (every part of every item is a valid first step) this embeds several wordings of
each alternative and prints the distances between two wordings of the *same* quantity and
between *different* quantities, with the share of each below candidate cuts. A good cut
merges the first and never the second; demo.yaml uses the result. Each embedder also gets
the ROC AUC of its distance as a test of "other quantity" (1.0: every pair of wordings of
one quantity is closer than every pair of different quantities), and the seconds it took
to embed the texts, so a cheaper embedder is checked against MiniLM on the same pairs.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ets.demo import generate_split  # noqa: E402
from ets.demo.solutions import next_moves, step_text  # noqa: E402
from ets.demo.metrics import roc_auc  # noqa: E402
from ets.lp.clustering import DEFAULT_EMBEDDER, STATIC_PREFIX, load_embedder  # noqa: E402

CUTS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--wordings", type=int, default=6, help="wordings sampled per alternative")
    ap.add_argument("--embedder", action="append",
                    help=f"repeatable; default {DEFAULT_EMBEDDER} and {STATIC_PREFIX}{DEFAULT_EMBEDDER}")
    args = ap.parse_args(argv)

    rng = random.Random(0)
    problems = [[(move, step_text(p, move, rng)) for move in next_moves(p) for _ in range(args.wordings)]
                for p in generate_split("validation", args.problems, seed=1)]
    for name in args.embedder or [DEFAULT_EMBEDDER, STATIC_PREFIX + DEFAULT_EMBEDDER]:
        report(name, problems)


def report(name: str, problems: list[list[tuple[object, str]]]) -> None:
    """Distances between the wordings of each problem's first steps under one embedder."""
    model = load_embedder(name)
    model.encode(["warm-up"])  # the first call pays one-off set-up
    same, different, seconds = [], [], 0.0
    for steps in problems:
        t0 = time.perf_counter()
        unit = model.encode([t for _, t in steps], normalize_embeddings=True)
        seconds += time.perf_counter() - t0
        for i, j in itertools.combinations(range(len(steps)), 2):
            if steps[i][1] != steps[j][1]:                     # identical texts say nothing
                d = 1.0 - float(unit[i] @ unit[j])
                (same if steps[i][0] == steps[j][0] else different).append(d)
    same, different = np.asarray(same), np.asarray(different)
    texts = sum(len(steps) for steps in problems)
    auc = roc_auc([False] * len(same) + [True] * len(different), np.concatenate([same, different]))
    print(f"{name}, {len(problems)} problems, first-step alternatives ({texts} texts embedded in {seconds:.2f} s)")
    print(f"  same quantity, other wording: {len(same)} pairs, distance p10/p50/p90 "
          + " / ".join(f"{x:.3f}" for x in np.percentile(same, [10, 50, 90])))
    print(f"  different quantities:         {len(different)} pairs, distance p10/p50/p90 "
          + " / ".join(f"{x:.3f}" for x in np.percentile(different, [10, 50, 90])))
    print(f"  ROC AUC of distance for 'different quantity': {auc:.3f}")
    print("  cut   same merged   different merged")
    for cut in CUTS:
        print(f"  {cut:<5} {np.mean(same <= cut):>11.1%} {np.mean(different <= cut):>18.1%}")


if __name__ == "__main__":
    main()
