"""A step-tag PRM's verdict read together with its own language model's surprise.

A PRM fine-tuned from a policy keeps a language-model head (the demo PRM is trained on
its tags *and* the LM loss of the correct steps). That head often knows a step is wrong
where the tag does not: on the demo, the lowest log-probability it gives the numbers of a
step's equation tells a sum of a miscopied operand from a right sum at ROC AUC 0.86, where
the tag manages 0.73, and read together as below the PRM's AUC on wrong operands rises
from 0.805 to 0.886 (on the steered PRM shipped since, from 0.885 to
0.926). The readout (option `surprise` of the `step_tag` reward) combines the two, per
step k of a path:

    s_k     = min over the number tokens u of step k of  log P_LM(token u | tokens before u)
              (0 when the step has no number)
    score_k = sigmoid(tag * (logit_good - logit_bad) at tag k
                      + step * s_k + path * min(s_1, ..., s_k) + bias)

`path` carries doubt along a path: a step built on a surprising earlier number scores
lower, as a step built on a wrong value is wrong. The four weights are a logistic
regression fitted on labelled samples that no evaluation uses (the demo's: validation
split, `scripts/fit_prm_surprise.py`). A number token is one whose text is all digits.

Reading it costs a row of logits over the whole vocabulary at the token before every
number of a new step (the demo: ~10 rows a step, 640 columns each; the engine backend
memoises rows, up to 65,536 of them); on a PRM with a large vocabulary that is memory the
tag-only read does not need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

WEIGHTS = ("tag", "step", "path", "bias")


@dataclass(frozen=True)
class SurpriseReadout:
    tag: float
    step: float
    path: float
    bias: float

    @classmethod
    def parse(cls, value: Any) -> "SurpriseReadout | None":
        """From the option's mapping {tag, step, path, bias}; None stays None."""
        if value is None:
            return None
        if not isinstance(value, Mapping) or set(value) != set(WEIGHTS):
            raise ValueError(f"option 'surprise' = {value!r} must map exactly {', '.join(WEIGHTS)} to numbers, "
                             "e.g. {tag: 1.2, step: 0.29, path: 0.21, bias: 0.2} (scripts/fit_prm_surprise.py fits them)")
        bad = [k for k in WEIGHTS if isinstance(value[k], bool) or not isinstance(value[k], (int, float))
               or not math.isfinite(value[k])]
        if bad:
            raise ValueError(f"option 'surprise': {', '.join(bad)} must be finite numbers, got {dict(value)!r}")
        return cls(**{k: float(value[k]) for k in WEIGHTS})

    def scores(self, tag_logits: Sequence[float], surprise: Sequence[float]) -> list[float]:
        """One score per step from its tag's logit difference and its surprise s_k."""
        out = []
        for logit, s, lowest in readout_features(tag_logits, surprise):
            z = self.tag * logit + self.step * s + self.path * lowest + self.bias
            out.append(1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0)
        return out


def number_token_ids(tokenizer) -> frozenset[int]:
    """The ids whose text is all digits (surrounding spaces aside)."""
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    return frozenset(i for i, t in enumerate(texts) if t.strip().isdigit())


def number_rows(ids: Sequence[int], offsets, step_spans: Sequence[tuple[int, int]], numbers: frozenset[int]) -> list[list[int]]:
    """Per step (its [start, end) characters), the positions whose rows predict its
    number tokens: u - 1 for each number token u inside the step."""
    rows: list[list[int]] = [[] for _ in step_spans]
    s = 0
    for u in range(1, len(ids)):
        start = offsets[u][0]
        while s < len(step_spans) and start >= step_spans[s][1]:
            s += 1
        if s == len(step_spans):
            break
        if ids[u] in numbers and start >= step_spans[s][0]:
            rows[s].append(u - 1)
    return rows


def step_surprise(rows: torch.Tensor, ids: Sequence[int], positions: Sequence[int], per_step: Sequence[int]) -> list[float]:
    """s_k per step: `rows` [n, vocab] are the logits at `positions`, `per_step` how many
    consecutive rows belong to each step (0: s_k = 0)."""
    if not len(positions):
        return [0.0] * len(per_step)
    logp = torch.log_softmax(rows.float(), dim=-1)
    nxt = torch.tensor([ids[p + 1] for p in positions], dtype=torch.long)
    picked = logp.gather(1, nxt[:, None])[:, 0].tolist()
    out, i = [], 0
    for n in per_step:
        out.append(min(picked[i:i + n]) if n else 0.0)
        i += n
    return out


def readout_features(tag_logits: Sequence[float], surprise: Sequence[float]) -> list[tuple[float, float, float]]:
    """Per step (tag logit difference, s_k, min(s_1..s_k)): the readout's inputs."""
    out, lowest = [], 0.0
    for logit, s in zip(tag_logits, surprise):
        lowest = min(lowest, s)
        out.append((logit, s, lowest))
    return out


def fit_readout(features: Sequence[tuple[float, float, float]], good: Sequence[bool]) -> SurpriseReadout:
    """The weights of the logistic regression of `good` on the features (maximum
    likelihood, scipy's BFGS; a tiny ridge, 1e-4, keeps separable data finite)."""
    import numpy as np
    from scipy.optimize import minimize

    x = np.column_stack([np.asarray(features, dtype=np.float64), np.ones(len(features))])
    y = np.asarray(good, dtype=np.float64)
    if not 0 < y.sum() < len(y):
        raise ValueError("fitting the surprise readout needs both good and bad steps")

    def loss(w):
        z = x @ w
        # log(1 + e^z) - y z, and its gradient, stable for large |z|
        nll = np.logaddexp(0.0, z) - y * z
        p = 0.5 * (1.0 + np.tanh(0.5 * z))
        return nll.mean() + 1e-4 * (w[:3] @ w[:3]), x.T @ (p - y) / len(y) + 2e-4 * np.r_[w[:3], 0.0]

    w = minimize(loss, np.zeros(4), jac=True, method="BFGS").x
    return SurpriseReadout(*map(float, w))
