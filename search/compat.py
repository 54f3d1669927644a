"""The ETS public code's selection arithmetic, for `search.compat: ets_code`.

By default the strategies follow the project's rules; with `compat: ets_code` they reproduce
what the ETS code (`SqueezeAILab/ETS`, rebase.py) does where it departs from them
(docs/FIDELITY.md has the whole table). The pieces they share live here, once:

- `later_first(scores)`: the code's ranking. It sorts ascending by score and reverses the
  list, so the best come first and, among equal scores, the *later* candidate first.
  Beam search, REBASE and the ETS final pass rank so; the ETS first pass sorts descending
  (`earlier_first`).
- `reference_allocate(...)`: its REBASE loop. The exponentials and the running sum are
  float32 tensors (torch's default dtype), not max-shifted, and the share is
  `ceil(budget * w_i / sum)` with the sum decremented by `w_i` after each candidate. The
  drift of that float32 sum can hand out more children than the budget, and nothing caps a
  share at what is left. Its REBASE has no guard on the sum; its ETS passes stop once the
  sum is not positive.
- `in_code_order(...)`: the allocation listed in the order of the code's ranking. The code
  makes the children of a selection in that order, so the next frontier's candidates, and
  with them every later tie ("the later candidate wins"), follow it.
- `ROOT_SCORE`: the code's root is a node scored 1.0 that its REBASE and ETS select like
  any frontier; the float32 share of a lone candidate can round up, so the root can get
  one child more than the width (W = 15, 29, 30, 58-60, ... at T = 0.2).

torch is imported only when these run (the strategies stay free of model code), so the
float32 operations are the very ones the ETS code ran.
"""

from __future__ import annotations

import math
from typing import Sequence

from ets.config import ConfigError
from ets.tree import Node

LATER, EARLIER = "later", "earlier"
ROOT_SCORE = 1.0


def later_first(scores: Sequence[float]) -> list[int]:
    """Indices of `scores`, best first; on ties the later index first (an ascending stable
    sort, reversed)."""
    return sorted(range(len(scores)), key=lambda i: scores[i])[::-1]


def earlier_first(scores: Sequence[float]) -> list[int]:
    """Indices of `scores`, best first; on ties the earlier index first (a descending stable
    sort: the order of the ETS program's first REBASE pass)."""
    return sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)


def reference_rank(scores: Sequence[float], temperature: float, *, ties: str = LATER,
                   scale_first: bool = False) -> list[int]:
    """The order in which `reference_allocate` goes down the candidates. With `scale_first`
    (the ETS final pass) the code ranks by s / T, in float64, where two scores one ulp
    apart can become equal and so rank as a tie."""
    keys = [s / temperature for s in scores] if scale_first else list(scores)
    return later_first(keys) if ties == LATER else earlier_first(keys)


def reference_allocate(scores: Sequence[float], width: int, temperature: float, *, ties: str = LATER,
                       scale_first: bool = False, guarded: bool = True) -> list[int]:
    """Children per candidate, in the order of `scores`, as the ETS code's REBASE loop gives
    them. The sum may exceed `width` (by one where the float32 sum drifts; by more where it
    nearly cancels, at T <= 0.05), and a candidate after the budget is overspent may get a
    negative count (it gets no children).

    `ties`: LATER (REBASE and the ETS code's final pass) or EARLIER (its first pass, the
    outcome weights). `scale_first`: divide by `temperature` in float64 before the float32
    tensor is made, and rank by that quotient (the ETS code's final pass), rather than in
    float32 after it. A score of -inf (a leaf the ETS program pruned) weighs 0. `guarded`:
    once the running sum is not positive, every later candidate gets 0 (the code's ETS
    passes); unguarded (its REBASE) the loop goes on.

    Where the code's share is not a number (its float32 sum reached 0 with weight left, or
    overflowed), the code raises; so does this, with a ConfigError naming the temperature.
    """
    import torch

    order = reference_rank(scores, temperature, ties=ties, scale_first=scale_first)
    if scale_first:
        weights = torch.exp(torch.tensor([scores[i] / temperature for i in order], dtype=torch.float32))
    else:
        weights = torch.exp(torch.tensor([float(scores[i]) for i in order], dtype=torch.float32) / temperature)
    total = weights.sum()
    counts = [0] * len(scores)
    budget = width
    for k, i in enumerate(order):
        if guarded and not total > 0:
            break
        share = float(budget * weights[k] / total)
        if not math.isfinite(share):
            raise ConfigError(
                f"softmax_temperature {temperature}: under compat=ets_code a REBASE share is {share} here (the ETS "
                f"code's float32 sum of exp(score / T) is {float(total)} at that candidate), where the ETS code "
                f"raises; use a larger softmax_temperature, or compat=project")
        counts[i] = math.ceil(share)
        budget -= counts[i]
        total = total - weights[k]
    return counts


def in_code_order(candidates: Sequence[Node], counts: Sequence[int], order: Sequence[int]) -> dict[int, int]:
    """{candidate id: children} for the positive counts, listed in the code's `order`: the
    loop makes the children in the allocation's order."""
    return {candidates[i].id: counts[i] for i in order if counts[i] > 0}
