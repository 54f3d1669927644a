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

from ets.config.checks import plural



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
        return scored(self.score, questions, trajectories, self.name)


def scored(score, questions, trajectories, name: str, ids: Sequence[str] | None = None) -> list[list[list[float]]]:
    """`score(questions, trajectories)`, checked by `validate_scores` against the
    trajectories as they were given: the reward is handed copies of the lists, so one that
    changes them in place changes neither the check nor the steps the search keeps."""
    return validate_scores(score(list(questions), [[list(steps) for steps in per] for per in trajectories]),
                           trajectories, name, ids)


def validate_scores(scores, trajectories, name: str, ids: Sequence[str] | None = None) -> list[list[list[float]]]:
    """Check `scores` against the shape of `trajectories`; return them as plain floats.

    Any wrong shape or value is one `RewardError` line naming the reward and where it is:
    a float (or None) where a list was due, a wrong count of questions, trajectories or
    steps, a value that is not a number, NaN, or a number outside [0, 1]. Lists, tuples,
    numpy arrays and tensors are accepted at every level. `ids`, the questions' problem
    ids, name the problem too (a question's place in one call depends on what else was
    in flight).
    """
    def fail(what: str) -> RewardError:
        return RewardError(f"reward {name!r} returned {what}")

    def question(q: int) -> str:
        return f"question {q}" + (f" (problem {ids[q]!r})" if ids is not None and q < len(ids) else "")

    per_question = _as_list(scores, f"of scores for {plural(len(trajectories), 'question')}", fail, "")
    if len(per_question) != len(trajectories):
        raise fail(f"scores for {plural(len(per_question), 'question')}, expected {len(trajectories)}")
    out: list[list[list[float]]] = []
    for q, (per_q, trajs) in enumerate(zip(per_question, trajectories)):
        per_q = _as_list(per_q, f"of {plural(len(trajs), 'trajectory', 'trajectories')}' scores", fail,
                         f" for {question(q)}")
        if len(per_q) != len(trajs):
            raise fail(f"{plural(len(per_q), 'trajectory', 'trajectories')} for {question(q)}, expected {len(trajs)}")
        out_q = []
        for t, (per_t, steps) in enumerate(zip(per_q, trajs)):
            where = f" for {question(q)} trajectory {t}"
            per_t = _as_list(per_t, f"of {plural(len(steps), 'step score')} (one per step)", fail, where)
            if len(per_t) != len(steps):
                raise fail(f"{plural(len(per_t), 'step score')}{where}, expected {len(steps)}")
            out_q.append([_as_score(v, fail, f"{where} step {s}") for s, v in enumerate(per_t)])
        out.append(out_q)
    return out


def empty_steps_inherit(trajectories, scores: list[list[list[float]]]) -> list[list[list[float]]]:
    """`scores` with each step that holds no text (the policy ended at once, or wrote a bare
    delimiter) given the score of the step before it: an empty step says nothing to judge,
    and what a reward reads at one is noise that, as a trajectory's last score, would weigh
    its whole vote. A first step keeps its own (it has none before it). In place."""
    for per_question, question_scores in zip(trajectories, scores):
        for steps, step_scores in zip(per_question, question_scores):
            for s in range(1, len(steps)):
                if not steps[s].strip():
                    step_scores[s] = step_scores[s - 1]
    return scores


def _as_list(value, expected: str, fail, where: str) -> list:
    """`value` as a list, or the named error: a list (tuple, array, tensor) was due here."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()          # numpy arrays and tensors (a 0-d one becomes a number)
    if isinstance(value, (list, tuple)):
        return list(value)
    raise fail(f"{_show(value)}{where}, expected a list {expected}")


def _as_score(value, fail, where: str) -> float:
    """`value` as a float in [0, 1], or the named error."""
    # A bool (Python's or numpy's) converts to 1.0 / 0.0: a reward returning a verdict where
    # a probability is due, refused rather than read as certainty.
    is_bool = type(value).__name__ in ("bool", "bool_") or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")
    if isinstance(value, (str, bytes)) or is_bool or not hasattr(type(value), "__float__"):
        raise fail(f"{_show(value)}{where}; a score must be a number in [0, 1]")
    try:
        v = float(value)
    except (TypeError, ValueError):     # e.g. a tensor of more than one element
        raise fail(f"{_show(value)}{where}; a score must be a number in [0, 1]") from None
    if not math.isfinite(v) or not 0.0 <= v <= 1.0:
        raise fail(f"{v!r}{where}; scores must be finite and in [0, 1]")
    return v


def _show(value) -> str:
    """A short description of a wrong value: its repr (cut to 40 characters) and its type."""
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return text if value is None else f"{text} (a {type(value).__name__})"
