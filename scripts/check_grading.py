#!/usr/bin/env python
"""Check extraction + grading on the real benchmarks: every reference solution must grade as right.

For every GSM8K test item and every MATH500 item: extract the final answer from the
reference *solution* text with `ets.answers.extract.extract_answer` (its marked rules: a
reference solution marks its answer, and a last-number fallback would hide a miss), judge
it against the ground-truth answer with `ets.answers.grading.is_equivalent`, and print the
agreement per dataset with every miss. Target: >= 99% on each.

A grader that says "equal" to everything would pass that, so a control follows: each
item's ground truth against the *next* item's extracted answer. Those pairs should match
only where two problems really share an answer (e.g. both "3"); the ones judged equal
with different strings are listed for a human to look at.

    python scripts/check_grading.py                 # data in ../shared/data
    python scripts/check_grading.py --data DIR --limit 200
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Iterator, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from ets.answers.extract import extract_answer, gsm8k_ground_truth  # noqa: E402
from ets.answers.grading import is_equivalent, normalize  # noqa: E402
from ets.config import MARKED_ANSWER_RULES  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data"
# dataset name -> (file under the data folder, solution field, ground truth of a record)
DATASETS = {
    "gsm8k": ("gsm8k/test.jsonl", "answer", lambda r: gsm8k_ground_truth(r["answer"])),
    "math500": ("math500/test.jsonl", "solution", lambda r: r["answer"]),
}


class Item(NamedTuple):
    index: int
    extracted: str | None
    truth: str


class Report(NamedTuple):
    name: str
    total: int
    misses: list[Item]
    cross_matches: list[tuple[Item, Item]]   # (item, next item) judged equal, strings differ
    differing: int                           # items whose two strings differ: math-verify decided
    seconds: float

    @property
    def agreement(self) -> float:
        return 100.0 * (self.total - len(self.misses)) / self.total


def read_items(path: Path, solution_field: str, truth_of, limit: int | None = None) -> Iterator[Item]:
    with path.open(encoding="utf-8") as f:
        for index, line in enumerate(f):
            if limit is not None and index >= limit:
                return
            record = json.loads(line)
            yield Item(index, extract_answer(record[solution_field], MARKED_ANSWER_RULES), truth_of(record))


def check_dataset(name: str, data_dir: Path, limit: int | None = None) -> Report:
    relpath, solution_field, truth_of = DATASETS[name]
    start = time.perf_counter()
    items = list(read_items(data_dir / relpath, solution_field, truth_of, limit))
    misses = [it for it in items if not is_equivalent(it.extracted, it.truth)]
    cross = []
    for it, nxt in zip(items, items[1:] + items[:1]):
        if nxt.extracted and normalize(nxt.extracted) != normalize(it.truth) and is_equivalent(nxt.extracted, it.truth):
            cross.append((it, nxt))
    differing = sum(1 for it in items if it.extracted is not None and normalize(it.extracted) != normalize(it.truth))
    return Report(name, len(items), misses, cross, differing, time.perf_counter() - start)


def print_report(report: Report) -> None:
    print(f"{report.name}: {report.total - len(report.misses)}/{report.total} agree "
          f"= {report.agreement:.2f}%  ({report.seconds:.1f} s); {report.differing} of them "
          "written differently (decided by math-verify, not by string equality)")
    for it in report.misses:
        print(f"  miss #{it.index}: extracted {it.extracted!r}, ground truth {it.truth!r}")
    print(f"  control: {len(report.cross_matches)} of {report.total} pairs of different problems "
          "judged equal with different strings")
    for it, nxt in report.cross_matches:
        print(f"    #{it.index} truth {it.truth!r} ~ #{nxt.index} answer {nxt.extracted!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"data folder (default {DEFAULT_DATA})")
    parser.add_argument("--limit", type=int, default=None, help="first N items of each dataset")
    parser.add_argument("--target", type=float, default=99.0, help="agreement %% required (exit 1 below)")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"error: data folder {str(args.data)!r} does not exist; pass --data with the folder "
              "that holds gsm8k/test.jsonl and math500/test.jsonl", file=sys.stderr)
        return 2
    reports = [check_dataset(name, args.data, args.limit) for name in DATASETS]
    for report in reports:
        print_report(report)
    return 0 if all(r.agreement >= args.target for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
