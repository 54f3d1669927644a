"""The token-classification PRM (Qwen2.5-Math-PRM convention): each step is followed by a
separator token, a classification head reads every separator, and the score of a step is
the probability of the positive label there:

    assistant text = "step 1<extra_0>step 2<extra_0>"   (inside the tokenizer's chat template,
                                                         with a system prompt and the question)
    score          = softmax(head logits at separator s)[positive_label]

Load options: `trust_remote_code` for models with their own modelling code (Qwen2.5-Math-PRM
needs it and loads through `AutoModel`); `auto_class`: `auto` reads the config's
architecture and uses `AutoModelForTokenClassification` for `*ForTokenClassification`
models, `AutoModel` otherwise. The head is checked when it loads (rewards/heads.py): a
checkpoint with its own code and no `trust_remote_code`, a bare body, a head initialised at
random, one output (a value head) or vocabulary logits (a causal LM) fail there, each with
one line saying what was loaded and what to set. Runs on a plain padded forward (the engine
serves causal LMs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ets.config import ConfigError
from ets.rewards.backends import forward_backend
from ets.rewards.heads import check_outputs, describe, load_pretrained
from ets.rewards.marker_prm import MarkerPRM
from ets.rewards.marking import (SENTINEL, MarkedText, MarkerError, chat_pieces, check_template_syntax, clean_step, mark_steps,
                             split_template, token_id)
from ets.rewards.options import RewardContext, check_dtype, choice

AUTO_CLASSES = ("auto", "token_classification", "model")


@dataclass
class TokenClassificationOptions:
    separator: str = "<extra_0>"      # one token, appended to every step
    positive_label: int = 1           # index of the "step is good" class
    num_labels: int | None = None     # checked against the head's outputs (default: whatever it has, >= 2)
    chat_template: bool | str = True  # true: the tokenizer's chat template, when it has one; false: `template`;
                                      # or a Jinja chat template to use instead of the tokenizer's
    system_prompt: str = "Please reason step by step, and put your final answer within \\boxed{}."
    template: str = "{question}\n{steps}"  # used when there is no chat template
    step_separator: str = ""          # text between one separator and the next step
    strip_steps: bool = True
    trust_remote_code: bool = False
    auto_class: str = "auto"          # auto | token_classification | model
    padding_side: str | None = None
    max_batch_tokens: int = 8192
    batch_invariant: bool = True      # one sequence per forward (rewards/backends.py ForwardBackend)
    device: str | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        if not self.separator:
            raise ValueError("option 'separator' must be a non-empty string, e.g. '<extra_0>'")
        if self.positive_label < 0:
            raise ValueError(f"option 'positive_label' = {self.positive_label} must be >= 0")
        split_template(self.template, "template")
        check_template_syntax(self.chat_template if isinstance(self.chat_template, str) else None, "chat_template")
        choice("auto_class", self.auto_class, AUTO_CLASSES)
        if self.padding_side is not None:
            choice("padding_side", self.padding_side, ("left", "right"))


class TokenClassificationPRM(MarkerPRM):
    Options = TokenClassificationOptions

    @staticmethod
    def check_tokenizer(tokenizer, options: TokenClassificationOptions, name: str) -> None:
        """What building this reward checks of its tokenizer before the weights load."""
        separator_id(tokenizer, options, name)

    @staticmethod
    def reads_trained_head(options: TokenClassificationOptions) -> bool:
        """Its scores come from a checkpoint's trained head, which a random `tiny:` model lacks."""
        return True

    def __init__(self, model, tokenizer, options: TokenClassificationOptions, name: str = "token_classification",
                 num_labels: int | None = None):
        """`num_labels`: the head's outputs, as `load_token_classifier` measured them."""
        sep_id = separator_id(tokenizer, options, name)
        num_labels = num_labels or options.num_labels or getattr(model.config, "num_labels", 2)
        if options.positive_label >= num_labels:
            raise ConfigError(f"reward {name!r}: positive_label {options.positive_label} but the head has {num_labels} labels")
        self.options = options
        own = getattr(tokenizer, "chat_template", None)
        self._jinja = options.chat_template if isinstance(options.chat_template, str) else None
        self._use_chat = bool(self._jinja) or (options.chat_template is True and bool(own))
        self._frames: dict[str, tuple[str, str]] = {}
        backend = forward_backend(model, tokenizer, list(range(num_labels)), options)
        # A rendered chat template already holds its special tokens (BOS etc.).
        super().__init__(name, tokenizer, backend, sep_id, options.positive_label, add_special_tokens=not self._use_chat)
        try:  # a template that cannot render a conversation fails here, not in the first round
            self._render_frame("What is 1 + 1?")
        except MarkerError as exc:
            raise ConfigError(f"reward {name!r}: {exc}") from exc

    def render(self, question: str, steps: list[str]) -> MarkedText:
        o = self.options
        steps = [clean_step(s, o.separator, o.strip_steps) for s in steps]
        head, tail = self._frame(question)
        return mark_steps(head, steps, o.separator, o.step_separator, tail)

    def _frame(self, question: str) -> tuple[str, str]:
        """Text before and after the steps (rendered once per question: every candidate
        of a round shares its question's frame)."""
        frames = self._frames
        if question not in frames:
            if len(frames) >= 1024:
                frames.clear()
            frames[question] = self._render_frame(question)
        return frames[question]

    def _render_frame(self, question: str) -> tuple[str, str]:
        if not self._use_chat:
            head, tail = split_template(self.options.template, "template")
            return head.replace("{question}", question), tail.replace("{question}", question)
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": SENTINEL}]
        if self.options.system_prompt:
            messages.insert(0, {"role": "system", "content": self.options.system_prompt})
        head, tail = chat_pieces(self.tokenizer, messages, self._jinja)
        return head, tail

    @classmethod
    def from_config(cls, options: TokenClassificationOptions, ctx: RewardContext):
        if ctx.model is None:
            raise ConfigError(f"reward {ctx.name!r} needs a model: set reward.model to a token-classification PRM")
        model, tokenizer, num_labels = load_token_classifier(ctx.model, options, ctx)
        return cls(model, tokenizer, options, ctx.name, num_labels)


def separator_id(tokenizer, options: TokenClassificationOptions, name: str) -> int:
    try:
        return token_id(tokenizer, options.separator, "step separator")
    except MarkerError as exc:
        raise ConfigError(f"reward {name!r}: {exc}") from exc


def load_token_classifier(path: str, options: TokenClassificationOptions, ctx: RewardContext):
    """(model in eval mode, tokenizer, number of labels), its head checked (rewards/heads.py):
    trained weights, all of the checkpoint used, and 2 or more label outputs (`num_labels` if set)."""
    loaded = load_pretrained(path, options.auto_class, name=ctx.name, trust_remote_code=options.trust_remote_code,
                             dtype=options.dtype or ctx.dtype, device=options.device or ctx.device,
                             check_tokenizer=lambda tok: separator_id(tok, options, ctx.name))
    num_labels = check_outputs(loaded, ctx.name, "labels")
    if options.num_labels not in (None, num_labels):
        raise ConfigError(f"reward {ctx.name!r}: option num_labels = {options.num_labels} but the head of {describe(loaded)} "
                          f"has {num_labels} outputs; set num_labels: {num_labels} or leave it out")
    return loaded.model, loaded.tokenizer, num_labels
