"""Wrong steps for training the demo PRM: the ways the demo policy goes wrong.

    spoil(problem, step, rng)          one wrong version of a reference step
    carry_forward(steps, i, bad)       the solution with step i replaced by `bad` and the
                                       later steps built on the mistake
    spoiled_twins(problems, rng)       each problem's reference solution twice, clean and
                                       spoiled, labelled by the checker

Used by scripts/train_demo_models.py. Every label comes from the checker, never from the
kind of spoil, so a spoil that happens to be right is labelled right.
"""

from __future__ import annotations

import random

from ets.demo.checker import check_steps, parse_answer, parse_equation
from ets.demo.solutions import ANSWER_PREFIX, reference_solution
from ets.demo.task import Problem


def _nudge(number: str, rng: random.Random) -> str:
    """A near miss: one digit off by one, or two neighbouring digits swapped (never a
    leading zero, never the number itself)."""
    while True:
        digits = list(number)
        j = rng.randrange(len(digits))
        if rng.random() < 0.5 and j + 1 < len(digits) and digits[j] != digits[j + 1]:
            digits[j], digits[j + 1] = digits[j + 1], digits[j]
        else:
            digits[j] = str((int(digits[j]) + rng.choice((1, 9))) % 10)
        out = "".join(digits)
        if out != number and (len(out) == 1 or out[0] != "0"):
            return out


def _misbind(p, eq, rng: random.Random) -> tuple[int, int] | None:
    """Operands of a product whose count or price (not both) is taken from another item,
    and which is no item's product; None if the problem has no such pair."""
    count_first = eq.a < eq.b                     # counts are single digits, prices are not
    count, price = (eq.a, eq.b) if count_first else (eq.b, eq.a)
    items = {(it.count, it.price) for it in p.items}
    pairs = sorted(({(it.count, price) for it in p.items} | {(count, it.price) for it in p.items}) - items)
    if not pairs:
        return None
    count, price = rng.choice(pairs)
    return (count, price) if count_first else (price, count)


def _apply(op: str, a: int, b: int) -> int:
    return a * b if op == "*" else a + b if op == "+" else a - b if op == "-" else a // b


def _equation_text(label: str, a: int, op: str, b: int, c: int) -> str:
    return " ".join(filter(None, (label, f"{a} {op} {b} = {c}")))


def _spoil_product(p, eq, rng: random.Random) -> str | None:
    """A wrong product step, of the kinds the demo policy writes (it restates the item,
    then multiplies): its count or price taken from another item, either
    - in the operands only (the product of the operands), or
    - in the restatement and the operands alike (an item the question does not have), or
    - in the operands only, with the result of the right item (an operand slip);
    None if the problem has no such pair."""
    ab = _misbind(p, eq, rng)
    if ab is None:
        return None
    a, b = ab
    r = rng.random()
    if r < 1 / 3:
        return _equation_text(eq.label, a, "*", b, a * b)
    if r < 2 / 3:
        count, price = sorted((eq.a, eq.b))
        new_count, new_price = sorted((a, b))
        said = next((f"{count} {it.noun} at {price} dollars" for it in p.items
                     if (it.count, it.price) == (count, price)), None)
        if said is None or said not in eq.label:
            return None
        phantom = said.replace(f"{count} ", f"{new_count} ", 1).replace(f"at {price} ", f"at {new_price} ")
        return _equation_text(eq.label.replace(said, phantom), a, "*", b, a * b)
    return _equation_text(eq.label, a, "*", b, eq.c)


def spoil(p, step: str, rng: random.Random) -> str:
    """One wrong version of a reference step, of the kinds the policy makes: a product
    step gone wrong in what it multiplies (`_spoil_product`), a sum or difference of a
    value never computed (an operand a digit off, right arithmetic), or a result a digit
    off (an arithmetic slip, on any step)."""
    eq = parse_equation(step)
    r = rng.random()
    if eq is not None and eq.op == "*" and r < 0.75 and (bad := _spoil_product(p, eq, rng)) is not None:
        return bad
    if eq is not None and eq.op in "+-" and r < 0.4:
        a, b = (int(_nudge(str(eq.a), rng)), eq.b) if rng.random() < 0.5 else (eq.a, int(_nudge(str(eq.b), rng)))
        return _equation_text(eq.label, a, eq.op, b, _apply(eq.op, a, b))
    head, sep, c = step.rpartition(" ")
    return head + sep + _nudge(c, rng)


def carry_forward(steps: list[str], i: int, bad: str) -> list[str]:
    """The solution with step i replaced by `bad`, and every later step rewritten as a
    policy that believed it would write it: an operand equal to a value step i (or a step
    built on it) got wrong takes the wrong value, and its result is recomputed.
    Why: most bad steps the policy writes are right arithmetic on a value an earlier slip
    spoiled (and the final answer after it); a PRM that sees only the first slip of a
    solution does not learn to carry its doubt forward."""
    old, new = parse_equation(steps[i]), parse_equation(bad)
    wrong = {old.c: new.c} if old and new and old.c != new.c else {}
    out = steps[:i] + [bad]
    for st in steps[i + 1:]:
        n, eq = parse_answer(st), parse_equation(st)
        if n is not None:
            st = f"{ANSWER_PREFIX}{wrong.get(n, n)}"
        elif eq is not None and (eq.a in wrong or eq.b in wrong):
            a, b = wrong.get(eq.a, eq.a), wrong.get(eq.b, eq.b)
            c = _apply(eq.op, a, b)
            wrong[eq.c] = c
            st = _equation_text(eq.label, a, eq.op, b, c)
        out.append(st)
    return out


def spoiled_twins(problems: list[Problem], rng: random.Random) -> list[tuple[str, list[str], list[bool]]]:
    """Each problem's reference solution twice, labelled by the checker: once clean, once
    with one step spoiled (`spoil`) and the steps after it built on the mistake
    (`carry_forward`). The twins differ only from the spoiled step on, so a PRM learns
    what makes that step wrong rather than which problems tend to go wrong."""
    out = []
    for p in problems:
        steps = reference_solution(p, rng)
        i = rng.randrange(len(steps))
        spoiled = carry_forward(steps, i, spoil(p, steps[i], rng))
        out.append((p.question, steps, check_steps(p, steps)))
        out.append((p.question, spoiled, check_steps(p, spoiled)))
    return out
