"""Right, wrong or unknown: a chosen answer graded against a ground truth that a problem
may not have, and accuracy counted over the problems that have one.

A problem given without its answer (a question passed to `ets.search` alone) is graded
None, not False: it is neither right nor wrong. Its result record says `correct: null`,
and every accuracy (the run's summary, `ets eval`, `compare`, `diagnose`, the tables)
counts the problems with a known answer only and says how many it left out.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from ets.answers.grading import is_equivalent


def grade(chosen: str | None, truth: str | None, *, float_rounding: int | None = None) -> bool | None:
    """Whether `chosen` is equivalent to `truth`; None when the truth is unknown. No
    answer against a known truth is wrong."""
    if truth is None:
        return None
    return chosen is not None and is_equivalent(chosen, truth, float_rounding=float_rounding)


class Accuracy(NamedTuple):
    correct: int   # problems graded right
    graded: int    # problems with a known answer
    ungraded: int  # problems without one: not counted

    @property
    def value(self) -> float:
        """correct / graded (0.0 when nothing was graded)."""
        return self.correct / self.graded if self.graded else 0.0

    def note(self) -> str:
        """`; 2 problems without a ground truth not counted`, or "" when every problem had one."""
        if not self.ungraded:
            return ""
        return f"; {self.ungraded} problem{'s' if self.ungraded != 1 else ''} without a ground truth not counted"


def nothing_to_grade(ungraded: int, what: str = "grade") -> str:
    """The message of a command given only problems without a ground truth."""
    return f"no problem has a ground truth ({ungraded} without one): there is nothing to {what}"


def accuracy(outcomes: Iterable[bool | None]) -> Accuracy:
    """The accuracy of graded outcomes (`grade`'s, or records' `correct`), None ones left out."""
    correct = graded = ungraded = 0
    for outcome in outcomes:
        if outcome is None:
            ungraded += 1
        else:
            graded += 1
            correct += bool(outcome)
    return Accuracy(correct, graded, ungraded)
