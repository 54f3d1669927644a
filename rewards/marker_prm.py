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

`score_with_embeddings` scores the same way and hands out, for each trajectory, its newest
step's embedding (ETS's `search.embedder: prm`): the mean of the PRM's final hidden states
over that step's tokens, L2-normalised, pooled in the scoring forward itself (the
backend's `logits_and_pooled`). The step's tokens are those of its own text (found by
the tokenizer's character offsets in the marked text, or in the piece before its marker
for a PRM that encodes piece by piece; the delimiter, the marker and the text around
them left out).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np
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
        self._span_seconds = 0.0    # host time spent finding the steps' token spans (embeddings)

    @property
    def embeds_steps(self) -> bool:
        """Whether `score_with_embeddings` can hand out step embeddings."""
        return self.embeds_steps_note is None

    @property
    def embeds_steps_note(self) -> str | None:
        """Why this PRM cannot hand out step embeddings; None when it can."""
        if not hasattr(self.backend, "logits_and_pooled"):
            return f"its scoring backend {type(self.backend).__name__} does not pool hidden states"
        if not getattr(self.backend, "pools_hidden_states", False):
            return "its model has no final norm to read hidden states from"
        return None

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

    def score_with_embeddings(self, questions, trajectories):
        """(`score`'s scores, embeddings[q][t]): the newest step's embedding of each
        trajectory (a unit float32 numpy vector; None for an empty trajectory), from the
        scoring forward itself (module doc)."""
        return self._round(questions, trajectories, self.read, embed=True)

    def read_round(self, questions, trajectories, read: Callable[[torch.Tensor, int, list[int], list[int]], Any]):
        """`read(rows, n_steps, ids, positions)` of every non-empty trajectory, after one
        batched tokenization and one backend call for the whole round ([] for an empty one)."""
        return self._round(questions, trajectories, read, embed=False)[0]

    def _round(self, questions, trajectories, read, embed: bool):
        items, where = [], []
        for q, (question, trajs) in enumerate(zip(questions, trajectories)):
            for t, steps in enumerate(trajs):
                if steps:
                    items.append((question, steps))
                    where.append((q, t))
        scores: list[list[list[float]]] = [[[] for _ in trajs] for trajs in trajectories]
        embeddings: list[list[np.ndarray | None]] = [[None for _ in trajs] for trajs in trajectories]
        if not items:
            return scores, embeddings
        try:
            encoded = self._encode_round(items)
            spans = self._newest_step_spans(items, encoded) if embed else None
        except MarkerError as exc:
            q, t = where[exc.index] if exc.index is not None else ("?", "?")
            raise RewardError(f"reward {self.name!r}, question {q} trajectory {t}: {exc}") from exc
        sequences = [ids for ids, _ in encoded]
        positions = [pos for _, pos in encoded]
        if embed:
            rows, vectors = self.backend.logits_and_pooled(sequences, positions, spans)
            for (q, t), v in zip(where, vectors.numpy()):
                embeddings[q][t] = v
        else:
            rows = self.backend.logits_at(sequences, positions)     # each [n_positions, n_columns]
        for (q, t), (_, steps), (ids, pos), r in zip(where, items, encoded, rows):
            scores[q][t] = read(r, len(steps), ids, pos)
        return scores, embeddings

    def _newest_step_spans(self, items, encoded) -> list[tuple[int, int]]:
        """The token span [lo, hi) of each trajectory's newest step in its encoded ids: its
        own text's tokens, found by the tokenizer's character offsets in the marked text
        (or, for a PRM that encodes the text piece by piece, in the piece before the newest
        marker); where the marked text does not say where the step's text is, the text
        between the previous marker and its own."""
        t0 = time.perf_counter()
        marked = [self.render(question, list(steps)) for question, steps in items]
        enc = self.tokenizer([m.text for m in marked], add_special_tokens=self.add_special_tokens,
                             return_offsets_mapping=True)
        spans = []
        for i, (m, (ids, positions), (_, steps)) in enumerate(zip(marked, encoded, items)):
            if m.steps:
                start, end = m.steps[-1]
            else:
                start = m.spans[-2][1] if len(m.spans) > 1 else 0
                end = m.spans[-1][0]
            if list(enc["input_ids"][i]) == list(ids):
                spans.append(_token_span(enc["offset_mapping"][i], start, end, len(ids)))
                continue
            # Encoded piece by piece: the piece before the newest marker, encoded alone, is
            # the ids between the previous marker and the newest one.
            n = len(steps)
            first = positions[n - 2] + 1 if n > 1 else 0
            piece_start = m.spans[n - 2][1] if n > 1 else 0
            piece = self.tokenizer(m.text[piece_start:m.spans[n - 1][0]], return_offsets_mapping=True,
                                   add_special_tokens=self.add_special_tokens and n == 1)
            if list(piece["input_ids"]) != list(ids[first:positions[n - 1]]):
                exc = MarkerError("the newest step's tokens cannot be found in its input (it is not the marked text "
                                  "tokenized whole or piece by piece), so it has no embedding (search.embedder: prm)")
                exc.index = i
                raise exc
            lo, hi = _token_span(piece["offset_mapping"], start - piece_start, end - piece_start, len(piece["input_ids"]))
            spans.append((first + lo, first + hi))
        self._span_seconds += time.perf_counter() - t0
        return spans

    def read(self, rows: torch.Tensor, n_steps: int, ids: list[int], positions: list[int]) -> list[float]:
        """One score per step from the rows read at `positions` of `ids`; the first
        `n_steps` are the markers' (a subclass may read more positions: `tokenize`)."""
        return self.probabilities(rows)

    def probabilities(self, rows: torch.Tensor) -> list[float]:
        """One score per step from the rows read at its markers (`[n_steps, n_columns]`)."""
        return torch.softmax(rows.float(), dim=-1)[:, self.positive].tolist()

    def stats(self) -> dict[str, int]:
        out = self.backend.stats()
        if self._span_seconds:   # finding the steps' tokens is part of what embedding them costs
            out["embed_seconds"] = out.get("embed_seconds", 0.0) + self._span_seconds
        return out


def _token_span(offsets, start: int, end: int, n_tokens: int) -> tuple[int, int]:
    """[lo, hi): the tokens holding a character of text[start:end] (offsets: each token's
    [a, b) in the text; special tokens hold none). An empty step: the token after it."""
    lo = next((t for t, (a, b) in enumerate(offsets) if b > a and b > start), n_tokens - 1)
    hi = next((t for t in range(lo, len(offsets)) if offsets[t][1] > offsets[t][0] and offsets[t][0] >= end), n_tokens)
    return (lo, hi) if hi > lo else (lo, lo + 1)
