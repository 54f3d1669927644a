"""Cutting generated tokens into one reasoning step; shared by every policy backend.

A step ends at the first of: the step delimiter (kept, so the path can be continued as-is),
EOS (dropped), or `max_step_tokens` (cut). Policies generate token by token; this module
decides where the step ends and what it is called, so backends agree exactly.
"""

from __future__ import annotations

from typing import Sequence

from ets.engine.sampling import StopStrings
from ets.models.load import eos_token_ids
from ets.policy.base import Step


def format_prompt(tokenizer, template: str, question: str) -> tuple[str, list[int]]:
    """The root of a search: the templated question and its tokens (BOS added when the
    tokenizer adds one: the policy sees what it saw in training). `{question}` is the only
    placeholder; every other brace is literal text (math prompts say `\\boxed{}`), so the
    template is filled with `str.replace`, not `str.format`."""
    text = template.replace("{question}", question)
    return text, list(tokenizer(text)["input_ids"])


class StepCutter:
    """Decides, for one tokenizer and delimiter, where a generated step ends."""

    def __init__(self, tokenizer, delimiter: str, max_step_tokens: int):
        self.tokenizer = tokenizer
        self.delimiter = delimiter
        self.max_step_tokens = max_step_tokens
        self.eos_ids = eos_token_ids(tokenizer=tokenizer)
        self._stop = StopStrings(tokenizer, [delimiter])

    def finished(self, new_tokens: Sequence[int]) -> bool:
        """True once `new_tokens` form a complete step (checked after every token)."""
        if not new_tokens:
            return False
        return (
            new_tokens[-1] in self.eos_ids
            or len(new_tokens) >= self.max_step_tokens
            or self.ends_at_delimiter(new_tokens)
        )

    def ends_at_delimiter(self, tokens: Sequence[int]) -> bool:
        """Whether the delimiter appears in the text of the last few tokens: the engine's
        stop-string rule (`ets.engine.sampling.StopStrings`), so the backends cut alike."""
        return self._stop.found(tokens)

    def cut(self, new_tokens: Sequence[int]) -> Step:
        """The step made of the first tokens of `new_tokens`, with why it ended."""
        tokens: list[int] = []
        for tok in new_tokens[: self.max_step_tokens]:
            if tok in self.eos_ids:
                return Step(self._decode(tokens), tokens, "eos")
            tokens.append(tok)
            if self.ends_at_delimiter(tokens):
                return Step(self._decode(tokens), tokens, "stop")
        return Step(self._decode(tokens), tokens, "length")

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)
