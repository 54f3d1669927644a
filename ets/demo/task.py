"""The demo task: shopping word problems with exact integer answers.

A problem lists two or three items, each bought `count` times at a unit `price`, and asks
for one of four things about the bill:

    total    the whole bill                       sum of count * price
    change   change from a budget                 budget - total
    coupon   the bill after a coupon              total - coupon
    share    each friend's share of the bill      total / friends   (always exact)

Its computation is a small DAG: one product per item, an n-ary sum over the products, and
(except for `total`) one last operation. The products are independent and the sum can be
formed in any pairing, so a problem has many valid solution orders (see ets/demo/solutions.py);
multi-digit products, sums and borrows are where a small model slips (see ets/demo/checker.py).

The question text is made from a few sentence templates and `parse_question` inverts it,
so the checker and the verifier reward work from the question string alone.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from itertools import combinations

KINDS = ("total", "change", "coupon", "share")

NAMES = (
    ("Ann", "she"), ("Ben", "he"), ("Cara", "she"), ("Dan", "he"), ("Eva", "she"),
    ("Finn", "he"), ("Gina", "she"), ("Hugo", "he"), ("Ivy", "she"), ("Jack", "he"),
    ("Kate", "she"), ("Leo", "he"), ("Mia", "she"), ("Noah", "he"), ("Olga", "she"),
    ("Paul", "he"),
)
# Plural nouns; step labels name them (partial sums) or restate the item with them.
NOUNS = (
    "apples", "books", "candles", "dolls", "eggs", "flags", "gloves", "hats", "jars",
    "kites", "lamps", "mugs", "notebooks", "oranges", "pens", "plates", "rugs", "shirts",
    "socks", "towels", "vases", "watches", "cups", "bells",
)

COUNT_RANGE = (2, 9)     # one digit: the products are 2-digit x 1-digit
PRICE_RANGE = (12, 98)
COUPON_RANGE = (10, 95)
FRIENDS_RANGE = (2, 6)

_OPENERS = ("{Name} buys {items}.", "At the market, {name} buys {items}.", "{Name} orders {items}.")
_ASKS = {
    "total": ("How much does {pron} spend in total?", "How many dollars does {pron} spend altogether?"),
    "change": ("{Pron} pays with {extra} dollars. How much change does {pron} get?",),
    "coupon": ("{Pron} has a coupon for {extra} dollars off the total. How much does {pron} pay?",),
    "share": ("The cost is split equally among {extra} friends. How much does each friend pay?",),
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


@dataclass(frozen=True)
class Problem:
    items: tuple[Item, ...]
    kind: str
    extra: int | None            # budget (change), coupon value (coupon), friends (share)
    name: str = "Ann"
    pronoun: str = "she"
    question: str = field(default="", compare=False)

    @property
    def total(self) -> int:
        return sum(it.cost for it in self.items)

    @property
    def answer(self) -> int:
        t = self.total
        return {"total": t, "change": (self.extra or 0) - t, "coupon": t - (self.extra or 0),
                "share": t // (self.extra or 1)}[self.kind]

    def canonical(self) -> str:
        """The arithmetic of the problem, without names or wording: the key of the splits."""
        pairs = ",".join(f"{it.count}x{it.price}" for it in sorted(self.items, key=lambda i: (i.count, i.price)))
        return f"{self.kind}|{self.extra}|{pairs}"

    def subset_sums(self) -> dict[int, frozenset[int]]:
        """value -> the set of item indices whose costs sum to it (values are distinct)."""
        out = {}
        for r in range(1, len(self.items) + 1):
            for idx in combinations(range(len(self.items)), r):
                out[sum(self.items[i].cost for i in idx)] = frozenset(idx)
        return out


def _values_distinct(p: Problem) -> bool:
    """Every value a step can produce or use is unique, so the checker can match by value."""
    sums = [sum(p.items[i].cost for i in idx)
            for r in range(1, len(p.items) + 1) for idx in combinations(range(len(p.items)), r)]
    given = {p.extra} if p.extra is not None else set()
    values = sums + [p.answer] if p.kind != "total" else sums
    return len(set(values)) == len(values) and not (set(values) & given) and p.answer > 0


def generate_problem(rng: random.Random) -> Problem:
    """One random problem; the same `rng` state always gives the same problem."""
    while True:
        k = rng.choice((2, 3))
        nouns = rng.sample(NOUNS, k)
        items = tuple(Item(n, rng.randint(*COUNT_RANGE), rng.randint(*PRICE_RANGE)) for n in nouns)
        kind = rng.choice(KINDS)
        total = sum(it.cost for it in items)
        extra = None
        if kind == "change":
            extra = (total // 50 + 1 + rng.randint(0, 6)) * 50
        elif kind == "coupon":
            extra = rng.randint(*COUPON_RANGE)
        elif kind == "share":
            extra = rng.randint(*FRIENDS_RANGE)
            if total % extra:
                continue
        name, pron = rng.choice(NAMES)
        p = Problem(items, kind, extra, name, pron)
        if _values_distinct(p):
            return render(p, rng)


def render(p: Problem, rng: random.Random) -> Problem:
    """`p` with its question text, wording chosen by `rng`."""
    parts = [f"{it.count} {it.noun} at {it.price} dollars each" for it in p.items]
    items = " and ".join(parts) if len(parts) == 2 else f"{parts[0]}, {parts[1]} and {parts[2]}"
    fmt = dict(Name=p.name, name=p.name, items=items, pron=p.pronoun, Pron=p.pronoun.capitalize(),
               extra=p.extra)
    text = rng.choice(_OPENERS).format(**fmt) + " " + rng.choice(_ASKS[p.kind]).format(**fmt)
    return Problem(p.items, p.kind, p.extra, p.name, p.pronoun, text)


_ITEM_RE = re.compile(r"(\d+) ([a-z]+) at (\d+) dollars each")
_NAME_RE = re.compile(r"(?:At the market, )?([A-Z][a-z]+) (?:buys|orders) ")
_EXTRA_RES = {
    "change": re.compile(r"pays with (\d+) dollars"),
    "coupon": re.compile(r"coupon for (\d+) dollars off"),
    "share": re.compile(r"split equally among (\d+) friends"),
}


def parse_question(text: str) -> Problem:
    """Invert `render`: the problem a question string states (it may sit inside a prompt)."""
    items = tuple(Item(n, int(c), int(p)) for c, n, p in _ITEM_RE.findall(text))
    if len(items) < 2:
        raise DemoParseError(f"not a demo question (no item list found): {text[:80]!r}")
    kind, extra = "total", None
    for k, pattern in _EXTRA_RES.items():
        m = pattern.search(text)
        if m:
            kind, extra = k, int(m.group(1))
            break
    if kind == "total" and not re.search(r"in total|altogether", text):
        raise DemoParseError(f"not a demo question (no known ask): {text[:80]!r}")
    m = _NAME_RE.search(text)
    name = m.group(1) if m else "Ann"
    pronoun = _PRONOUNS.get(name) or ("he" if re.search(r"\b[Hh]e\b", text) else "she")
    return Problem(items, kind, extra, name, pronoun, text)
