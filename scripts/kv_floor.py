"""How far below a method's KV-size metric any selection rule could go, on the same trees.

    ets run --config ets/demo/demo.yaml method=rebase width=64 save_trees=true output=runs/rebase.jsonl
    python scripts/kv_floor.py runs/rebase.jsonl

The paper's metric (docs/algorithms.md) counts, at every selection step, the tokens on the
union of the root-to-candidate paths. The candidates' own newest steps and the prompt are
in it whatever the rule keeps: every method expands the same remaining width, so they are
a floor. What a rule like ETS can save is the rest, the ancestors. On shallow trees with
short steps (the demo task) the floor is a large share, which caps the possible reduction;
on the paper's deep trees it is small.
"""

from __future__ import annotations

import collections
import json
import sys


def floor_and_metric(record: dict) -> tuple[int, int]:
    """(frontier floor, paper metric) of one result line written with save_trees=true."""
    if "tree" not in record:
        raise SystemExit("kv_floor: the results have no trees; rerun with save_trees=true")
    nodes = record["tree"]["nodes"]
    root = next(n for n in nodes if n["parent"] is None)
    newest = collections.Counter()
    for n in nodes:
        if n["parent"] is not None and not n["terminal"]:
            newest[n["depth"]] += n["num_tokens"]
    steps = record["kv_size_steps"]          # step k selects among the children at depth k + 1
    floor = sum(root["num_tokens"] + newest[k + 1] for k in range(len(steps)))
    return floor, sum(steps)


def main(argv=None) -> None:
    paths = (argv if argv is not None else sys.argv[1:]) or ["-h"]
    if paths[0] in ("-h", "--help"):
        print(__doc__)
        return
    for path in paths:
        with open(path) as f:
            pairs = [floor_and_metric(json.loads(line)) for line in f if line.strip()]
        floor, metric = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        print(f"{path}: {len(pairs)} problems, paper KV metric {metric:,}, frontier floor {floor:,} "
              f"({floor / metric:.0%}); no selection rule at this width goes below the floor, "
              f"so the largest possible reduction is {metric / floor:.2f}x")


if __name__ == "__main__":
    main()
