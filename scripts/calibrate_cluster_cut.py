"""Where to cut ETS's dendrogram on the demo task: cosine distances between sibling steps.

    python scripts/calibrate_cluster_cut.py            # 40 validation problems, MiniLM

ETS rewards covering *semantically different* steps (ALGORITHMS.md, "ETS"). The paper cuts
at cosine distance 0.05 with its own embedder on long steps; on short demo steps MiniLM
puts two wordings of the same computation further apart than that. For the first step of
each problem (every part of every item is a valid first step) this embeds several wordings of
each alternative and prints the distances between two wordings of the *same* quantity and
between *different* quantities, with the share of each below candidate cuts. A good cut
merges the first and never the second; demo.yaml uses the result.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ets.demo import generate_split  # noqa: E402
from ets.demo.solutions import next_moves, step_text  # noqa: E402
from lp.clustering import DEFAULT_EMBEDDER, load_embedder  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--wordings", type=int, default=6, help="wordings sampled per alternative")
    ap.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    args = ap.parse_args(argv)

    model = load_embedder(args.embedder)
    rng = random.Random(0)
    same, different = [], []
    for p in generate_split("validation", args.problems, seed=1):
        steps = [(move, step_text(p, move, rng)) for move in next_moves(p)
                 for _ in range(args.wordings)]
        unit = model.encode([t for _, t in steps], normalize_embeddings=True)
        for i, j in itertools.combinations(range(len(steps)), 2):
            if steps[i][1] != steps[j][1]:                     # identical texts say nothing
                d = 1.0 - float(unit[i] @ unit[j])
                (same if steps[i][0] == steps[j][0] else different).append(d)
    same, different = np.asarray(same), np.asarray(different)
    print(f"{args.embedder}, {args.problems} problems, first-step alternatives")
    print(f"  same quantity, other wording: {len(same)} pairs, distance p10/p50/p90 "
          + " / ".join(f"{x:.3f}" for x in np.percentile(same, [10, 50, 90])))
    print(f"  different quantities:         {len(different)} pairs, distance p10/p50/p90 "
          + " / ".join(f"{x:.3f}" for x in np.percentile(different, [10, 50, 90])))
    print("  cut   same merged   different merged")
    for cut in (0.05, 0.1, 0.2, 0.3, 0.4):
        print(f"  {cut:<5} {np.mean(same <= cut):>11.1%} {np.mean(different <= cut):>18.1%}")


if __name__ == "__main__":
    main()
