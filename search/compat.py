"""The ETS public code's selection arithmetic, for `search.compat: ets_code`.

The strategies follow ALGORITHMS.md by default. With `compat: ets_code` they reproduce
what the ETS code (`SqueezeAILab/ETS`, rebase.py) does where it departs from that page
(docs/FIDELITY.md has the whole table). The pieces they share live here, once:

- `later_first(scores)`: the code's ranking. It sorts ascending by score and reverses the
  list, so the best come first and, among equal scores, the *later* candidate first.
  Beam search and REBASE rank so.
- `reference_allocate(...)`: its REBASE loop. The exponentials and the running sum are
  float32 tensors (torch's default dtype), not max-shifted, and the share is
  `ceil(budget * w_i / sum)` with the sum decremented by `w_i` after each candidate. The
  drift of that float32 sum can hand out one child more than the budget, and nothing
  caps a share at what is left.

torch is imported only when these run (the strategies stay free of model code), so the
float32 operations are the very ones the ETS code ran.
"""

from __future__ import annotations

import math
from typing import Sequence

LATER, EARLIER = "later", "earlier"


def later_first(scores: Sequence[float]) -> list[int]:
    """Indices of `scores`, best first; on ties the later index first (an ascending stable
    sort, reversed)."""
    return sorted(range(len(scores)), key=lambda i: scores[i])[::-1]


def earlier_first(scores: Sequence[float]) -> list[int]:
    """Indices of `scores`, best first; on ties the earlier index first (a descending stable
    sort: the order of the ETS program's first REBASE pass)."""
    return sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)


def reference_allocate(scores: Sequence[float], width: int, temperature: float, *, ties: str = LATER,
                       scale_first: bool = False) -> list[int]:
    """Children per candidate, in the order of `scores`, as the ETS code's REBASE loop gives
    them. The sum may exceed `width` (by one, where the float32 sum drifts).

    `ties`: LATER (REBASE and the ETS code's final pass) or EARLIER (its first pass, the
    outcome weights). `scale_first`: divide by `temperature` in float64 before the float32
    tensor is made (the ETS code's final pass) rather than in float32 after it. A score of
    -inf (a leaf the ETS program pruned) weighs 0. Once the running sum is not positive,
    every later candidate gets 0 (the ETS code's guard in its ETS passes; its REBASE has
    none, and divides by zero there).
    """
    import torch

    order = later_first(scores) if ties == LATER else earlier_first(scores)
    if scale_first:
        weights = torch.exp(torch.tensor([scores[i] / temperature for i in order], dtype=torch.float32))
    else:
        weights = torch.exp(torch.tensor([float(scores[i]) for i in order], dtype=torch.float32) / temperature)
    total = weights.sum()
    counts = [0] * len(scores)
    budget = width
    for k, i in enumerate(order):
        if not total > 0:
            break
        counts[i] = math.ceil(float(budget * weights[k] / total))
        budget -= counts[i]
        total = total - weights[k]
    return counts
