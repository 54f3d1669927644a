"""Train / validation / test splits of the demo task, disjoint by construction.

A problem's split is a hash of its canonical form (the arithmetic only: kind, extra value
and the (count, price) pairs; no names, nouns or wording), so two problems that differ only
in wording always fall in the same split, and no test problem can be met in training:

    bucket = sha256(canonical) mod 20:   0-15 train (80%),  16-17 validation,  18-19 test

The fixed test set (`TEST_SIZE` problems from `TEST_SEED`) ships as ets/demo/data/test.jsonl
in the GSM8K layout: `question`, and `answer` = a reference solution then `#### N`
(`python scripts/make_demo_test_set.py` rewrites it from the seed).
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from ets.demo.solutions import reference_solution
from ets.demo.task import Problem, generate_problem

SPLITS = ("train", "validation", "test")
TEST_SEED = 20250218
TEST_SIZE = 200
TEST_PATH = Path(__file__).parent / "data" / "test.jsonl"


def split_of(p: Problem) -> str:
    bucket = int(hashlib.sha256(p.canonical().encode()).hexdigest()[:8], 16) % 20
    return "train" if bucket < 16 else "validation" if bucket < 18 else "test"


def generate_split(split: str, n: int, seed: int) -> list[Problem]:
    """`n` distinct problems of `split`, the same for the same seed."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    rng = random.Random(f"{split}:{seed}")
    seen: set[str] = set()
    out: list[Problem] = []
    while len(out) < n:
        p = generate_problem(rng)
        key = p.canonical()
        if split_of(p) == split and key not in seen:
            seen.add(key)
            out.append(p)
    return out


def gsm8k_record(p: Problem, rng: random.Random) -> dict:
    steps = reference_solution(p, rng)[:-1]       # the answer line becomes "#### N"
    return {"question": p.question, "answer": "\n".join(steps) + f"\n#### {p.answer}"}


def split_records(split: str, n: int, seed: int) -> list[dict]:
    """`n` problems of `split` as GSM8K records, the same for the same seed (the reference
    solutions' wording is drawn from the seed too)."""
    rng = random.Random(seed)
    return [gsm8k_record(p, rng) for p in generate_split(split, n, seed)]


def shipped_records() -> list[dict]:
    """The records of the shipped test file, regenerated from the seed."""
    return split_records("test", TEST_SIZE, TEST_SEED)


def load_test_problems(path: Path = TEST_PATH) -> list[Problem]:
    """The shipped test problems, parsed back from their question text."""
    from ets.demo.task import parse_question

    with open(path) as f:
        return [parse_question(json.loads(line)["question"]) for line in f if line.strip()]
