"""The demo task: shopping bills worked out digit by digit, with exact integer answers.

A problem lists two or three items, each bought `count` times (one digit) at a three-digit
unit `price`, and asks for one of five things about the bill:

    total          the whole bill                         sum of count * price
    change         change from a budget                   budget - total
    coupon         the bill after a coupon                total - coupon
    share          each friend's share of the bill        total / friends     (always exact)
    coupon_share   each friend's share after a coupon     (total - coupon) / friends

A solution works each item's cost out by place value, as a person does on paper: the
count times the hundreds, the tens and the ones of the price (7 * 100, 7 * 40, 7 * 6),
two sums that join the three parts, then the sums over the items and the last operations.
So a short question (two or three items) unfolds into 12-20 steps of about 20 tokens: the
prompt is a small share of a trajectory, as in the paper's math problems, and a slip in an
early step (a wrong part, a wrong carry) is inherited by every step built on it.

Its computation is a DAG over *cells*, one per (item, place): a product step computes a set
of cells of one item, a sum joins two disjoint known sets, the total is the set of all
cells. The parts, the items and the sums can be formed in many orders and pairings (see
ets/demo/solutions.py), each with several wordings, so siblings in a search tree differ in
what they compute, not only in how they say it.

The question text is made from a few sentence templates and `parse_question` inverts it,
so the checker and the verifier reward work from the question string alone.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

KINDS = ("total", "change", "coupon", "share", "coupon_share")

NAMES = (
    ("Ann", "she"), ("Ben", "he"), ("Cara", "she"), ("Dan", "he"), ("Eva", "she"),
    ("Finn", "he"), ("Gina", "she"), ("Hugo", "he"), ("Ivy", "she"), ("Jack", "he"),
    ("Kate", "she"), ("Leo", "he"), ("Mia", "she"), ("Noah", "he"), ("Olga", "she"),
    ("Paul", "he"),
)
# Plural nouns; step labels restate the item with them or name partial sums.
NOUNS = (
    "apples", "books", "candles", "dolls", "eggs", "flags", "gloves", "hats", "jars",
    "kites", "lamps", "mugs", "notebooks", "oranges", "pens", "plates", "rugs", "shirts",
    "socks", "towels", "vases", "watches", "cups", "bells",
)
PLACES = ("hundreds", "tens", "ones")     # place j of a price has the value digit * 10**(2 - j)

COUNT_RANGE = (2, 9)       # one digit: every part is one digit times a digit and zeros
HUNDREDS_RANGE = (1, 7)    # prices 111-799 with no zero digit: every item has three parts
COUPON_RANGE = (20, 400)
FRIENDS_RANGE = (2, 5)

_OPENERS = ("{Name} buys {items}.", "At the market, {name} buys {items}.", "{Name} orders {items}.")
_ASKS = {
    "total": ("How much does {pron} spend in total?", "How many dollars does {pron} spend altogether?"),
    "change": ("{Pron} pays with {budget} dollars. How much change does {pron} get?",),
    "coupon": ("{Pron} has a coupon for {coupon} dollars off. How much does {pron} pay?",),
    "share": ("{friends} friends split the cost equally. How much does each friend pay?",),
    "coupon_share": ("{Pron} has a coupon for {coupon} dollars off, and {friends} friends split the rest "
                     "equally. How much does each pay?",),
}

_PRONOUNS = dict(NAMES)


class DemoParseError(ValueError):
    """A question string is not a demo problem."""


@dataclass(frozen=True)
class Item:
    noun: str
    count: int
    price: int

    @property
    def cost(self) -> int:
        return self.count * self.price

    @property
    def parts(self) -> tuple[int, ...]:
        """The price by place value: 146 -> (100, 40, 6)."""
        return tuple(int(d) * 10 ** (len(str(self.price)) - 1 - j) for j, d in enumerate(str(self.price)))


Cell = tuple[int, int]        # (item index, place index)


@dataclass(frozen=True)
class Problem:
    items: tuple[Item, ...]
    kind: str
    budget: int | None = None     # change
    coupon: int | None = None     # coupon, coupon_share
    friends: int | None = None    # share, coupon_share
    name: str = "Ann"
    pronoun: str = "she"
    question: str = field(default="", compare=False)

    @property
    def total(self) -> int:
        return sum(it.cost for it in self.items)

    @property
    def after_coupon(self) -> int | None:
        return self.total - self.coupon if self.coupon is not None else None

    @property
    def answer(self) -> int:
        t = self.total
        return {"total": t, "change": (self.budget or 0) - t, "coupon": t - (self.coupon or 0),
                "share": t // (self.friends or 1),
                "coupon_share": (t - (self.coupon or 0)) // (self.friends or 1)}[self.kind]

    @property
    def cells(self) -> frozenset[Cell]:
        return frozenset((i, j) for i, it in enumerate(self.items) for j in range(len(it.parts)))

    def item_cells(self, i: int) -> frozenset[Cell]:
        return frozenset((i, j) for j in range(len(self.items[i].parts)))

    def value(self, cells: frozenset[Cell]) -> int:
        """What a set of cells costs: the sum of count * part over them."""
        return sum(self.items[i].count * self.items[i].parts[j] for i, j in cells)

    def canonical(self) -> str:
        """The arithmetic of the problem, without names or wording: the key of the splits."""
        pairs = ",".join(f"{it.count}x{it.price}" for it in sorted(self.items, key=lambda i: (i.count, i.price)))
        return f"{self.kind}|{self.budget}|{self.coupon}|{self.friends}|{pairs}"


def _price(rng: random.Random) -> int:
    return 100 * rng.randint(*HUNDREDS_RANGE) + 10 * rng.randint(1, 9) + rng.randint(1, 9)


def generate_problem(rng: random.Random) -> Problem:
    """One random problem; the same `rng` state always gives the same problem."""
    while True:
        k = 2 if rng.random() < 0.6 else 3
        nouns = rng.sample(NOUNS, k)
        items = tuple(Item(n, rng.randint(*COUNT_RANGE), _price(rng)) for n in nouns)
        kind = rng.choice(KINDS)
        total = sum(it.cost for it in items)
        budget = coupon = friends = None
        if kind == "change":
            budget = (total // 1000 + 1 + rng.randint(0, 3)) * 1000
        if kind in ("coupon", "coupon_share"):
            coupon = rng.randint(*COUPON_RANGE)
        if kind in ("share", "coupon_share"):
            friends = rng.randint(*FRIENDS_RANGE)
            if (total - (coupon or 0)) % friends:
                continue
        name, pron = rng.choice(NAMES)
        p = Problem(items, kind, budget, coupon, friends, name, pron)
        if p.answer > 0:
            return render(p, rng)


def render(p: Problem, rng: random.Random) -> Problem:
    """`p` with its question text, wording chosen by `rng`."""
    parts = [f"{it.count} {it.noun} at {it.price} dollars each" for it in p.items]
    items = " and ".join(parts) if len(parts) == 2 else f"{parts[0]}, {parts[1]} and {parts[2]}"
    fmt = dict(Name=p.name, name=p.name, items=items, pron=p.pronoun, Pron=p.pronoun.capitalize(),
               budget=p.budget, coupon=p.coupon, friends=p.friends)
    text = rng.choice(_OPENERS).format(**fmt) + " " + rng.choice(_ASKS[p.kind]).format(**fmt)
    return Problem(p.items, p.kind, p.budget, p.coupon, p.friends, p.name, p.pronoun, text)


_ITEM_RE = re.compile(r"(\d+) ([a-z]+) at (\d+) dollars each")
_NAME_RE = re.compile(r"(?:At the market, )?([A-Z][a-z]+) (?:buys|orders) ")
_BUDGET_RE = re.compile(r"pays with (\d+) dollars")
_COUPON_RE = re.compile(r"coupon for (\d+) dollars off")
_FRIENDS_RE = re.compile(r"(\d+) friends split")


def parse_question(text: str) -> Problem:
    """Invert `render`: the problem a question string states (it may sit inside a prompt)."""
    items = tuple(Item(n, int(c), int(p)) for c, n, p in _ITEM_RE.findall(text))
    if len(items) < 2:
        raise DemoParseError(f"not a demo question (no item list found): {text[:80]!r}")

    def number(pattern):
        m = pattern.search(text)
        return int(m.group(1)) if m else None

    budget, coupon, friends = number(_BUDGET_RE), number(_COUPON_RE), number(_FRIENDS_RE)
    if budget is not None:
        kind = "change"
    elif coupon is not None:
        kind = "coupon_share" if friends is not None else "coupon"
    elif friends is not None:
        kind = "share"
    elif re.search(r"in total|altogether", text):
        kind = "total"
    else:
        raise DemoParseError(f"not a demo question (no known ask): {text[:80]!r}")
    m = _NAME_RE.search(text)
    name = m.group(1) if m else "Ann"
    pronoun = _PRONOUNS.get(name) or ("he" if re.search(r"\b[Hh]e\b", text) else "she")
    return Problem(items, kind, budget, coupon, friends, name, pronoun, text)
