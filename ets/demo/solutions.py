"""Reference solutions of demo problems: many valid orders, several phrasings.

A solution is a list of steps (one line each, no trailing newline); each step states one
fact `a op b = c` about a named quantity, and the last step is `The answer is: N`.

A solution *order* is a list of moves over the problem's cells (ets/demo/task.py):

    ("mul", i, places)   count of item i times some places of its price
                         "7 vases at 146 dollars, the tens: 7 * 40 = 280"
    ("add", A, B)        join two disjoint known cell sets (their union becomes known)
                         "Vases, hundreds and tens: 700 + 280 = 980"
                         "7 vases at 146 dollars: 980 + 42 = 1022"
                         "Total: 1022 + 2345 = 3367"
    ("change",) / ("coupon",) / ("share",)     the last operations, in the kind's order
    ("answer",)          "The answer is: 187"

The reference orders (`next_moves`) work one item at a time: its three parts in any order,
joined in any pairing (as soon as two are known, or after the third), the items in any
order, and the item costs summed in any pairing as soon as two are complete. A 2-item
problem has 1,152 such orders, a 3-item one hundreds of thousands; the checker accepts more
(any product of a count with places of its price, any sum of disjoint known cell sets).
Each move has several phrasings and commutative operands come in either order.
"""

from __future__ import annotations

import random
from itertools import combinations
from typing import Iterator

from ets.demo.task import PLACES, Problem

ANSWER_PREFIX = "The answer is: "

FINALS = {"total": (), "change": ("change",), "coupon": ("coupon",), "share": ("share",),
          "coupon_share": ("coupon", "share")}

# Labels; `{eq}` is the equation "a op b = c". The checker judges the equation, not the
# label (ets/demo/checker.py); the labels vary the wording of siblings. An item's steps
# restate the item as the question words it ("7 vases at 146 dollars"): a verbatim span a
# small model copies reliably, so it binds the count and the price digits to the right item.
PART_TEMPLATES = ("{item}, the {places}: {eq}", "The {places} of {item}: {eq}", "{Noun}, {places}: {eq}")
ITEM_TEMPLATES = ("{item}: {eq}", "The {item} cost {eq}", "Cost of {item}: {eq}")
ITEM_PARTIAL_TEMPLATES = ("{Noun}, {places}: {eq}", "{Noun} so far: {eq}")
PARTIAL_TEMPLATES = ("{Nouns}: {eq}", "Subtotal: {eq}")
TOTAL_TEMPLATES = ("Total: {eq}", "In total {pron} spends {eq}", "All together: {eq}")
FINAL_TEMPLATES = {
    "change": ("Change: {eq}", "{Pron} gets back {eq}", "The change is {eq}"),
    "coupon": ("After the coupon: {eq}", "{Pron} pays {eq}", "With the coupon: {eq}"),
    "share": ("Each friend: {eq}", "Each friend pays {eq}", "Per friend: {eq}"),
}

Move = tuple
Cells = frozenset


class _State:
    """Where a reference order stands: the cell sets known and not yet used, and the
    last operations done."""

    __slots__ = ("pool", "touched", "finals")

    def __init__(self, pool=(), touched=frozenset(), finals=()):
        self.pool: tuple[Cells, ...] = pool
        self.touched: frozenset[int] = touched      # items with a part computed
        self.finals: tuple[str, ...] = finals

    def apply(self, p: Problem, move: Move) -> "_State":
        if move[0] == "mul":
            cells = frozenset((move[1], j) for j in move[2])
            return _State(self.pool + (cells,), self.touched | {move[1]}, self.finals)
        if move[0] == "add":
            rest = tuple(s for s in self.pool if s not in (move[1], move[2]))
            return _State(rest + (move[1] | move[2],), self.touched, self.finals)
        return _State(self.pool, self.touched, self.finals + (move[0],))


def _items_of(cells: Cells) -> set[int]:
    return {i for i, _ in cells}


