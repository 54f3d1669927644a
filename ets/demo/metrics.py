"""Quality measures of the demo models (used by scripts/demo_quality.py and training).
The weighted vote is `ets.answers.aggregate.choose_answer`, the one the search uses."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.stats import rankdata


def roc_auc(labels: Sequence[bool], scores: Sequence[float]) -> float:
    """ROC AUC by ranks (the Mann-Whitney U statistic; ties get their mean rank)."""
    y, s = np.asarray(labels, dtype=bool), np.asarray(scores, dtype=float)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))
