"""Write a demo problem set from its seed: the shipped test set, or problems of any split.

    python scripts/make_demo_test_set.py                  # rewrites ets/demo/data/test.jsonl
    python scripts/make_demo_test_set.py --split validation --size 100 --seed 0 --out runs/val100.jsonl

The shipped file is `TEST_SIZE` problems of the test split from `TEST_SEED`
(ets/demo/splits.py); tests/test_demo_task.py checks that it equals what this writes. Other
splits, sizes or seeds go to `--out` (choose settings on the validation split, then measure
them on the test set: `ets run ... data.path=runs/val100.jsonl`).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ets.app.output import write_text_atomic  # noqa: E402
from ets.demo.splits import SPLITS, TEST_PATH, TEST_SEED, TEST_SIZE, split_records  # noqa: E402


def fail(message: str) -> None:
    """Bad input: one line naming the problem and the fix, exit code 2, nothing written."""
    print(f"make_demo_test_set: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="test", help=f"one of {', '.join(SPLITS)} (default test)")
    ap.add_argument("--size", type=int, default=TEST_SIZE, help=f"problems (default {TEST_SIZE})")
    ap.add_argument("--seed", type=int, default=TEST_SEED, help=f"generator seed (default {TEST_SEED})")
    ap.add_argument("--out", help="JSONL to write (default: the shipped test file, for the shipped settings only)")
    args = ap.parse_args(argv)
    if args.split not in SPLITS:
        fail(f"--split {args.split!r}: choose one of {', '.join(SPLITS)}")
    if args.size < 1:
        fail(f"--size {args.size}: give a number of problems >= 1")
    shipped = (args.split, args.size, args.seed) == ("test", TEST_SIZE, TEST_SEED)
    if args.out is None and not shipped:
        fail("only the shipped settings rewrite ets/demo/data/test.jsonl; give --out PATH for other problems")
    out = Path(args.out) if args.out else TEST_PATH
    if out.resolve() == TEST_PATH.resolve() and not shipped:
        fail(f"--out {out} is the shipped test file; write other problems elsewhere")
    text = "".join(json.dumps(r) + "\n" for r in split_records(args.split, args.size, args.seed))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, text)   # whole or not at all
    print(f"wrote {args.size} {args.split} problems (seed {args.seed}) to {out}")


if __name__ == "__main__":
    main()
