"""A PRM training term in REBASE's own terms: the loss behind `scripts/train_demo_models.py
--stage steer`, the differentiable twin of `ets.demo.metrics.rebase_steering`.

REBASE weighs its frontier by softmax(score / T) of each node's newest step. Per problem
and depth, over the distinct partial paths of a problem's samples, the term is

    -log( sum_{paths with no wrong step yet} w )      w = softmax(P(+) / T)

averaged over the (problem, depth) groups that hold both kinds of path. A step-level cross
entropy rewards telling 0.1 from 0.3 as much as 0.9 from 0.97; this term spends the PRM's
capacity where REBASE's softmax looks, on the top of each depth's ranking.
"""

from __future__ import annotations

from typing import Sequence

import torch


def steering_loss(scores: torch.Tensor, problems: Sequence[Sequence[tuple[Sequence[str], Sequence[bool], Sequence[int]]]],
                  temperature: float = 0.2) -> torch.Tensor | None:
    """`scores`: P(+) of every step tag in a batch (1-D, differentiable). `problems`: per
    problem, its samples as (steps, the checker's labels, the index in `scores` of each
    step's tag). A partial path is keyed by its steps' texts, so samples that share a
    prefix count it once (its score is the same in each: the PRM is causal). None when no
    (problem, depth) group holds both a right and a wrong path."""
    terms = []
    for samples in problems:
        by_depth: dict[int, dict[tuple[str, ...], tuple[int, bool]]] = {}
        for steps, labels, where in samples:
            clean = True
            for d, (ok, k) in enumerate(zip(labels, where)):
                clean = clean and ok
                by_depth.setdefault(d, {})[tuple(steps[:d + 1])] = (k, clean)
        for paths in by_depth.values():
            right = torch.tensor([c for _, c in paths.values()])
            if right.all() or not right.any():
                continue
            s = scores[torch.tensor([k for k, _ in paths.values()], device=scores.device)] / temperature
            terms.append(torch.logsumexp(s, 0) - torch.logsumexp(s[right.to(s.device)], 0))
    return torch.stack(terms).mean() if terms else None
