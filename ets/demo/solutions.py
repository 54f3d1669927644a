"""Reference solutions of demo problems: every valid order, several phrasings.

A solution is a list of steps (one line each, no trailing newline); each step states one
fact `a op b = c` about a named quantity, and the last step is `The answer is: N`.

A solution *order* is a list of moves over the problem's DAG:

    ("mul", i)          the cost of item i            7 pens at 23 dollars: 7 * 23 = 161
    ("add", A, B)       join two disjoint partial sums  Pens and cups: 161 + 152 = 313
                        (A, B: frozensets of item indices; their union becomes available)
    ("final",)          the last operation             Change: 500 - 313 = 187
    ("answer",)         the final-answer step          The answer is: 187

The products can come in any order, and the sum in any pairing, interleaved with the
products, so a 3-item problem has dozens of valid orders (`all_orders` lists them). Each
move has several phrasings and commutative operands come in either order, so siblings in
a search tree differ in wording and in what they compute, not only in numbers.
"""

from __future__ import annotations

import random
from itertools import combinations

from ets.demo.task import Problem

ANSWER_PREFIX = "The answer is: "

# Labels; `{eq}` is the equation "a op b = c". The checker judges the equation, not the
# label (ets/demo/checker.py); the labels vary the wording of siblings.
# An item's step restates the item as the question words it ("5 pens at 46 dollars"): a
# verbatim span a small model copies reliably (an induction-style copy), where naming the
# noun alone left it to bind the noun's count and price by itself, which it learned last.
ITEM_TEMPLATES = ("{item}: {eq}", "The {item} cost {eq}", "Cost of {item}: {eq}")
PARTIAL_TEMPLATES = ("{Nouns}: {eq}", "Subtotal: {eq}")
TOTAL_TEMPLATES = ("Total: {eq}", "In total {pron} spends {eq}", "All together: {eq}")
FINAL_TEMPLATES = {
    "change": ("Change: {eq}", "{Pron} gets back {eq}", "The change is {eq}"),
    "coupon": ("After the coupon: {eq}", "{Pron} pays {eq}", "With the coupon: {eq}"),
    "share": ("Each friend: {eq}", "Each friend pays {eq}", "Per friend: {eq}"),
}

Move = tuple


def next_moves(p: Problem, done: frozenset[int], pool: tuple[frozenset[int], ...], finished: bool) -> list[Move]:
    """Moves allowed after computing items `done`, with partial sums `pool` not yet used."""
    if finished:
        return [("answer",)]
    moves: list[Move] = [("mul", i) for i in range(len(p.items)) if i not in done]
    moves += [("add", a, b) for a, b in combinations(pool, 2)]
    if not moves or (len(pool) == 1 and len(pool[0]) == len(p.items)):
        moves = [("final",)] if p.kind != "total" else [("answer",)]
    return moves


def _apply(move: Move, done, pool):
    if move[0] == "mul":
        return done | {move[1]}, pool + (frozenset([move[1]]),)
    if move[0] == "add":
        rest = tuple(s for s in pool if s not in (move[1], move[2]))
        return done, rest + (move[1] | move[2],)
    return done, pool


def all_orders(p: Problem) -> list[list[Move]]:
    """Every order in which a minimal solution (each value used once) can compute `p`."""
    out: list[list[Move]] = []

    def walk(prefix, done, pool, finished):
        for m in next_moves(p, done, pool, finished):
            if m[0] == "answer":
                out.append(prefix + [m])
                continue
            d, pl = _apply(m, done, pool)
            walk(prefix + [m], d, pl, m[0] == "final")

    walk([], frozenset(), (), False)
    return out


def random_order(p: Problem, rng: random.Random) -> list[Move]:
    order, done, pool, finished = [], frozenset(), (), False
    while True:
        m = rng.choice(next_moves(p, done, pool, finished))
        order.append(m)
        if m[0] == "answer":
            return order
        done, pool = _apply(m, done, pool)
        finished = m[0] == "final"


def _value(p: Problem, part: frozenset[int]) -> int:
    return sum(p.items[i].cost for i in part)


def step_text(p: Problem, move: Move, rng: random.Random | None = None, style: int = 0) -> str:
    """The text of one move. With `rng`, wording and operand order are random; else `style`."""
    pick = (lambda seq: rng.choice(seq)) if rng else (lambda seq: seq[style % len(seq)])
    swap = rng.random() < 0.5 if rng else False
    fmt = dict(pron=p.pronoun, Pron=p.pronoun.capitalize())
    kind = move[0]
    if kind == "answer":
        return f"{ANSWER_PREFIX}{p.answer}"
    if kind == "mul":
        it = p.items[move[1]]
        a, b = (it.price, it.count) if swap else (it.count, it.price)
        eq = f"{a} * {b} = {it.cost}"
        item = f"{it.count} {it.noun} at {it.price} dollars"
        return pick(ITEM_TEMPLATES).format(eq=eq, item=item, **fmt)
    if kind == "add":
        left, right = (move[2], move[1]) if swap else (move[1], move[2])
        eq = f"{_value(p, left)} + {_value(p, right)} = {_value(p, left | right)}"
        if len(left | right) == len(p.items):
            return pick(TOTAL_TEMPLATES).format(eq=eq, **fmt)
        nouns = " and ".join(p.items[i].noun for i in sorted(left | right))
        return pick(PARTIAL_TEMPLATES).format(eq=eq, Nouns=nouns.capitalize(), **fmt)
    # final
    total = p.total
    a, b = {"change": (p.extra, total), "coupon": (total, p.extra), "share": (total, p.extra)}[p.kind]
    op = "/" if p.kind == "share" else "-"
    return pick(FINAL_TEMPLATES[p.kind]).format(eq=f"{a} {op} {b} = {p.answer}", **fmt)


def render_solution(p: Problem, order: list[Move], rng: random.Random | None = None, style: int = 0) -> list[str]:
    return [step_text(p, m, rng, style) for m in order]


def reference_solution(p: Problem, rng: random.Random) -> list[str]:
    """A random valid order in random wording: what the policy is trained on."""
    return render_solution(p, random_order(p, rng), rng)
