"""The process-reward-model interface.

A PRM scores reasoning steps. One call scores a whole round of the search: for every
question, the trajectories to score, each a list of step strings (the question itself is
not a step). It returns one score in [0, 1] per step of every trajectory:

    scores[q][t][s]  = score of step s of trajectory t of question q

Invariants (enforced by `validate_scores`, which the controller applies to every reward,
so a faulty plug-in fails with a message that names it rather than deep in a strategy):
- the nesting mirrors the input exactly (same number of questions, of trajectories per
  question, of steps per trajectory);
- every score is a finite float in [0, 1].
The search uses the newest step's score; the final vote aggregates all of them.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Sequence


class RewardError(ValueError):
    """A reward model returned something that breaks the interface."""


class ProcessRewardModel(ABC):
    """Subclass and implement `score`. `name` appears in error messages."""

    name: str = "reward"

    @abstractmethod
    def score(
        self,
        questions: Sequence[str],
        trajectories: Sequence[Sequence[Sequence[str]]],
    ) -> list[list[list[float]]]:
        """scores[q][t][s] in [0, 1] for step s of trajectory t of question q."""

    def __call__(self, questions, trajectories):
        return validate_scores(self.score(questions, trajectories), trajectories, self.name)


def validate_scores(scores, trajectories, name: str) -> list[list[list[float]]]:
    """Check `scores` against the shape of `trajectories`; return them as plain floats."""
    def fail(what: str) -> RewardError:
        return RewardError(f"reward {name!r} returned {what}")

    if len(scores) != len(trajectories):
        raise fail(f"scores for {len(scores)} questions, expected {len(trajectories)}")
    out: list[list[list[float]]] = []
    for q, (per_q, trajs) in enumerate(zip(scores, trajectories)):
        if len(per_q) != len(trajs):
            raise fail(f"{len(per_q)} trajectories for question {q}, expected {len(trajs)}")
        out_q = []
        for t, (per_t, steps) in enumerate(zip(per_q, trajs)):
            if len(per_t) != len(steps):
                raise fail(f"{len(per_t)} step scores for question {q} trajectory {t}, expected {len(steps)}")
            vals = []
            for s, v in enumerate(per_t):
                v = float(v)
                if not math.isfinite(v) or not 0.0 <= v <= 1.0:
                    raise fail(f"{v!r} for question {q} trajectory {t} step {s}; scores must be finite and in [0, 1]")
                vals.append(v)
            out_q.append(vals)
        out.append(out_q)
    return out
