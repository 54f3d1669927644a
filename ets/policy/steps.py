"""Cutting generated tokens into one reasoning step; shared by every policy backend.

A step ends at the first of: the step delimiter (kept, so the path can be continued as-is),
EOS (dropped), or `max_step_tokens` (cut). Policies generate token by token; this module
decides where the step ends and what it is called, so backends agree exactly.

The root prompt is written by ets/policy/chat.py (a chat turn or raw text). The model's
context is handled here too, the same way for every backend: `fit_prompt`
refuses a prompt that leaves no room to generate, or keeps the end of its question
(`policy.prompt_overflow`),
`new_token_cap` caps a request's new tokens so its path never passes the context, and
`at_context` renames a step that fills the context to finish "context".
"""

from __future__ import annotations

from typing import Callable, Sequence

from ets.engine.sampling import StopStrings
from ets.models.load import eos_token_ids
from ets.policy.base import Prompt, PromptTooLong, Step
from ets.policy.chat import PromptFormat, log_format_notes, prompt_format, render

PROMPT_OVERFLOW = ("error", "truncate")


def format_prompt(tokenizer, template: str, question: str) -> tuple[str, list[int]]:
    """The root of a search: the templated question and its tokens (BOS added when the
    tokenizer adds one: the policy sees what it saw in training). `{question}` is the only
    placeholder; every other brace is literal text (math prompts say `\\boxed{}`), so the
    template is filled with `str.replace`, not `str.format`."""
    text = template.replace("{question}", question)
    return text, list(tokenizer(text)["input_ids"])


def model_context(model_config, override: int | None = None) -> int | None:
    """The most tokens a path may hold: `override` (`policy.max_context`) if given, else the
    model's `max_position_embeddings` (None if the config has none)."""
    if override is not None:
        return int(override)
    value = getattr(model_config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def prompt_room(context: int, max_step_tokens: int) -> int:
    """The tokens a truncated prompt leaves free: one whole step, or half the context when a
    step is longer than that."""
    return min(max_step_tokens, context // 2)


def fit_prompt(question: str, write: Callable[[str], tuple[str, list[int]]], context: int | None, overflow: str,
               max_step_tokens: int, tokenizer) -> Prompt:
    """The root prompt `write(question)` (text, token ids) if it leaves room for at least
    one new token in `context`. Otherwise, with `overflow="error"`, `PromptTooLong`; with
    "truncate", the prompt of the question's last part: the template around it (BOS, a chat
    turn's frame, a system prompt, instructions after the question) stays whole, and the
    question keeps the most of its last tokens that leave `prompt_room` free. `question` of
    the result is that part (the reward scores the steps against it), `truncated_from` the
    whole prompt's length. Only the end of a long question is tokenized again to cut it."""
    text, ids = write(question)
    n = len(ids)
    if context is None or n < context:
        return Prompt(text, ids)
    keep = max(1, context - prompt_room(context, max_step_tokens))
    if overflow != "truncate":
        raise PromptTooLong(
            f"its prompt is {n} tokens and the model's context is {context} (no room to generate); shorten "
            f"the question or policy.prompt_template, or set policy.prompt_overflow=truncate to keep the end of "
            f"the question in a prompt of {keep} tokens (policy.max_context overrides the model's "
            f"max_position_embeddings)")
    frame = len(write("")[1])
    budget = keep - frame
    while budget >= 1:
        kept = question_tail(tokenizer, question, budget)
        text, ids = write(kept)
        if len(ids) <= keep:
            return Prompt(text, ids, truncated_from=n, question=kept)
        budget -= len(ids) - keep  # the cut text tokenized otherwise beside the template
    raise PromptTooLong(
        f"its prompt is {n} tokens and the model's context is {context}; without the question it is already "
        f"{frame} tokens, and a truncated prompt may hold {keep}: shorten policy.prompt_template or "
        f"policy.system_prompt, or raise policy.max_context")


def question_tail(tokenizer, question: str, n_tokens: int) -> str:
    """The end of `question` that tokenizes to at most `n_tokens` tokens, cut where a token
    starts. Only the question's last characters are tokenized (a window widened until it
    holds more than `n_tokens` tokens), so a megabyte-long question costs no more than a
    short one; the window's first token, maybe cut in two, is never kept."""
    window = 8 * n_tokens + 64
    while True:
        chunk = question[-window:] if window < len(question) else question
        try:
            encoded = tokenizer(chunk, add_special_tokens=False, return_offsets_mapping=True)
            offsets = encoded["offset_mapping"]
        except (NotImplementedError, ValueError, TypeError, KeyError):  # a slow tokenizer has no offsets
            encoded, offsets = tokenizer(chunk, add_special_tokens=False), None
        ids = encoded["input_ids"]
        if len(ids) > n_tokens or chunk is question:
            break
        window *= 4
    if len(ids) <= n_tokens:
        return question
    first = len(ids) - n_tokens
    if offsets is not None:
        return chunk[offsets[first][0]:]
    return tokenizer.decode(ids[first:], skip_special_tokens=False)


def new_token_cap(path_len: int, context: int | None, max_step_tokens: int) -> int:
    """New tokens a request may generate: `max_step_tokens`, or what is left of the context
    (0 when the path already fills it)."""
    if context is None:
        return max_step_tokens
    return max(0, min(max_step_tokens, context - path_len))


def at_context(step: Step, path_len: int, context: int | None) -> Step:
    """`step` with finish "context" if it leaves its path at the context (a step that ended
    on EOS keeps "eos": it ended the trajectory itself)."""
    if context is not None and step.finish != "eos" and path_len + len(step.token_ids) >= context:
        return step._replace(finish="context")
    return step


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


class PromptsAndSteps:
    """What every policy backend shares: the root prompt of a question, fitted to the
    context, and one `StepCutter` per step length, so all backends cut steps alike.
    Needs `tokenizer`, `config` (PolicyConfig), `search` (SearchConfig) and
    `context_tokens` on the instance."""

    def format_prompt(self, question: str) -> Prompt:
        def write(text: str) -> tuple[str, list[int]]:
            return render(self.tokenizer, self.config, self.prompt_format, text)

        return fit_prompt(question, write, self.context_tokens, self.config.prompt_overflow,
                          self.search.max_step_tokens, self.tokenizer)

    @property
    def prompt_format(self) -> PromptFormat:
        """How this policy writes its root prompts (ets/policy/chat.py), resolved on first use,
        when its notes (an instruct model given raw text) are logged once."""
        if getattr(self, "_prompt_format", None) is None:
            self._prompt_format = prompt_format(self.tokenizer, self.config)
            log_format_notes(self.tokenizer, self.config, self._prompt_format)
        return self._prompt_format

    def cutter(self, max_step_tokens: int) -> StepCutter:
        if not hasattr(self, "_cutters"):
            self._cutters: dict[int, StepCutter] = {}
        if max_step_tokens not in self._cutters:
            self._cutters[max_step_tokens] = StepCutter(self.tokenizer, self.config.step_delimiter, max_step_tokens)
        return self._cutters[max_step_tokens]
