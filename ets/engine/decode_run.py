"""Decode steps that change nothing but the tokens: their per-step work is kept per run.

Most steps of a long decode are the same running sequences, in the same order, each
computing its one new (last sampled) token, none admitted, preempted or ended since the
step before. The scheduler keeps such steps as a `DecodeRun`: the sequences, their
slot-table rows and positions on the device, and what sampling and pooling read (the
rows of each call, with its sampling parameters and stop rule, their seeds, the rows of
the pooled sums). A step of the run (`DecodeStep`) is then planned without a pass over
the sequences: the positions move on by one on the device, the runner recognises the
step as the run's next one rather than comparing it chunk by chunk with the last, and
its input ids are the tokens the run sampled, still on the device. What is left per
sequence is appending its sampled token; the stop conditions are checked only on the
rows whose token could end them (StopChecker.may_finish).

    run.seqs:   [ s0   s1   s2  ...  ]        the running sequences, in order
    run.starts: [ 140  97   310 ...  ]        this step's positions (kv_len), on the device
    step k:     chunk i = s_i's token at run.starts[i]   (one token each, sampled)
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from ets.engine.hidden import Pooling
from ets.engine.sampling import StopChecker, sample_tensor
from ets.engine.sequence import Chunk, Seq


class RowGroup(NamedTuple):
    """The rows of a run that one call submitted: one stop checker (and so one set of
    sampling parameters), sampled as one batch."""
    stopper: StopChecker
    index: torch.Tensor | None   # their rows in the run (None: every row)
    seeds: torch.Tensor | None   # their streams (None: greedy)


class DecodeRun:
    """Decode steps of `seqs`, all generating, each with only its last token to compute; a
    change to the running sequences ends the run (the scheduler drops it)."""

    def __init__(self, seqs: list[Seq], rows: torch.Tensor, starts: torch.Tensor):
        dev = starts.device
        self.seqs = seqs
        self.rows = rows          # [B] slot-table rows
        self.starts = starts      # [B] the current step's positions (each sequence's kv_len)
        self.step = 0             # steps planned so far, less one
        # the tokens `sample` drew last [B] and at which step: the next step's input
        self.sampled: tuple[int, torch.Tensor] | None = None
        self.prompts = torch.tensor([s.n_prompt for s in seqs], dtype=torch.long, device=dev)
        by_stopper: dict[int, list[int]] = {}
        for i, s in enumerate(seqs):
            by_stopper.setdefault(id(s.stopper), []).append(i)
        # the sequences that pool their steps' hidden states (Seq.pool_from), and their rows of the sums
        self.pool_rows = [i for i, s in enumerate(seqs) if s.pool_slot >= 0]
        self._pool_index: tuple[torch.Tensor, torch.Tensor] | None = None
        self.groups = []
        for rows_of in by_stopper.values():
            first = seqs[rows_of[0]]
            index = None if len(rows_of) == len(seqs) else torch.tensor(rows_of, dtype=torch.long, device=dev)
            seeds = None if first.params.greedy else \
                torch.tensor([seqs[i].seed for i in rows_of], dtype=torch.long, device=dev)
            self.groups.append(RowGroup(first.stopper, index, seeds))

    def pooling(self, sums: torch.Tensor) -> Pooling | None:
        """What a step adds to the pooling sequences' sums, booked as pooled: each one's new
        token (a generating sequence pools from its prompt's last token on, so a decode
        step's one token is always its next to pool: Seq.pool_range)."""
        if not self.pool_rows:
            return None
        for i in self.pool_rows:
            seq = self.seqs[i]
            seq.pooled_upto = seq.kv_len + 1
            seq.pooled_count += 1
        if self._pool_index is None:
            dev = self.starts.device
            self._pool_index = (torch.tensor(self.pool_rows, dtype=torch.long, device=dev),
                                torch.tensor([self.seqs[i].pool_slot for i in self.pool_rows], dtype=torch.long, device=dev))
        return Pooling(sums, [], *self._pool_index)

    def next_step(self) -> "DecodeStep":
        """The run's next step: every position one further."""
        self.step += 1
        self.starts = self.starts + 1
        return DecodeStep(self)

    def sample(self, logits: torch.Tensor) -> tuple[list[int], list[int]]:
        """This step's tokens from its logits [B, V] (row i: sequence i's), drawn as
        sampling.sample draws them; and the rows whose outputs they may end
        (StopChecker.may_finish), for the stop checks to look at alone."""
        positions = self.starts + 1  # where the new tokens go
        new = positions + 1 - self.prompts  # each output's length with its new token
        if len(self.groups) == 1:
            g = self.groups[0]
            picked = sample_tensor(logits, g.stopper.params, g.seeds, positions)
            ending = g.stopper.may_finish(picked, new)
        else:
            picked = torch.empty(len(self.seqs), dtype=torch.long, device=logits.device)
            ending = torch.empty(len(self.seqs), dtype=torch.bool, device=logits.device)
            for g in self.groups:
                mine = sample_tensor(logits.index_select(0, g.index), g.stopper.params, g.seeds,
                                     positions.index_select(0, g.index))
                picked.index_copy_(0, g.index, mine)
                ending.index_copy_(0, g.index, g.stopper.may_finish(mine, new.index_select(0, g.index)))
        self.sampled = (self.step, picked)
        return picked.tolist(), ending.nonzero().flatten().tolist()


class DecodeStep(Sequence[Chunk]):
    """One step of a run as the chunks it computes (chunk i: sequence i's token at its
    position this step), made only when read: the runner advancing the run's last
    forward, sampling and booking read the run instead. `ending`: the rows its sampled
    tokens may end, when they were drawn by `sample` (None: any row may end)."""

    def __init__(self, run: DecodeRun):
        self.run, self.step, self.starts = run, run.step, run.starts
        self.ending: list[int] | None = None

    def __len__(self) -> int:
        return len(self.run.seqs)

    def __getitem__(self, i: int) -> Chunk:  # type: ignore[override]
        return self._chunk(self.run.seqs[i], int(self.run.rows[i]), int(self.starts[i]))

    def __iter__(self):
        return map(self._chunk, self.run.seqs, self.run.rows.tolist(), self.starts.tolist())

    @staticmethod
    def _chunk(s: Seq, row: int, start: int) -> Chunk:
        return Chunk(row, start, s.tokens[start:start + 1], [0], s.cluster, s.n_prompt - 1, s.uid, True)

    def follows(self, run: DecodeRun | None, step: int) -> bool:
        """Whether this is the step after step `step` of `run`."""
        return run is self.run and step == self.step - 1

    def input_ids(self) -> torch.Tensor | None:
        """[B] its tokens to compute, in the run's order, where the run's `sample` drew them
        (on the device); else None."""
        sampled = self.run.sampled
        return sampled[1] if sampled is not None and sampled[0] == self.step - 1 else None

    def sample(self, logits: torch.Tensor) -> list[int]:
        """Its tokens (DecodeRun.sample), keeping the rows they may end in `ending`."""
        tokens, self.ending = self.run.sample(logits)
        return tokens
