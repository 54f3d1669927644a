"""The demo task: generator, splits, step checker, verifier reward."""

import json
import random

import pytest

from ets.demo import (ANSWER_PREFIX, TEST_PATH, all_orders, check_steps, generate_problem, generate_split,
                      is_correct_solution, load_test_problems, parse_question, reference_solution,
                      render_solution, split_of)
from ets.demo.splits import shipped_records
from ets.demo.task import DemoParseError


def problems(n, seed=0):
    rng = random.Random(seed)
    return [generate_problem(rng) for _ in range(n)]


def test_generator_is_deterministic_by_seed():
    a, b, c = problems(50, 1), problems(50, 1), problems(50, 2)
    assert [p.question for p in a] == [p.question for p in b]
    assert [p.question for p in a] != [p.question for p in c]
    assert generate_split("train", 20, 3) == generate_split("train", 20, 3)


def test_parse_question_inverts_the_text():
    for p in problems(300):
        q = parse_question(p.question)
        assert q == p and q.answer == p.answer
        # the parser also finds the problem inside a prompt
        assert parse_question("Question: " + p.question + "\nAnswer:\n") == p
    with pytest.raises(DemoParseError):
        parse_question("What is 2 + 2?")


def test_answers_are_exact_positive_integers():
    for p in problems(300):
        assert isinstance(p.answer, int) and p.answer > 0
        if p.kind == "share":
            assert p.total % p.extra == 0


def test_splits_are_disjoint_and_the_test_file_is_the_fixed_test_split():
    train = {p.canonical() for p in generate_split("train", 600, 0)}
    val = {p.canonical() for p in generate_split("validation", 150, 0)}
    test = load_test_problems()
    keys = {p.canonical() for p in test}
    assert len(test) == len(keys) == 200
    assert not (train & val) and not (train & keys) and not (val & keys)
    assert all(split_of(p) == "test" for p in test)
    with open(TEST_PATH) as f:
        shipped = [json.loads(line) for line in f]
    assert shipped == shipped_records()          # regenerated from the seed, byte for byte
    for rec, p in zip(shipped, test):
        assert rec["answer"].endswith(f"#### {p.answer}")
        assert all(check_steps(p, rec["answer"].split("\n")[:-1]))


def test_checker_accepts_every_valid_order_in_every_phrasing():
    n_orders = 0
    for p in problems(150, 5):
        orders = all_orders(p)
        assert len(orders) == (2 if len(p.items) == 2 else 24)
        for order in orders:
            for style in range(3):
                steps = render_solution(p, order, style=style)
                assert all(check_steps(p, steps)), steps
                assert is_correct_solution(p, steps)
        n_orders += len(orders)
    rng = random.Random(7)
    for p in problems(300, 6):                  # random wording and operand order
        assert all(check_steps(p, reference_solution(p, rng)))
    assert n_orders > 1000


def corruptions(p, step: str):
    """Wrong variants of a correct step: result off, operand off, operand of another item."""
    head, _, c = step.rpartition(" = ")
    yield f"{head} = {int(c) + 1}"
    yield f"{head} = {int(c) * 10}"
    label, a, op, b = head.rsplit(" ", 3)
    yield f"{label} {int(a) + 1} {op} {b} = {c}"
    if op == "*":                                   # another item's price, product right
        item = next(it for it in p.items if sorted((it.count, it.price)) == sorted((int(a), int(b))))
        pairs = {tuple(sorted((it.count, it.price))) for it in p.items}
        other = next((it for it in p.items if tuple(sorted((item.count, it.price))) not in pairs), None)
        if other is not None:
            yield f"{label} {item.count} * {other.price} = {item.count * other.price}"


def test_checker_judges_the_math_not_the_label():
    p = next(p for p in problems(50, 3) if len(p.items) == 2)
    a, b = p.items
    right = [f"Cost of the {b.noun}: {a.count} * {a.price} = {a.cost}",   # misnamed, still right
             f"Mystery: {b.count} * {b.price} = {b.cost}",
             f"Whatever: {a.cost} + {b.cost} = {p.total}"]
    assert check_steps(p, right) == [True, True, True]


def test_checker_rejects_corrupted_steps_and_what_follows_from_them():
    rng = random.Random(11)
    for p in problems(200, 8):
        steps = reference_solution(p, rng)
        for i, step in enumerate(steps[:-1]):
            for bad in corruptions(p, step):
                marks = check_steps(p, steps[:i] + [bad] + steps[i + 1:])
                assert marks[:i] == [True] * i and marks[i] is False, (bad, marks)
        marks = check_steps(p, steps[:-1] + [f"{ANSWER_PREFIX}{p.answer + 1}"])
        assert marks[-1] is False and all(marks[:-1])
        # a wrong result makes the step that uses it wrong too
        first_sum = next(i for i, s in enumerate(steps) if " + " in s)
        used = steps[first_sum].split(" = ")[0].split()[-1]            # right operand of the sum
        src = next(i for i, s in enumerate(steps) if s.endswith(f"= {used}"))
        wrong = steps[:src] + [f"{steps[src].rpartition(' = ')[0]} = {int(used) + 10}"] + steps[src + 1:]
        wrong = [s.replace(f"+ {used} =", f"+ {int(used) + 10} =") if i == first_sum else s
                 for i, s in enumerate(wrong)]
        marks = check_steps(p, wrong)
        assert marks[src] is False and marks[first_sum] is False
    assert check_steps(p, ["", "gibberish", "The answer is: x"]) == [False, False, False]


def test_checker_rejects_steps_before_their_inputs_are_known():
    p = next(p for p in problems(50, 9) if p.kind == "change")
    steps = reference_solution(p, random.Random(0))
    final = next(s for s in steps if " - " in s)
    assert check_steps(p, [final]) == [False]                 # total not computed yet
    sum_step = next(s for s in steps if " + " in s)
    assert check_steps(p, [sum_step]) == [False]              # its addends not computed yet


def test_verifier_scores_shape_and_values():
    from rewards.base import RewardError, validate_scores
    from rewards.verifier import Verifier

    ps = problems(3, 12)
    rng = random.Random(0)
    good = [reference_solution(p, rng) for p in ps]
    trajs = [[good[0], good[0][:2]], [good[1][:-1] + [f"{ANSWER_PREFIX}0"]], []]
    v = Verifier()
    scores = v([p.question for p in ps], trajs)
    assert validate_scores(scores, trajs, "verifier") == scores
    assert scores[0] == [[1.0] * len(good[0]), [1.0, 1.0]]
    assert scores[1] == [[1.0] * (len(good[1]) - 1) + [0.0]]
    assert scores[2] == []
    with pytest.raises(RewardError):
        v(["What is 2 + 2?"], [[["4"]]])
