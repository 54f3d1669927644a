"""The exact step checker of the demo task.

    check_steps(problem, steps) -> [bool per step]
    judge_steps(problem, steps) -> [verdict per step]: "ok" or the kind of error

A step is one line `<label> a op b = c` (op in + - * /) or the final `The answer is: N`.
Walking the steps in order, the checker keeps the quantities known so far: the value of
every cell set (ets/demo/task.py) a *correct* step computed, and the result of the coupon
when the kind has one. A step is correct iff

  - its equation is arithmetically right (c == a op b, division exact), and
  - it computes a quantity of the problem from what the question gives or is known:
        a * b   an item's count times some places of its price (7 * 40, 7 * 46, 7 * 146;
                either order)
        a + b   two known, disjoint cell sets (either order)
        a - b   budget - total (change), or total - coupon (coupon, coupon_share)
        a / b   total / friends (share), or (total - coupon) / friends (coupon_share)
    where "total" is a known value of the set of all cells.
The label before the equation is free text: the checker judges what a step computes, not
what it calls it. A final-answer step is correct iff N is the answer.

A value a wrong step wrote is *tainted*: never known, so every later step built on it is
wrong too (a later step that does not use it, e.g. another item's part, stays correct).
A value can stand for several cell sets (two items can have equal parts); a step is
correct if any reading of its operands makes it so.

The verdicts, the error categories the PRM's quality is measured on per category
(scripts/demo_quality.py):

    ok           correct
    arithmetic   the equation is false (a slip in a product, a carry, a borrow, a division)
    operand      a true equation on numbers that are not the quantities it needs: a digit
                 or a place misread from the question, another item's count, a set used
                 twice, a last operation before the total is known
    inherited    a true equation (or an answer) built on a value a wrong step wrote
    answer       a final answer that is not the answer, and not built on a wrong value
    format       not a step at all
"""

from __future__ import annotations

import operator
import re
from itertools import combinations
from typing import NamedTuple, Sequence

from ets.demo.task import Problem

VERDICTS = ("ok", "arithmetic", "operand", "inherited", "answer", "format")
ERRORS = VERDICTS[1:]

_STEP_RE = re.compile(r"^(?P<label>.*?)\s*(?P<a>\d+) (?P<op>[-+*/]) (?P<b>\d+) = (?P<c>-?\d+)\.?$")
_ANSWER_RE = re.compile(r"^the answer is:?\s*(?P<n>-?\d+)\.?$", re.IGNORECASE)
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


class Equation(NamedTuple):
    """A step `<label> a op b = c`, parsed."""
    label: str
    a: int
    op: str
    b: int
    c: int


def parse_equation(step: str) -> Equation | None:
    """The equation of a step, or None if `step` is not `<label> a op b = c`."""
    m = _STEP_RE.match(step.strip())
    return Equation(m["label"], int(m["a"]), m["op"], int(m["b"]), int(m["c"])) if m else None


def parse_answer(step: str) -> int | None:
    """N if `step` is a final-answer step `The answer is: N`, else None."""
    m = _ANSWER_RE.match(step.strip())
    return int(m.group("n")) if m else None


def computation(step: str) -> str:
    """What a step computes, without its wording: `a op b = c`, `answer N`, or the step
    itself (a step that is neither)."""
    n, eq = parse_answer(step), parse_equation(step)
    if n is not None:
        return f"answer {n}"
    return f"{eq.a} {eq.op} {eq.b} = {eq.c}" if eq else step.strip()


def arithmetic_ok(a: int, op: str, b: int, c: int) -> bool:
    if op == "/":
        return b != 0 and a % b == 0 and a // b == c
    return _OPS[op](a, b) == c


def item_products(p: Problem) -> dict[frozenset[int], list[frozenset]]:
    """{count, places value} -> the cell sets that product computes, for every item and
    every nonempty set of places of its price."""
    out: dict[frozenset[int], list[frozenset]] = {}
    for i, it in enumerate(p.items):
        places = range(len(it.parts))
        for r in range(1, len(it.parts) + 1):
            for js in combinations(places, r):
                key = frozenset((it.count, sum(it.parts[j] for j in js)))
                out.setdefault(key, []).append(frozenset((i, j) for j in js))
    return out


class _State:
    """What is known while walking one trajectory."""

    def __init__(self, problem: Problem):
        self.p = problem
        self.products = item_products(problem)
        self.known: dict[int, set[frozenset]] = {}    # value -> the cell sets it is
        self.after_coupon: set[int] = set()           # known results of the coupon
        self.tainted: set[int] = set()                # values wrong steps wrote

    def _is_total(self, v: int) -> bool:
        return self.p.cells in self.known.get(v, ())

    def valid(self, a: int, op: str, b: int, c: int) -> bool:
        """Does `a op b` compute a quantity of the problem from what is known? (Records
        the result when it does.)"""
        p = self.p
        if op == "*":
            sets = set(self.products.get(frozenset((a, b)), ()))
        elif op == "+":
            sets = {sa | sb for sa in self.known.get(a, ()) for sb in self.known.get(b, ()) if not sa & sb}
        if op in "*+":
            if sets:
                self.known.setdefault(c, set()).update(sets)
            return bool(sets)
        if op == "-":
            if p.kind == "change":
                return a == p.budget and self._is_total(b)
            if p.kind in ("coupon", "coupon_share") and b == p.coupon and self._is_total(a):
                self.after_coupon.add(c)
                return True
            return False
        if b != p.friends:
            return False
        if p.kind == "share":
            return self._is_total(a)
        return p.kind == "coupon_share" and a in self.after_coupon

    def is_known(self, v: int) -> bool:
        return v in self.known or v in self.after_coupon

    def uses_tainted(self, *values: int) -> bool:
        return any(v in self.tainted and not self.is_known(v) for v in values)


def judge_steps(problem: Problem, steps: Sequence[str]) -> list[str]:
    """One verdict per step (see VERDICTS), given the problem and the steps before it."""
    state = _State(problem)
    out = []
    for raw in steps:
        step = raw.strip()
        n = parse_answer(step)
        if n is not None:
            out.append("ok" if n == problem.answer else "inherited" if state.uses_tainted(n) else "answer")
            continue
        eq = parse_equation(step)
        if eq is None:
            out.append("format")
            continue
        if not arithmetic_ok(eq.a, eq.op, eq.b, eq.c):
            verdict = "arithmetic"
        elif state.valid(eq.a, eq.op, eq.b, eq.c):
            verdict = "ok"
        else:
            verdict = "inherited" if state.uses_tainted(eq.a, eq.b) else "operand"
        if verdict != "ok" and not state.is_known(eq.c):
            state.tainted.add(eq.c)
        out.append(verdict)
    return out


def check_steps(problem: Problem, steps: Sequence[str]) -> list[bool]:
    """One bool per step: is it correct, given the problem and the steps before it."""
    return [v == "ok" for v in judge_steps(problem, steps)]


def is_correct_solution(problem: Problem, steps: Sequence[str]) -> bool:
    """The trajectory ends with a correct final answer (earlier slips do not matter)."""
    return bool(steps) and parse_answer(steps[-1]) == problem.answer
