"""Sampling parameters, next-token sampling, and stop conditions.

Every sequence has its own random stream, keyed by its seed (the engine derives it from
the request's own seed and j, or from the call's seed and the sample's index in the call)
and read at the position of the token being drawn: the uniform for position t of seed s is
SplitMix64's t-th output from the state splitmix(s) (counter-based, so no generator state
to carry, and one batched op draws every row's). A sample thus depends only on that seed,
its position and the model: not on which other sequences shared its batch, nor on
preemption or cache hits. The token is the inverse CDF of that uniform: one random number
per row, where the Gumbel-max trick would need one per vocabulary entry (152k per row for
Qwen). Temperature 0 is greedy (argmax, nothing drawn). Filtering follows `transformers`'
order: temperature, then top-k, then top-p.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                       # 0 = off
    stop_token_ids: frozenset = frozenset()
    stop_strings: tuple = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


# What draws the tokens, as run provenance records it (ets/app/provenance.py): a change of
# rule changes every sampled result, so an output of the old rule must not be resumed.
STREAMS = "splitmix64 position streams, inverse CDF"
# ... and what the engine (and the hf backend) drew with before this rule existed.
STREAMS_BEFORE = "a torch.Generator per sequence, exponential race"

_WORD = 1 << 64


def _int64(c: int) -> int:
    """A 64-bit constant as the signed int64 torch stores (its arithmetic wraps mod 2^64)."""
    return c - _WORD if c >= 1 << 63 else c


_GOLDEN, _MIX1, _MIX2 = _int64(0x9E3779B97F4A7C15), _int64(0xBF58476D1CE4E5B9), _int64(0x94D049BB133111EB)


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic: it copies the sign bit)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _splitmix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's step and output function, elementwise (Steele et al., 2014)."""
    x = x + _GOLDEN
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    return x ^ _shr(x, 31)


