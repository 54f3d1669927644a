"""The root prompt the way an instruct model expects it: a chat turn, or raw text.

    policy.chat_template: auto     the tokenizer's chat template when it has one, else raw text
                          true     the tokenizer's chat template (an error if it has none)
                          false    raw text: `prompt_template` filled with the question
                          <jinja>  this Jinja template, inline or a file path (search-and-learn's
                                   `custom_chat_template`)

With a chat template the conversation is an optional system turn (`policy.system_prompt`)
and one user turn (`prompt_template` filled with the question, surrounding whitespace
stripped, as chat turns are written), rendered with the assistant's turn opened
(`add_generation_prompt`); the search's steps continue inside that turn, and the model's
end-of-turn token (an EOS of its generation config) ends a trajectory. The text is exactly
what `tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`
returns, and is tokenized without adding special tokens again (the template wrote them).
`policy.chat_template_kwargs` are passed to the template: Llama 3's template writes today's
date into its system turn unless given `date_string`, which would make a run's prompts
depend on the day it ran.

Without one, a `system_prompt` is written before the prompt as plain text, followed by a
blank line.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

from ets.config import ConfigError, PolicyConfig

log = logging.getLogger(__name__)


class PromptFormat(NamedTuple):
    """How a policy's root prompt is written: `template` is the Jinja chat template to
    render with (None: raw text), `source` says where it came from, for people."""

    template: str | None
    source: str  # "the tokenizer's chat template", "policy.chat_template (file ...)", "raw text"

    @property
    def chat(self) -> bool:
        return self.template is not None


def _is_jinja(text: str) -> bool:
    return "{%" in text or "{{" in text


def prompt_format(tokenizer, config: PolicyConfig) -> PromptFormat:
    """The `PromptFormat` a policy config means for this tokenizer; a ConfigError for a chat
    template that cannot be had (true without one, a missing file)."""
    setting = config.chat_template
    own = getattr(tokenizer, "chat_template", None)
    if setting is False or (setting == "auto" and not own):
        return PromptFormat(None, "raw text (policy.prompt_template)")
    if setting is True or setting == "auto":
        template = own if isinstance(own, str) else _named_default(own)
        if not template:
            raise ConfigError(
                f"policy.chat_template: true, but the tokenizer of {config.model!r} has no chat template; give "
                f"the Jinja template (policy.chat_template: PATH or inline), or set policy.chat_template: false")
        return PromptFormat(template, "the tokenizer's chat template")
    if _is_jinja(setting):
        return PromptFormat(setting, "policy.chat_template (inline Jinja)")
    path = Path(setting).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"policy.chat_template: {setting!r} is neither a Jinja template (no {{% or {{{{) nor a file; give "
            f"a template file's path, the template inline, or auto / true / false")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"policy.chat_template: cannot read {str(path)!r} ({exc}); give a UTF-8 Jinja file") from None
    if not text.strip():
        raise ConfigError(f"policy.chat_template: {str(path)!r} is empty; give a Jinja chat template")
    return PromptFormat(text, f"policy.chat_template (file {str(path)})")


def _named_default(templates: Any) -> str | None:
    """A tokenizer may hold several named templates (a dict); the chat one is "default"."""
    if isinstance(templates, dict):
        return templates.get("default")
    return None


def messages(config: PolicyConfig, question: str) -> list[dict[str, str]]:
    """The conversation a chat-formatted root holds: a system turn if set, the user's."""
    turns = [{"role": "system", "content": config.system_prompt}] if config.system_prompt else []
    return turns + [{"role": "user", "content": config.prompt_template.replace("{question}", question).strip()}]


def render(tokenizer, config: PolicyConfig, fmt: PromptFormat, question: str) -> tuple[str, list[int]]:
    """The root text of a search for `question` and its token ids."""
    if not fmt.chat:
        text = config.prompt_template.replace("{question}", question)
        if config.system_prompt:
            text = config.system_prompt + "\n\n" + text
        return text, list(tokenizer(text)["input_ids"])
    try:
        text = tokenizer.apply_chat_template(messages(config, question), chat_template=fmt.template,
                                             add_generation_prompt=True, tokenize=False,
                                             **config.chat_template_kwargs)
    except Exception as exc:  # jinja2's TemplateError and the template's own raise_exception
        raise ConfigError(f"{fmt.source} could not render a prompt: {type(exc).__name__}: {exc}; fix the template "
                          f"or set policy.chat_template: false") from None
    return text, list(tokenizer(text, add_special_tokens=False)["input_ids"])


def format_notes(tokenizer, config: PolicyConfig, fmt: PromptFormat) -> list[str]:
    """Warnings about how prompts are written: an instruct model (its tokenizer has a chat
    template) given raw text that holds none of its special tokens (a hand-written chat
    frame, as the ETS code's Llama preset, is not warned about); a system prompt written
    as plain text."""
    notes = []
    if not fmt.chat and getattr(tokenizer, "chat_template", None):
        specials = [t for t in getattr(tokenizer, "all_special_tokens", []) if len(t) > 1]
        frame = config.prompt_template + (config.system_prompt or "")
        if not any(t in frame for t in specials):
            notes.append(f"policy {config.model!r} has a chat template but gets raw text (policy.chat_template: "
                         f"false): an instruct model prompted outside its chat format usually answers worse; "
                         f"set policy.chat_template: auto")
    if not fmt.chat and config.chat_template_kwargs:
        notes.append(f"policy.chat_template_kwargs ({', '.join(config.chat_template_kwargs)}) have no effect: the "
                     "prompts are raw text, with no chat template to pass them to (set policy.chat_template)")
    if not fmt.chat and config.system_prompt:
        notes.append("policy.system_prompt is written as plain text before the prompt: the policy has no chat "
                     "template (set policy.chat_template to use one)")
    return notes


def log_format_notes(tokenizer, config: PolicyConfig, fmt: PromptFormat) -> None:
    for note in format_notes(tokenizer, config, fmt):
        log.warning(note)