def next_moves(p: Problem, state: _State | None = None) -> list[Move]:
    """The reference moves allowed in `state` (the start when None)."""
    state = state or _State()
    if state.finals and state.finals[-1] == "answer":
        return []
    complete = [s for s in state.pool if all(p.item_cells(i) <= s for i in _items_of(s))]
    open_items = {i for s in state.pool if s not in complete for i in _items_of(s)}
    if open_items:                                   # finish the item in hand first
        (i,) = open_items
        entries = [s for s in state.pool if _items_of(s) == {i}]
        done = {j for s in entries for _, j in s}
        moves: list[Move] = [("mul", i, frozenset([j])) for j in range(len(p.items[i].parts)) if j not in done]
        return moves + [("add", a, b) for a, b in combinations(entries, 2)]
    moves = [("add", a, b) for a, b in combinations(complete, 2)]
    fresh = [i for i in range(len(p.items)) if i not in state.touched]
    moves += [("mul", i, frozenset([j])) for i in fresh for j in range(len(p.items[i].parts))]
    if moves:
        return moves
    todo = FINALS[p.kind][len(state.finals):]
    return [(todo[0],)] if todo else [("answer",)]


def iter_orders(p: Problem) -> Iterator[list[Move]]:
    """Every reference order of `p` (1,152 for two items; far more for three)."""

    def walk(prefix, state):
        for m in next_moves(p, state):
            if m[0] == "answer":
                yield prefix + [m]
            else:
                yield from walk(prefix + [m], state.apply(p, m))

    yield from walk([], _State())


def random_order(p: Problem, rng: random.Random) -> list[Move]:
    order, state = [], _State()
    while True:
        m = rng.choice(next_moves(p, state))
        order.append(m)
        if m[0] == "answer":
            return order
        state = state.apply(p, m)


def _places(js) -> str:
    names = [PLACES[j] for j in sorted(js)]
    return " and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " and " + names[-1]


def step_text(p: Problem, move: Move, rng: random.Random | None = None, style: int = 0) -> str:
    """The text of one move. With `rng`, wording and operand order are random; else `style`."""
    pick = (lambda seq: rng.choice(seq)) if rng else (lambda seq: seq[style % len(seq)])
    swap = rng.random() < 0.5 if rng else False
    fmt = dict(pron=p.pronoun, Pron=p.pronoun.capitalize())
    kind = move[0]
    if kind == "answer":
        return f"{ANSWER_PREFIX}{p.answer}"
    if kind == "mul":
        i, js = move[1], move[2]
        it = p.items[i]
        part = sum(it.parts[j] for j in js)
        a, b = (part, it.count) if swap else (it.count, part)
        eq = f"{a} * {b} = {it.count * part}"
        item = f"{it.count} {it.noun} at {it.price} dollars"
        if len(js) == len(it.parts):
            return pick(ITEM_TEMPLATES).format(eq=eq, item=item, **fmt)
        return pick(PART_TEMPLATES).format(eq=eq, item=item, places=_places(js), Noun=it.noun.capitalize(), **fmt)
    if kind == "add":
        left, right = (move[2], move[1]) if swap else (move[1], move[2])
        union = left | right
        eq = f"{p.value(left)} + {p.value(right)} = {p.value(union)}"
        items = sorted(_items_of(union))
        if len(items) == 1:
            it = p.items[items[0]]
            if union == p.item_cells(items[0]):
                item = f"{it.count} {it.noun} at {it.price} dollars"
                return pick(ITEM_TEMPLATES).format(eq=eq, item=item, **fmt)
            return pick(ITEM_PARTIAL_TEMPLATES).format(eq=eq, Noun=it.noun.capitalize(),
                                                       places=_places(j for _, j in union), **fmt)
        if union == p.cells:
            return pick(TOTAL_TEMPLATES).format(eq=eq, **fmt)
        nouns = " and ".join(p.items[i].noun for i in items)
        return pick(PARTIAL_TEMPLATES).format(eq=eq, Nouns=nouns.capitalize(), **fmt)
    total = p.total
    if kind == "change":
        eq = f"{p.budget} - {total} = {p.budget - total}"
    elif kind == "coupon":
        eq = f"{total} - {p.coupon} = {p.after_coupon}"
    else:                                            # share: of the total, or of what the coupon left
        base = p.after_coupon if p.kind == "coupon_share" else total
        eq = f"{base} / {p.friends} = {base // p.friends}"
    return pick(FINAL_TEMPLATES[kind]).format(eq=eq, **fmt)


def render_solution(p: Problem, order: list[Move], rng: random.Random | None = None, style: int = 0) -> list[str]:
    return [step_text(p, m, rng, style) for m in order]


def reference_solution(p: Problem, rng: random.Random) -> list[str]:
    """A random valid order in random wording: what the policy is trained on."""
    return render_solution(p, random_order(p, rng), rng)
