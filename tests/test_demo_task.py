"""The demo task: generator, splits, step checker (the verifier reward and its dial:
tests/test_verifier_dial.py)."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ets.demo import (ANSWER_PREFIX, TEST_PATH, check_steps, generate_problem, generate_split, is_correct_solution,
                      iter_orders, judge_steps, load_test_problems, parse_question, reference_solution,
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
            assert p.total % p.friends == 0
        if p.kind == "coupon_share":
            assert (p.total - p.coupon) % p.friends == 0


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


def test_solutions_are_deep_and_the_prompt_a_small_share():
    lengths = sorted(len(reference_solution(p, random.Random(i))) for i, p in enumerate(problems(400, 4)))
    assert lengths[0] >= 12 and lengths[-1] <= 20 and lengths[len(lengths) // 2] >= 12
    for p in problems(200, 4):           # 2 items: 12-14 steps; 3 items: 18-20
        n = len(reference_solution(p, random.Random(0)))
        assert n == 5 * len(p.items) + len(p.items) - 1 + {"total": 1, "coupon_share": 3}.get(p.kind, 2)


def test_checker_accepts_every_valid_order_in_every_phrasing():
    two = [p for p in problems(60, 5) if len(p.items) == 2][:6]
    for p in two:
        orders = list(iter_orders(p))
        assert len(orders) == 2 * 24 * 24          # item order x (part order, pairing) per item
        for order in orders[::37]:
            for style in range(3):
                steps = render_solution(p, order, style=style)
                assert all(check_steps(p, steps)), steps
                assert is_correct_solution(p, steps)
    rng = random.Random(7)
    for p in problems(300, 6):                  # random order, wording and operand order
        assert all(check_steps(p, reference_solution(p, rng)))


def item_parts(p, i):
    it = p.items[i]
    return it, it.parts


def test_checker_judges_the_math_not_the_label_and_accepts_other_valid_routes():
    p = next(p for p in problems(50, 3) if len(p.items) == 2 and p.kind == "total")
    (a, (h, t, o)), (b, _) = item_parts(p, 0), item_parts(p, 1)
    right = [f"Cost of the {b.noun}: {a.count} * {h} = {a.count * h}",    # misnamed, still right
             f"Mystery: {t + o} * {a.count} = {a.count * (t + o)}",         # two places at once
             f"Whatever: {a.count * h} + {a.count * (t + o)} = {a.cost}",
             f"{b.count} * {b.price} = {b.cost}",                           # a whole item at once
             f"Total: {b.cost} + {a.cost} = {p.total}", f"{ANSWER_PREFIX}{p.answer}"]
    assert judge_steps(p, right) == ["ok"] * 6
    # a part of one item added to a part of the other: a valid (unusual) partial sum
    (x, (xh, _, _)), (y, (_, _, yo)) = item_parts(p, 0), item_parts(p, 1)
    mixed = [f"{x.count} * {xh} = {x.count * xh}", f"{y.count} * {yo} = {y.count * yo}",
             f"{x.count * xh} + {y.count * yo} = {x.count * xh + y.count * yo}"]
    assert check_steps(p, mixed) == [True, True, True]


def test_checker_names_each_kind_of_error():
    p = next(p for p in problems(80, 13) if len(p.items) == 2 and p.kind == "change")
    (a, (h, t, o)), (b, (bh, bt, bo)) = item_parts(p, 0), item_parts(p, 1)
    base = [f"{a.count} * {h} = {a.count * h}", f"{a.count} * {t} = {a.count * t}"]
    assert judge_steps(p, base + [f"{a.count * h} + {a.count * t} = {a.count * (h + t) + 1}"])[-1] == "arithmetic"
    assert judge_steps(p, base + [f"{a.count} * {t * 10} = {a.count * t * 10}"])[-1] in ("operand", "ok")
    assert judge_steps(p, [f"{a.count} * {h + 100} = {a.count * (h + 100)}"]) == ["operand"]   # digit misread
    other = b.count if b.count != a.count else None
    if other is not None and other * h not in {a.count * v for v in (h, t, o, h + t, h + o, t + o, a.price)}:
        assert judge_steps(p, [f"{other} * {h} = {other * h}"]) == ["operand"]              # another count
    twice = base + [f"{a.count * h} + {a.count * h} = {2 * a.count * h}"]
    assert judge_steps(p, twice)[-1] == "operand"                                            # a set used twice
    assert judge_steps(p, [f"{p.budget} - {a.cost} = {p.budget - a.cost}"]) == ["operand"]   # total not known
    # a wrong sum, and what is built on it
    slip = base + [f"{a.count * h} + {a.count * t} = {a.count * (h + t) + 10}"]
    built = slip + [f"{a.count} * {o} = {a.count * o}",
                    f"{a.count * (h + t) + 10} + {a.count * o} = {a.cost + 10}", f"{ANSWER_PREFIX}{a.cost + 10}"]
    assert judge_steps(p, built) == ["ok", "ok", "arithmetic", "ok", "inherited", "inherited"]
    assert judge_steps(p, [f"{ANSWER_PREFIX}{p.answer + 1}"]) == ["answer"]
    assert judge_steps(p, ["", "gibberish", "The answer is: x"]) == ["format"] * 3


def corruptions(p, step: str):
    """Wrong variants of a correct step: its result off. (An operand off can be another
    valid quantity here, e.g. a part of another item: see the test above for operands.)"""
    head, _, c = step.rpartition(" = ")
    yield f"{head} = {int(c) + 1}"
    yield f"{head} = {int(c) * 10}"


def test_checker_rejects_corrupted_steps_and_what_follows_from_them():
    rng = random.Random(11)
    for p in problems(150, 8):
        steps = reference_solution(p, rng)
        for i, step in enumerate(steps[:-1]):
            for bad in corruptions(p, step):
                marks = check_steps(p, steps[:i] + [bad] + steps[i + 1:])
                assert marks[:i] == [True] * i and marks[i] is False, (bad, marks)
        marks = check_steps(p, steps[:-1] + [f"{ANSWER_PREFIX}{p.answer + 1}"])
        assert marks[-1] is False and all(marks[:-1])


def test_checker_rejects_steps_before_their_inputs_are_known():
    for kind in ("change", "coupon", "share", "coupon_share"):
        p = next(p for p in problems(200, 9) if p.kind == kind)
        steps = reference_solution(p, random.Random(0))
        last = next(s for s in steps if " - " in s or " / " in s)
        assert check_steps(p, [last]) == [False]              # total not computed yet
        sum_step = next(s for s in steps if " + " in s)
        assert check_steps(p, [sum_step]) == [False]          # its addends not computed yet


def test_problem_set_script_writes_other_splits_and_refuses_bad_input(tmp_path):
    script = Path(__file__).resolve().parents[1] / "scripts" / "make_demo_test_set.py"

    def run(*args):
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)

    out = tmp_path / "val.jsonl"
    assert run("--split", "validation", "--size", "5", "--seed", "3", "--out", str(out)).returncode == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    wanted = generate_split("validation", 5, 3)
    assert [r["question"] for r in records] == [p.question for p in wanted]
    assert all(r["answer"].endswith(f"#### {p.answer}") for r, p in zip(records, wanted))
    # bad input: one line, exit 2, nothing written; the shipped file is never overwritten by other problems
    before = TEST_PATH.read_bytes()
    for args in (("--split", "dev", "--out", str(tmp_path / "x.jsonl")), ("--split", "validation"),
                 ("--split", "validation", "--out", str(TEST_PATH)), ("--size", "0", "--out", str(tmp_path / "x.jsonl"))):
        done = run(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    assert not (tmp_path / "x.jsonl").exists() and TEST_PATH.read_bytes() == before
