"""`verifier`: the exact process reward of the demo task (no model).

Each step scores 1.0 if the demo step checker accepts it and 0.0 otherwise (see
ets/demo/checker.py: right arithmetic on quantities known so far, named after the quantity
it computes; a final `The answer is: N` step is right iff N is the answer). The problem is
recovered from the question text itself, so it works on any demo question, shipped or
freshly generated; a question that is not a demo question raises `RewardError`.

It is the oracle the trained demo PRM approximates: searching with it gives the ceiling
that a perfect PRM would reach.

With `auc` it is that oracle blurred to a chosen quality, a dial for asking how good a
PRM must be before a tree search pays: a step's score is Phi(+-d/2 + z), + for a right
step and - for a wrong one, z a standard normal drawn from a hash of the question and the
step's whole prefix, and d = sqrt(2) Phi^-1(auc), so that a right step outscores a wrong
one with probability `auc` (its step-level ROC AUC; `correct` and `wrong` then play no
part). Its mistakes are independent from step to step and problem to problem, unlike a
trained PRM's, and it is a function of the prefix like a real PRM: a path scores the same
however often, and in whatever batch, it is scored.

With `persistence` (rho, 0 <= rho < 1) its mistakes carry along a path, as a trained PRM's
do: the noise of step k is rho * (step k-1's) + sqrt(1 - rho^2) * (its own draw), so each
step's noise is still a standard normal (the step AUC stays `auc`) but a step it overrates
is followed by steps it overrates too. rho = 0 is the independent dial above, to the digit;
`scripts/demo_quality.py`'s miss persistence of the trained demo PRM (0.69) is what a rho
near 0.8 gives.

With `kind_bias` (a mapping from a step's kind, one of STEP_KINDS, to a shift) every step
of that kind has the shift added to its noise, right or wrong alike: the trained demo PRM
scores a kind of step by how often that kind goes wrong as much as by whether this one did
(its mean probit is +1.56 for products, +0.76 for sums, about 0 for the last operations
and the answer), and `{product: 1.5, sum: 0.75}` gives the dial that habit. Kinds left out
are not shifted. With `kind_auc` (kind -> AUC) the steps of a kind are told apart at their
own AUC: the trained PRM separates right from wrong products far better than right from
wrong last operations and answers (within a problem, on its best-of-N samples: products
0.91, sums 0.85, differences, quotients and answers 0.67-0.69).

With `computation_share` (c, 0 <= c <= 1) a share of a step's noise is keyed by what it
computes (`a op b = c`, or the answer; `computation`) instead of by its whole prefix: its
draw is sqrt(c) * (a normal keyed by the computation) + sqrt(1 - c) * (one keyed by the
prefix), still a standard normal, so a computation is overrated or underrated alike in
every path and wording that makes it, to the degree c, as a trained PRM's belief about a
computation is much the same wherever it meets it (`computation_consistency` measures
that share: the trained demo PRM's is 0.73). c = 0 is the prefix-keyed dial and c = 1 one
draw per computation, each to the digit. Persistence, kind_bias and kind_auc apply on
top. (Steps in other paths then share draws, but a path's score still depends on the
path alone.)

With `trust_accepted_values: true` it trusts the wrong values it accepted, as a PRM that
judges each step against the values before it does: a wrong step the dial scored above
0.5 has its value accepted, and a step built only on accepted wrong values (the checker's
`inherited`, the answer included) is scored as a right step. One overrated mistake then
makes the whole path after it look right, in every path that builds on it.

With `error_auc` (a mapping from an error the checker names, one of ERRORS: arithmetic,
operand, inherited, answer, format, to an AUC) the wrong steps of that error are told from
right steps at that AUC only, whatever the rest: a PRM blind to one kind of mistake. The
trained demo PRM tells a problem's right computations from its wrong operands (a count
paired with another item's part, a digit misread) at 0.71, from its other errors at
0.91-0.96; that blind spot alone, even repeated per computation, does not make REBASE
lose, trusting the values it accepted does (measured with REBASE against best-of-N on
the demo task, W=64, 3 seeds).
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from statistics import NormalDist
from typing import Mapping, Sequence

from ets.demo.checker import ERRORS, computation, judge_steps, parse_answer, parse_equation
from ets.demo.task import DemoParseError, Problem, parse_question
from ets.rewards.base import ProcessRewardModel, RewardError


STEP_KINDS = {"*": "product", "+": "sum", "-": "difference", "/": "quotient"}


def step_kind(step: str) -> str:
    """product, sum, difference, quotient (by the step's operation), answer, or format."""
    if parse_answer(step) is not None:
        return "answer"
    eq = parse_equation(step)
    return "format" if eq is None else STEP_KINDS[eq.op]


def _half_gap(auc: float) -> float:
    """Half the distance between right and wrong steps' mean noise that gives `auc`."""
    return math.sqrt(2) * NormalDist().inv_cdf(auc) / 2


def _kind_mapping(option: str, value, auc, kinds=(*STEP_KINDS.values(), "answer", "format"),
                  what: str = "step kinds") -> dict[str, float]:
    """`value` checked as a mapping from `kinds` (step kinds by default) to numbers (an
    empty one if None)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RewardError(f"reward 'verifier': {option}={value!r} must be a mapping such as {{product: 0.9}}")
    if value and auc is None:
        raise RewardError(f"reward 'verifier': {option} needs auc (it changes the blurred scores)")
    unknown = sorted(set(value) - set(kinds))
    if unknown:
        raise RewardError(f"reward 'verifier': {option} has unknown {what} {unknown}; use {', '.join(kinds)}")
    try:
        return {k: float(v) for k, v in value.items()}
    except (TypeError, ValueError):
        raise RewardError(f"reward 'verifier': {option}={dict(value)!r} must map {', '.join(kinds)} to numbers") from None


@lru_cache(maxsize=4096)
def _problem(question: str) -> Problem:
    return parse_question(question)


class Verifier(ProcessRewardModel):
    """Exact step scores for demo questions: 1.0 (correct) or 0.0 (wrong)."""

    name = "verifier"

    def __init__(self, correct: float = 1.0, wrong: float = 0.0, auc: float | None = None, noise_seed: int = 0,
                 persistence: float = 0.0, kind_bias: Mapping[str, float] | None = None,
                 kind_auc: Mapping[str, float] | None = None, computation_share: float = 0.0,
                 error_auc: Mapping[str, float] | None = None, trust_accepted_values: bool = False):
        for key, v in (("correct", correct), ("wrong", wrong)):
            if not 0.0 <= float(v) <= 1.0:
                raise RewardError(f"reward 'verifier': {key}={v!r} must be in [0, 1]")
        if auc is not None and not 0.5 < float(auc) < 1.0:
            raise RewardError(f"reward 'verifier': auc={auc!r} must be above 0.5 and below 1 (leave it out for the exact scores)")
        if not 0.0 <= float(persistence) < 1.0:
            raise RewardError(f"reward 'verifier': persistence={persistence!r} must be in [0, 1) (0: independent mistakes)")
        if float(persistence) and auc is None:
            raise RewardError("reward 'verifier': persistence needs auc (the exact scores make no mistakes to carry)")
        self.correct, self.wrong = float(correct), float(wrong)
        self.persistence = float(persistence)
        self.noise_seed = int(noise_seed)
        try:
            share = float(computation_share)
        except (TypeError, ValueError):
            share = math.nan
        if not 0.0 <= share <= 1.0:
            raise RewardError(f"reward 'verifier': computation_share={computation_share!r} must be a number in [0, 1] "
                              "(0: a draw per prefix, 1: one per computation)")
        if share and auc is None:
            raise RewardError("reward 'verifier': computation_share needs auc (it shares the blurred scores' noise)")
        self.computation_share = share
        self.kind_bias = _kind_mapping("kind_bias", kind_bias, auc)
        kind_auc = _kind_mapping("kind_auc", kind_auc, auc)
        for kind, value in kind_auc.items():
            if not 0.5 < value < 1.0:
                raise RewardError(f"reward 'verifier': kind_auc[{kind!r}]={value!r} must be above 0.5 and below 1")
        self.kind_half_gap = {kind: _half_gap(value) for kind, value in kind_auc.items()}
        error_auc = _kind_mapping("error_auc", error_auc, auc, ERRORS, "errors")
        for error, value in error_auc.items():
            if not 0.0 < value < 1.0:
                raise RewardError(f"reward 'verifier': error_auc[{error!r}]={value!r} must be above 0 and below 1")
        self.error_gap = {error: 2 * _half_gap(value) for error, value in error_auc.items()}
        if not isinstance(trust_accepted_values, bool):
            raise RewardError(f"reward 'verifier': trust_accepted_values={trust_accepted_values!r} must be true or false")
        if trust_accepted_values and auc is None:
            raise RewardError("reward 'verifier': trust_accepted_values needs auc (the exact scores accept no wrong value)")
        self.trust_accepted_values = trust_accepted_values
        self.half_gap = None if auc is None else _half_gap(float(auc))

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
            out.append([self._scores(question, list(steps), judge_steps(problem, list(steps))) for steps in trajs])
        return out

    def _scores(self, question: str, steps: list[str], verdicts: list[str]) -> list[float]:
        if self.half_gap is None:
            return [self.correct if v == "ok" else self.wrong for v in verdicts]
        normal = NormalDist()
        digest = hashlib.blake2b(f"{self.noise_seed}\x00{question}".encode(), digest_size=8)
        rho = self.persistence
        scores, z = [], None
        accepted: dict[int, bool] = {}            # a value a wrong step computed -> was that step scored above 0.5
        for step, verdict in zip(steps, verdicts):
            ok = verdict == "ok"
            digest.update(b"\x00" + step.encode())  # the prefix so far: one running hash
            own = self._mixed_draw(digest, question, step, ok)
            z = own if z is None or not rho else rho * z + math.sqrt(1 - rho * rho) * own
            kind = step_kind(step) if self.kind_bias or self.kind_half_gap else None
            half_gap = self.kind_half_gap.get(kind, self.half_gap)
            eq = parse_equation(step) if self.trust_accepted_values else None
            trusted = self.trust_accepted_values and verdict == "inherited" and _on_accepted(step, eq, accepted)
            if ok or trusted:
                mean = half_gap
            elif verdict in self.error_gap:   # right steps (at +half_gap) outscore these at error_auc
                mean = half_gap - self.error_gap[verdict]
            else:
                mean = -half_gap
            x = mean + z + self.kind_bias.get(kind, 0.0)
            if not ok and eq is not None:
                accepted.setdefault(eq.c, x > 0)
            scores.append(normal.cdf(x))
        return scores

    def _mixed_draw(self, prefix_digest, question: str, step: str, ok: bool) -> float:
        """This step's own standard normal: keyed by its prefix, its computation, or a mix."""
        share = self.computation_share
        by_prefix = by_computation = 0.0
        if share < 1.0:
            by_prefix = _normal_of(prefix_digest.copy())
        if share > 0.0:  # one draw per computation, wherever and however it is written
            key = f"{self.noise_seed}\x00{question}\x00{computation(step)}\x00{ok}"
            by_computation = _normal_of(hashlib.blake2b(key.encode(), digest_size=8))
        if share in (0.0, 1.0):  # exactly one of the draws, to the digit
            return by_computation if share else by_prefix
        return math.sqrt(share) * by_computation + math.sqrt(1.0 - share) * by_prefix


def _on_accepted(step: str, eq, accepted: dict[int, bool]) -> bool:
    """Whether the wrong values this step uses (its equation `eq`'s operands, or its answer)
    were all accepted."""
    answer = parse_answer(step) if eq is None else None
    used = (eq.a, eq.b) if eq is not None else (answer,) if answer is not None else ()
    known = [accepted[v] for v in used if v in accepted]
    return bool(known) and all(known)


def _normal_of(digest) -> float:
    """A standard normal from a hash: its 64 bits as a uniform in (0, 1), through Phi^-1."""
    return NormalDist().inv_cdf((int.from_bytes(digest.digest(), "big") + 0.5) / 2**64)
