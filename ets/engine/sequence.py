"""One request inside the engine: its tokens and where its KV lives; a chunk of it to compute.

    tokens:  [ prompt ............ | generated ...... ]
    KV:      [ prefix (tree, locked) | own slots | not yet computed ]
              0              prefix_len        kv_len          len(tokens)

- `prefix_node` is the radix node ending at `prefix_len`, locked while the sequence runs,
  so the prefix slots cannot be evicted under it;
- the own slots (table row, positions prefix_len..kv_len) were allocated for this sequence
  and are in no other structure; at the end they are inserted into the tree (duplicates of
  tokens cached meanwhile are freed);
- a generating sequence samples once `kv_len == len(tokens)`; its last sampled token is
  never computed (nothing needs its KV until the path is continued);
- a scoring sequence has fixed tokens and collects outputs at `positions`;
- a pooling sequence (either kind) also sums the final hidden states of its positions
  `pool_from` .. `pool_to` (ets/engine/hidden.py), each position once: its KV below the
  first position not yet pooled is never taken from the cache (`match_limit`), so a
  preempted sequence computes again only what it had not pooled.
A waiting sequence (not admitted, or preempted) holds no slots, no lock and no row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from ets.engine.radix import RadixNode
from ets.engine.sampling import SamplingParams, StopChecker


class Chunk(NamedTuple):
    """The scheduler's order to the runner: compute these tokens of one sequence now. Their
    pool slots are already in the sequence's slot-table row (the runner reads them there,
    on the device, for the whole forward at once):

        row r of the slot table: [ computed ...... | token_ids -> slots | later ... ]
                                  0            start              start + len(token_ids)
    """
    row: int                 # the sequence's slot-table row
    start: int               # position of the first new token (= tokens already computed)
    token_ids: list[int]     # the new tokens
    keep: list[int]          # offsets in the chunk whose outputs are returned
    cluster: tuple = ()      # decode: chunks with the same cluster share KV of positions < shared
    shared: int = 0          # decode: where its attention splits into prefix | own (cascade.py)
    uid: int = -1            # the sequence's admission id (new on every admission)
    decode: bool = False     # one generated token: the decode group (else a prefill chunk)


@dataclass(eq=False)
class Seq:
    tokens: list[int]
    n_prompt: int
    params: SamplingParams | None = None     # None: a scoring sequence
    stopper: StopChecker | None = None
    seed: int | None = None                  # its random stream (sampling.py); None: greedy
    positions: list[int] = field(default_factory=list)   # scoring: outputs wanted here
    outputs: list[torch.Tensor] = field(default_factory=list)
    lock_result: bool = False                # keep the finished path locked (expand)
    cluster: tuple = ()                      # its decode chunks' Chunk.cluster (set on admission)
    pool_from: int = -1                      # first position whose hidden state is pooled; -1: none
    pool_to: int | None = None               # end of the pooled positions (exclusive); None: all computed
    pool_slot: int = -1                      # its row of the call's sums (Engine._run, Engine.submit)
    ticket: object = None                    # the Engine.submit it belongs to (None: a synchronous call)
    pooled_upto: int = 0                     # positions below this one are pooled already
    pooled_count: int = 0
    # --- runtime state, valid while admitted
    row: int = -1
    uid: int = -1                            # admission id: a preempted sequence gets a new one
    prefix_node: RadixNode | None = None
    prefix_len: int = 0
    kv_len: int = 0
    # --- result
    finish: str | None = None
    result_node: RadixNode | None = None

    @property
    def scoring(self) -> bool:
        return self.params is None

    @property
    def new_tokens(self) -> list[int]:
        return self.tokens[self.n_prompt:]

    def match_limit(self) -> int:
        """How many leading tokens may come from the cache. The token before the first
        output we need must be computed here: its output is what we want."""
        limit = min(self.positions, default=len(self.tokens)) if self.scoring else len(self.tokens) - 1
        # (no positions: a prefill-only sequence, which fills the cache)
        if self.pool_from >= 0:  # the positions still to pool are computed here
            return min(limit, max(self.pool_from, self.pooled_upto))
        return limit

    def pool_range(self, start: int, n: int) -> tuple[int, int]:
        """The positions of the chunk [start, start + n) to pool now (empty: lo >= hi)."""
        lo = max(start, self.pool_from, self.pooled_upto)
        hi = start + n if self.pool_to is None else min(start + n, self.pool_to)
        return lo, hi

    def scored_offsets(self, start: int, n: int) -> list[int]:
        """A scoring sequence's offsets in the chunk [start, start + n) whose outputs it
        wants (a generating one keeps its last token's output: Scheduler._add_chunk)."""
        return [p - start for p in sorted(set(self.positions)) if start <= p < start + n]
