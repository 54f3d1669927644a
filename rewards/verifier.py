"""`verifier`: the exact process reward of the demo task (no model).

Each step scores 1.0 if the demo step checker accepts it and 0.0 otherwise (see
ets/demo/checker.py: right arithmetic on quantities known so far, named after the quantity
it computes; a final `The answer is: N` step is right iff N is the answer). The problem is
recovered from the question text itself, so it works on any demo question, shipped or
freshly generated; a question that is not a demo question raises `RewardError`.

It is the oracle the trained demo PRM approximates: searching with it gives the ceiling
that a perfect PRM would reach.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from ets.demo.checker import check_steps
from ets.demo.task import DemoParseError, Problem, parse_question
from rewards.base import ProcessRewardModel, RewardError


@lru_cache(maxsize=4096)
def _problem(question: str) -> Problem:
    return parse_question(question)


class Verifier(ProcessRewardModel):
    """Exact step scores for demo questions: 1.0 (correct) or 0.0 (wrong)."""

    name = "verifier"

    def __init__(self, correct: float = 1.0, wrong: float = 0.0):
        for key, v in (("correct", correct), ("wrong", wrong)):
            if not 0.0 <= float(v) <= 1.0:
                raise RewardError(f"reward 'verifier': {key}={v!r} must be in [0, 1]")
        self.correct, self.wrong = float(correct), float(wrong)

    def score(
        self,
        questions: Sequence[str],
        trajectories: Sequence[Sequence[Sequence[str]]],
    ) -> list[list[list[float]]]:
        out = []
        for question, trajs in zip(questions, trajectories):
            try:
                problem = _problem(question)
            except DemoParseError as exc:
                raise RewardError(f"reward 'verifier' scores demo questions only: {exc}") from exc
            out.append([[self.correct if ok else self.wrong for ok in check_steps(problem, list(steps))]
                        for steps in trajs])
        return out
