"""The synthetic PRM training data (ets/demo/spoil.py): clean twins and spoiled
solutions whose later steps build on the mistake, labelled by the checker."""

import operator
import random

from ets.demo import check_steps, generate_split, reference_solution
from ets.demo.checker import parse_answer, parse_equation
from ets.demo.spoil import carry_forward, spoil, spoiled_twins

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def test_spoil_always_changes_the_step_and_the_checker_rejects_it():
    rng = random.Random(3)
    for p in generate_split("train", 150, 3):
        steps = reference_solution(p, rng)
        for i, step in enumerate(steps):
            bad = spoil(p, step, rng, steps[:i])
            assert bad != step and not bad.split()[-1].startswith("0")
            assert check_steps(p, steps[:i] + [bad])[i] is False, (step, bad)


def test_carry_forward_builds_every_later_step_on_the_mistake():
    rng = random.Random(5)
    for p in generate_split("train", 150, 5):
        steps = reference_solution(p, rng)
        i = rng.randrange(len(steps) - 1)                   # not the answer step
        bad = spoil(p, steps[i], rng, steps[:i])
        out = carry_forward(steps, i, bad)
        assert out[:i] == steps[:i] and out[i] == bad and len(out) == len(steps)
        # Later steps are right arithmetic (a policy that believed the slip), ...
        for st in out[i + 1:]:
            eq = parse_equation(st)
            if eq is not None and eq.op != "/":
                assert OPS[eq.op](eq.a, eq.b) == eq.c, st
        # ... and the answer follows the spoiled value wherever the slip reaches it (a
        # share can floor a wrong total back to the right answer).
        if parse_equation(bad).c != parse_equation(steps[i]).c and p.kind not in ("share", "coupon_share"):
            assert parse_answer(out[-1]) != p.answer
            assert check_steps(p, out)[-1] is False
        # A rewritten step keeps its label; only its numbers change.
        for old, new in zip(steps[i + 1:], out[i + 1:]):
            if old != new:
                assert parse_equation(old) is None or parse_equation(old).label == parse_equation(new).label


def test_corrupted_data_pairs_a_clean_twin_with_a_spoiled_one():
    data = spoiled_twins(generate_split("train", 200, 0), random.Random(0))
    assert len(data) == 400
    for (q0, clean, marks0), (q1, spoiled, marks1) in zip(data[0::2], data[1::2]):
        assert q0 == q1 and all(marks0) and len(clean) == len(spoiled)
        first = next(k for k, (a, b) in enumerate(zip(clean, spoiled)) if a != b)
        assert marks1[:first] == [True] * first
    assert all(not all(d[2]) for d in data[1::2])
