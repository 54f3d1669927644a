"""The exact step checker of the demo task.

    check_steps(problem, steps) -> [bool per step]

A step is one line `<label> a op b = c` (op in + - * /) or the final `The answer is: N`.
Walking the steps in order, the checker keeps the quantities known so far: the numbers
the question gives, and the value of every sub-result a *correct* step computed. A step
is correct iff

  - its equation is arithmetically right (c == a op b, division exact), and
  - it computes a quantity of the problem from quantities known so far:
        a * b   the cost of an item (its count and price, either order)
        a + b   two known, disjoint partial sums of the item costs (either order)
        a - b   budget - total (change) or total - coupon (coupon), total known
        a / b   total / friends (share), total known
The label before the equation is free text: the checker judges what a step computes, not
what it calls it. (It once also rejected labels that named the wrong item. The demo
policy learns to bind nouns to numbers long after it computes right, so those labels
marked right arithmetic wrong and became most of what the PRM had to learn.)
A final-answer step is correct iff N is the answer. A value a wrong step produced is never
known, so a mistake also makes every later step that builds on it wrong (a later step that
does not use it, e.g. another item's cost, stays correct).
Because every sub-result of a demo problem has a distinct value (ets/demo/task.py), a
number in a step identifies the quantity it stands for.
"""

from __future__ import annotations

import operator
import re
from typing import NamedTuple, Sequence

from ets.demo.task import Problem

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


def _arith_ok(a: int, op: str, b: int, c: int) -> bool:
    if op == "/":
        return b != 0 and a % b == 0 and a // b == c
    return _OPS[op](a, b) == c


class _State:
    """Quantities known so far while walking one trajectory."""

    def __init__(self, problem: Problem):
        self.p = problem
        self.by_value = problem.subset_sums()       # value -> item-index set (distinct values)
        self.known: set[frozenset[int]] = set()     # partial sums computed by correct steps
        self.full = frozenset(range(len(problem.items)))

    def step(self, a: int, op: str, b: int) -> bool:
        p = self.p
        if op == "*":
            for i, it in enumerate(p.items):
                if sorted((a, b)) == sorted((it.count, it.price)):
                    self.known.add(frozenset([i]))
                    return True
            return False
        if op == "+":
            sa, sb = self.by_value.get(a), self.by_value.get(b)
            if sa is None or sb is None or sa & sb or sa not in self.known or sb not in self.known:
                return False
            self.known.add(sa | sb)
            return True
        if self.full not in self.known or p.kind == "total":
            return False
        expected = {"change": (p.extra, "-", p.total), "coupon": (p.total, "-", p.extra),
                    "share": (p.total, "/", p.extra)}[p.kind]
        return (a, op, b) == expected


def check_steps(problem: Problem, steps: Sequence[str]) -> list[bool]:
    """One bool per step: is it correct, given the problem and the steps before it."""
    state = _State(problem)
    out = []
    for raw in steps:
        step = raw.strip()
        n = parse_answer(step)
        if n is not None:
            out.append(n == problem.answer)
            continue
        eq = parse_equation(step)
        out.append(eq is not None and _arith_ok(eq.a, eq.op, eq.b, eq.c) and state.step(eq.a, eq.op, eq.b))
    return out


def is_correct_solution(problem: Problem, steps: Sequence[str]) -> bool:
    """The trajectory ends with a correct final answer (earlier slips do not matter)."""
    return bool(steps) and parse_answer(steps[-1]) == problem.answer
