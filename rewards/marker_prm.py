"""The scoring loop shared by the model-based PRMs: one marker token per step.

A subclass says how a (question, steps) pair becomes marked text (`render`); this class
tokenizes the whole round's texts in one batched tokenizer call (`encode_batch`, built on
`tokenize`; a subclass may change either: how the text is tokenized, where the rows are
read; `encode` is one trajectory's), sends the whole round to the scoring backend in one
call, and turns the rows read at each marker into probabilities (`probabilities`):

    score of step s = softmax(row at marker s over `columns`)[positive]

Step-tag and chat-judgement PRMs read the columns of their good/bad tokens from LM logits
(positive = good); token-classification PRMs read their label logits (positive = the
positive label); value-head PRMs replace the softmax by a sigmoid of one output.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ets.rewards.backends import ScoringBackend
from ets.rewards.base import ProcessRewardModel, RewardError
from ets.rewards.marking import MarkedText, MarkerError, tokenize_marked_batch


class MarkerPRM(ProcessRewardModel):
    def __init__(self, name: str, tokenizer, backend: ScoringBackend, marker_id: int, positive: int, add_special_tokens: bool):
        if not getattr(tokenizer, "is_fast", False):
            raise RewardError(f"reward {name!r} needs a fast (Rust) tokenizer to locate step markers; got {type(tokenizer).__name__}")
        self.name = name
        self.tokenizer = tokenizer
        self.backend = backend
        self.marker_id = marker_id
        self.positive = positive
        self.add_special_tokens = add_special_tokens

    def render(self, question: str, steps: list[str]) -> MarkedText:
        raise NotImplementedError

    def encode(self, question: str, steps: Sequence[str]) -> tuple[list[int], list[int]]:
        """(token ids, marker positions) of one trajectory, exactly as it will be scored."""
        try:
            return self.encode_batch([(question, steps)])[0]
        except MarkerError as exc:
            exc.index = None
            raise

    def encode_batch(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[tuple[list[int], list[int]]]:
        """`encode` of each (question, steps), tokenized together (`tokenize`). A
        `MarkerError` names its item's `index`."""
        marked = []
        for i, (question, steps) in enumerate(items):
            try:
                marked.append(self.render(question, list(steps)))
            except MarkerError as exc:
                exc.index = i
                raise
        return self.tokenize(marked)

    def tokenize(self, marked: list[MarkedText]) -> list[tuple[list[int], list[int]]]:
        """(token ids, marker positions) of each marked text: the whole text tokenized at
        once, all texts in one batched call."""
        return tokenize_marked_batch(self.tokenizer, marked, self.marker_id, self.add_special_tokens)

    def _encode_round(self, items: list[tuple[str, Sequence[str]]]) -> list[tuple[list[int], list[int]]]:
        # A subclass that changed only `encode` (the per-trajectory hook) keeps it.
        if type(self).encode is not MarkerPRM.encode and type(self).encode_batch is MarkerPRM.encode_batch:
            out = []
            for i, (question, steps) in enumerate(items):
                try:
                    out.append(self.encode(question, steps))
                except MarkerError as exc:
                    exc.index = i
                    raise
            return out
        return self.encode_batch(items)

    def score(self, questions, trajectories):
        return self.read_round(questions, trajectories, self.read)

    def read_round(self, questions, trajectories, read: Callable[[torch.Tensor, int, list[int], list[int]], Any]):
        """`read(rows, n_steps, ids, positions)` of every non-empty trajectory, after one
        batched tokenization and one backend call for the whole round ([] for an empty one)."""
        items, where = [], []
        for q, (question, trajs) in enumerate(zip(questions, trajectories)):
            for t, steps in enumerate(trajs):
                if steps:
                    items.append((question, steps))
                    where.append((q, t))
        scores: list[list[list[float]]] = [[[] for _ in trajs] for trajs in trajectories]
        if not items:
            return scores
        try:
            encoded = self._encode_round(items)
        except MarkerError as exc:
            q, t = where[exc.index] if exc.index is not None else ("?", "?")
            raise RewardError(f"reward {self.name!r}, question {q} trajectory {t}: {exc}") from exc
        sequences = [ids for ids, _ in encoded]
        positions = [pos for _, pos in encoded]
        rows = self.backend.logits_at(sequences, positions)     # each [n_positions, n_columns]
        for (q, t), (_, steps), (ids, pos), r in zip(where, items, encoded, rows):
            scores[q][t] = read(r, len(steps), ids, pos)
        return scores

    def read(self, rows: torch.Tensor, n_steps: int, ids: list[int], positions: list[int]) -> list[float]:
        """One score per step from the rows read at `positions` of `ids`; the first
        `n_steps` are the markers' (a subclass may read more positions: `tokenize`)."""
        return self.probabilities(rows)

    def probabilities(self, rows: torch.Tensor) -> list[float]:
        """One score per step from the rows read at its markers (`[n_steps, n_columns]`)."""
        return torch.softmax(rows.float(), dim=-1)[:, self.positive].tolist()

    def stats(self) -> dict[str, int]:
        return self.backend.stats()