def uniforms(seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Float64 in [0, 1): the draw at `positions[b]` of the stream of `seeds[b]` (int64)."""
    state = _splitmix(seeds)  # mixed first, so that neighbouring seeds' streams are unrelated
    return _shr(_splitmix(state + positions * _GOLDEN), 11).double() * 2.0 ** -53


def sample(logits: torch.Tensor, params: SamplingParams, seeds: Sequence[int] | None,
           positions: Sequence[int] | None) -> list[int]:
    """One token per row of `logits` [B, V]: row b's is drawn at `positions[b]` of the
    stream of `seeds[b]` (both unused when greedy)."""
    return sample_tensor(logits, params, seeds, positions).tolist()


def sample_tensor(logits: torch.Tensor, params: SamplingParams, seeds: Sequence[int] | torch.Tensor | None,
                  positions: Sequence[int] | torch.Tensor | None) -> torch.Tensor:
    """`sample` as an int64 tensor [B] on the logits' device (`seeds`, `positions`: lists,
    or int64 tensors on that device)."""
    if params.greedy:  # the first largest, as argmax: on the CPU max's indices are 1.6x (bfloat16 4x) faster
        return logits.max(dim=-1).indices
    logits = logits.float()
    if params.temperature != 1.0:  # x / 1.0 is x: skipping it changes no bit
        logits = logits / params.temperature
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        # Drop the tail whose mass lies beyond top_p; the most likely token always stays.
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        beyond = probs.cumsum(dim=-1) - probs > params.top_p
        sorted_logits = sorted_logits.masked_fill(beyond, float("-inf"))
        logits = torch.empty_like(logits).scatter_(-1, order, sorted_logits)
    probs = logits.softmax(dim=-1)
    dev = logits.device
    u = uniforms(torch.as_tensor(seeds, dtype=torch.long, device=dev), torch.as_tensor(positions, dtype=torch.long, device=dev))
    cdf = probs.double().cumsum(dim=-1)
    # The first token whose cdf exceeds u * total: a token of probability 0 (filtered out)
    # has the cdf of the one before it, so it is never the first to exceed it.
    picked = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).clamp_(max=probs.shape[-1] - 1)
    # u * total can round up to total itself: then the clamp lands on the last token,
    # which may be filtered out; take the most likely one instead (probability ~2^-53).
    # (The argmax, a pass over the whole vocabulary, only when some row needs it.)
    dropped = probs.gather(-1, picked) == 0
    if bool(dropped.any()):
        picked = torch.where(dropped, probs.max(dim=-1, keepdim=True).indices, picked)
    return picked.squeeze(-1)


def sample_rows(logits: torch.Tensor, params: Sequence[SamplingParams],
                seeds: Sequence[int | None], positions: Sequence[int]) -> list[int]:
    """One token per row of `logits` [B, V]: row b sampled under `params[b]` at
    `positions[b]` of the stream of `seeds[b]`. Rows with the same parameters are sampled
    as one batch (in an engine call they all are: one batch, no copy)."""
    if not params:
        return []
    if all(p is params[0] for p in params):  # identity, not equality: no hashing per row
        return sample(logits, params[0], seeds, positions)
    groups: dict[SamplingParams, list[int]] = {}
    for b, p in enumerate(params):
        groups.setdefault(p, []).append(b)
    tokens = [0] * len(params)
    for p, rows in groups.items():
        index = torch.tensor(rows, dtype=torch.long, device=logits.device)
        picked = sample(logits.index_select(0, index), p, [seeds[b] for b in rows], [positions[b] for b in rows])
        for b, tok in zip(rows, picked):
            tokens[b] = tok
    return tokens


class StopStrings:
    """The one rule for stop strings, shared by the engine (`StopChecker`) and the policies'
    step cutting (ets/policy/steps.py), so both stop at the same token.

    Checked after every new token, so the first appearance stops: a string has appeared
    once the decoded text of the last `window` tokens contains it. A window of 4 tokens per
    character of the longest string (+4) covers byte-level tokenizers, where one character
    may take up to 4 tokens, without decoding the whole output each time. Only a token
    whose own text could complete a string decodes anything (`token_flags`): a string
    first appears at the token that writes its last character, so the others cannot.
    """

    def __init__(self, tokenizer, strings: Sequence[str]):
        self.tokenizer = tokenizer
        self.strings = tuple(strings)
        self.window = 4 * max((len(s) for s in self.strings), default=0) + 4
        self.flags = _cached_flags(tokenizer, self.strings) if self.strings else []

    def found(self, tokens: Sequence[int], start: int = 0) -> bool:
        """Whether one of the strings appears in the text of the last `window` tokens of
        `tokens[start:]`, completed by the last of them (checked after every token, where it
        first appears)."""
        tok = tokens[-1]
        if tok < len(self.flags) and not self.flags[tok]:
            return False
        tail = self.tokenizer.decode(list(tokens[max(start, len(tokens) - self.window):]), skip_special_tokens=False)
        return any(s in tail for s in self.strings)


class StopChecker:
    """Decides after each new token whether a sequence is done, and why.

    finish reasons: "eos" (an EOS token; kept in the output), "stop" (a stop token id or
    a stop string, found as `StopStrings` says; the tokens that complete it are kept),
    "length" (max_new_tokens).
    """

    def __init__(self, params: SamplingParams, eos_ids: set[int], tokenizer=None):
        self.params = params
        self.eos_ids = set() if params.ignore_eos else set(eos_ids)
        self.stop_ids = set(params.stop_token_ids)
        if params.stop_strings and tokenizer is None:
            raise ValueError("stop strings need a tokenizer: pass tokenizer= to Engine.from_pretrained")
        self.strings = StopStrings(tokenizer, params.stop_strings) if params.stop_strings else None
        self._tensors: dict[torch.device, tuple[torch.Tensor | None, torch.Tensor | None]] = {}

    def may_finish(self, tokens: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """[B] bool, on the tokens' device: the rows that `finish` might end, given each
        one's newest token and how many new tokens its output holds with it (every row
        it ends, and also some a stop string's last character only might end). For a
        batch of rows, so that `finish` runs on those rows alone."""
        ids, flags = self._tensors_on(tokens.device)
        mask = new >= self.params.max_new_tokens
        if ids is not None:
            mask |= torch.isin(tokens, ids)
        if flags is not None:  # (a token past the flags' end is decoded: StopStrings.found)
            mask |= tokens >= flags.numel()
            if flags.numel():
                mask |= flags[tokens.clamp(max=flags.numel() - 1)]
        return mask

    def _tensors_on(self, device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The stop and EOS ids, and the stop strings' token flags, as tensors on `device`
        (None: there are none)."""
        if device not in self._tensors:
            ids = sorted(self.eos_ids | self.stop_ids)
            flags = self.strings.flags if self.strings is not None else None
            self._tensors[device] = (torch.tensor(ids, dtype=torch.long, device=device) if ids else None,
                                     None if flags is None else torch.tensor(flags, dtype=torch.bool, device=device))
        return self._tensors[device]

    def finish(self, tokens: list[int], start: int = 0) -> str | None:
        """Why the output `tokens[start:]` ends here, after its newest token (None: it goes on).
        `start` spares copying a sequence's output out of its tokens at every step."""
        tok = tokens[-1]
        if tok in self.eos_ids:
            return "eos"
        if tok in self.stop_ids:
            return "stop"
        if self.strings is not None and self.strings.found(tokens, start):
            return "stop"
        if len(tokens) - start >= self.params.max_new_tokens:
            return "length"
        return None


# token_flags per tokenizer and stop strings: computed once (a decode of the whole
# vocabulary), shared by every engine call and step cutter on that tokenizer.
_FLAGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _cached_flags(tokenizer, strings: tuple[str, ...]) -> list[bool]:
    try:
        per_tokenizer = _FLAGS.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced: not cached
        return token_flags(tokenizer, strings)
    if strings not in per_tokenizer:
        per_tokenizer[strings] = token_flags(tokenizer, strings)
    return per_tokenizer[strings]


def token_flags(tokenizer, strings: tuple[str, ...]) -> list[bool]:
    """Per token id: whether that token's text could complete one of `strings`: it holds
    a string's last character, or a partial UTF-8 byte. A token's text is read both alone
    and after another token (decode([a, i]) less decode([a])): some decoders drop a lone
    token's leading space (SentencePiece's "▁" tokens), which after other text they keep."""
    n = len(tokenizer)
    alone = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=False)
    anchor = next((i for i, t in enumerate(alone) if t.isalnum()), None)
    after = alone
    if anchor is not None:
        head = alone[anchor]
        pairs = tokenizer.batch_decode([[anchor, i] for i in range(n)], skip_special_tokens=False)
        after = [t[len(head):] if t.startswith(head) else t for t in pairs]
    last = {s[-1] for s in strings}
    return ["\ufffd" in t or "\ufffd" in u or any(ch in t or ch in u for ch in last) for t, u in zip(alone, after)]
