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
from typing import Sequence

from ets.demo.checker import check_steps, item_products, parse_answer, parse_equation
from ets.demo.solutions import ANSWER_PREFIX, reference_solution
from ets.demo.task import Problem


def _nudge(number: str, rng: random.Random) -> str:
    """A near miss: one digit off by one, or two neighbouring digits swapped (never a
    leading zero, never 0, never the number itself)."""
    while True:
        digits = list(number)
        j = rng.randrange(len(digits))
        if rng.random() < 0.5 and j + 1 < len(digits) and digits[j] != digits[j + 1]:
            digits[j], digits[j + 1] = digits[j + 1], digits[j]
        else:
            digits[j] = str((int(digits[j]) + rng.choice((1, 9))) % 10)
        out = "".join(digits)
        if out != number and out[0] != "0":
            return out


def _apply(op: str, a: int, b: int) -> int:
    return a * b if op == "*" else a + b if op == "+" else a - b if op == "-" else a // b


def _equation_text(label: str, a: int, op: str, b: int, c: int) -> str:
    return " ".join(filter(None, (label, f"{a} {op} {b} = {c}")))


def _item_of(p: Problem, a: int, b: int):
    """(item, is `a` its count) of a product step, or None if it is no item's product."""
    sets = item_products(p).get(frozenset((a, b)))
    if not sets:
        return None
    it = p.items[min(i for cells in sets for i, _ in cells)]
    return it, a == it.count


def _misread_part(part: int, rng: random.Random) -> tuple[int, int | None, int | None]:
    """`part` misread: one nonzero digit off by one (7 * 40 -> 7 * 50), or moved a place
    (7 * 40 -> 7 * 400 or 7 * 4). Returns (new part, place of the changed digit, its new
    value), the last two None for a moved place."""
    if rng.random() < 0.35:
        return (part * 10 if part < 100 or part % 10 else part // 10), None, None
    digits = str(part)
    k = rng.choice([k for k, d in enumerate(digits) if d != "0"])
    d = int(digits[k]) + rng.choice((-1, 1))
    d = 2 if d == 0 else 8 if d == 10 else d
    return int(digits[:k] + str(d) + digits[k + 1:]), 3 - len(digits) + k, d


def _places(it, part: int) -> tuple[int, ...] | None:
    """The places of `it`'s price that sum to `part` (7 * 46: tens and ones), or None."""
    n = len(it.parts)
    for mask in range(1, 2 ** n):
        js = tuple(j for j in range(n) if mask >> j & 1)
        if sum(it.parts[j] for j in js) == part:
            return js
    return None


def _spoil_product(p: Problem, eq, rng: random.Random) -> str | None:
    """A wrong product step of the kinds the demo policy writes, in about the shares it
    writes them (operand errors of its samples on 40 test problems: 55% pair a count with
    another item's part, 19% a count no item has, the rest a digit or a place misread):
    another item's part at the same places, a count no item has, another item's count, or
    a digit or a place of the price misread; the restatement of the item in the label
    changed alike (an item the question does not have) or not; the product of what it
    multiplies, or the right item's product kept (an operand slip). None if `eq` is no
    item's product."""
    found = _item_of(p, eq.a, eq.b)
    if found is None:
        return None
    it, count_first = found
    count, part = (eq.a, eq.b) if count_first else (eq.b, eq.a)
    others = [o for o in p.items if o is not it]
    counts = {o.count for o in p.items}
    places = _places(it, part)
    place = digit = None
    r = rng.random()
    if others and places is not None and r < 0.4:         # another item's part, same places
        part = sum(rng.choice(others).parts[j] for j in places)
    elif r < 0.6 and len(counts) < 8:                       # a count no item has
        count = rng.choice([c for c in range(2, 10) if c not in counts])
    elif r < 0.75 and others:                               # another item's count
        count = rng.choice(others).count
    else:
        part, place, digit = _misread_part(part, rng)
    said = f"{it.count} {it.noun} at {it.price} dollars"
    label = eq.label
    if said in label and rng.random() < 0.4 and (count != it.count or place is not None):
        price = list(str(it.price))                  # the restatement misread the same way
        if place is not None:
            price[place] = str(digit)
        label = label.replace(said, f"{count} {it.noun} at {''.join(price)} dollars")
    a, b = (count, part) if count_first else (part, count)
    return _equation_text(label, a, "*", b, a * b if rng.random() < 0.75 else eq.c)


def spoil(p: Problem, step: str, rng: random.Random, before: Sequence[str] = ()) -> str:
    """One wrong version of a reference step that follows the steps `before`, of the kinds
    the policy makes: a product of the wrong numbers (`_spoil_product`), a sum or a last
    operation on a value never computed (an operand a digit off, right arithmetic), or a
    result a digit off (a slip in a product, a carry or a borrow; on the answer step, a
    wrong answer). Drawn again until the checker rejects it after `before`."""
    eq = parse_equation(step)
    while True:
        r = rng.random()
        bad = None
        if eq is not None and eq.op == "*" and r < 0.6:
            bad = _spoil_product(p, eq, rng)
        elif eq is not None and eq.op in "+-/" and r < 0.35:
            if rng.random() < 0.5:
                a, b = int(_nudge(str(eq.a), rng)), eq.b
            else:
                a, b = eq.a, int(_nudge(str(eq.b), rng))
            if eq.op != "/" or (b != 0 and a % b == 0):
                bad = _equation_text(eq.label, a, eq.op, b, _apply(eq.op, a, b))
        if bad is None:
            head, sep, c = step.rpartition(" ")
            bad = head + sep + _nudge(c, rng)
        if not check_steps(p, [*before, bad])[-1]:
            return bad


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
        spoiled = carry_forward(steps, i, spoil(p, steps[i], rng, steps[:i]))
        out.append((p.question, steps, check_steps(p, steps)))
        out.append((p.question, spoiled, check_steps(p, spoiled)))
    return out
