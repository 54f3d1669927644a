"""The token-classification PRM (Qwen2.5-Math-PRM convention): each step is followed by a
separator token, a classification head reads every separator, and the score of a step is
the probability of the positive label there:

    assistant text = "step 1<extra_0>step 2<extra_0>"   (inside the tokenizer's chat template,
                                                         with a system prompt and the question)
    score          = softmax(head logits at separator s)[positive_label]

Load options: `trust_remote_code` for models with their own modelling code (Qwen2.5-Math-PRM
needs it and loads through `AutoModel`); `auto_class`: `auto` reads the config's
architecture and uses `AutoModelForTokenClassification` for `*ForTokenClassification`
models, `AutoModel` otherwise. Runs on a plain padded forward (the engine serves causal LMs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ets.config import ConfigError
from rewards.backends import ForwardBackend
from rewards.marker_prm import MarkerPRM
from rewards.marking import MarkedText, MarkerError, clean_step, mark_steps, split_template, token_id
from rewards.options import RewardContext, choice

SENTINEL = "\x00ETS_STEPS\x00"   # stands for the steps while the chat template is rendered
AUTO_CLASSES = ("auto", "token_classification", "model")


@dataclass
class TokenClassificationOptions:
    separator: str = "<extra_0>"      # one token, appended to every step
    positive_label: int = 1           # index of the "step is good" class
    num_labels: int | None = None     # default: the model's config.num_labels
    chat_template: bool = True        # wrap in the tokenizer's chat template, when it has one
    system_prompt: str = "Please reason step by step, and put your final answer within \\boxed{}."
    template: str = "{question}\n{steps}"  # used when there is no chat template
    step_separator: str = ""          # text between one separator and the next step
    strip_steps: bool = True
    trust_remote_code: bool = False
    auto_class: str = "auto"          # auto | token_classification | model
    padding_side: str | None = None
    max_batch_tokens: int = 8192
    device: str | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        if not self.separator:
            raise ValueError("option 'separator' must be a non-empty string, e.g. '<extra_0>'")
        if self.positive_label < 0:
            raise ValueError(f"option 'positive_label' = {self.positive_label} must be >= 0")
        split_template(self.template, "template")
        choice("auto_class", self.auto_class, AUTO_CLASSES)
        if self.padding_side is not None:
            choice("padding_side", self.padding_side, ("left", "right"))


class TokenClassificationPRM(MarkerPRM):
    Options = TokenClassificationOptions

    def __init__(self, model, tokenizer, options: TokenClassificationOptions, name: str = "token_classification"):
        try:
            sep_id = token_id(tokenizer, options.separator, "step separator")
        except MarkerError as exc:
            raise ConfigError(f"reward {name!r}: {exc}") from exc
        num_labels = options.num_labels or getattr(model.config, "num_labels", 2)
        if options.positive_label >= num_labels:
            raise ConfigError(f"reward {name!r}: positive_label {options.positive_label} but the head has {num_labels} labels")
        self.options = options
        self._use_chat = options.chat_template and bool(getattr(tokenizer, "chat_template", None))
        backend = ForwardBackend.for_tokenizer(model, tokenizer, list(range(num_labels)), options.padding_side, options.max_batch_tokens)
        # A rendered chat template already holds its special tokens (BOS etc.).
        super().__init__(name, tokenizer, backend, sep_id, options.positive_label, add_special_tokens=not self._use_chat)

    def render(self, question: str, steps: list[str]) -> MarkedText:
        o = self.options
        steps = [clean_step(s, o.separator, o.strip_steps) for s in steps]
        head, tail = self._frame(question)
        return mark_steps(head, steps, o.separator, o.step_separator, tail)

    def _frame(self, question: str) -> tuple[str, str]:
        """Text before and after the steps."""
        if not self._use_chat:
            head, tail = split_template(self.options.template, "template")
            return head.replace("{question}", question), tail.replace("{question}", question)
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": SENTINEL}]
        if self.options.system_prompt:
            messages.insert(0, {"role": "system", "content": self.options.system_prompt})
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        head, _, tail = text.partition(SENTINEL)
        return head, tail

    @classmethod
    def from_config(cls, options: TokenClassificationOptions, ctx: RewardContext):
        if ctx.model is None:
            raise ConfigError(f"reward {ctx.name!r} needs a model: set reward.model to a token-classification PRM")
        model, tokenizer = load_token_classifier(ctx.model, options, ctx)
        return cls(model, tokenizer, options, ctx.name)


def load_token_classifier(path: str, options: TokenClassificationOptions, ctx: RewardContext):
    """(model in eval mode, tokenizer) with the Auto class the options or the config ask for."""
    import transformers

    from ets.models.load import ModelLoadError, check_model_exists, resolve_dtype

    check_model_exists(path)
    remote = options.trust_remote_code
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=remote)
    config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=remote)
    kind = options.auto_class
    if kind == "auto":
        archs = getattr(config, "architectures", None) or []
        kind = "token_classification" if any(a.endswith("ForTokenClassification") for a in archs) else "model"
    auto = {"token_classification": transformers.AutoModelForTokenClassification, "model": transformers.AutoModel}[kind]
    try:
        model = auto.from_pretrained(path, dtype=resolve_dtype(options.dtype or ctx.dtype), trust_remote_code=remote)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"reward {ctx.name!r}: could not load {path!r} with {auto.__name__}: {exc}") from exc
    return model.to(options.device or ctx.device).eval(), tokenizer
