"""The value-head PRM: one scalar output per token, and the score of a step is its sigmoid
at the step's marker (Skywork-PRM's convention; also the Llemma PRMs of REBASE / ETS):

    text  = template with {question} and {steps} = "step 1\\nstep 2\\n"   (marker "\\n")
    score = sigmoid(value at marker s)

Where the value comes from (option `head`):
- `token_classification`: an `*ForTokenClassification` checkpoint with one label;
- `weights`: a body plus a `Linear(hidden, 1)` stored in the checkpoint under
  `head_weights` (Skywork-o1-Open-PRM: `v_head.summary`), applied to the last hidden state;
- `lm_logit`: a causal LM's logit of one token (`head_token`, default the marker), as the
  ETS and REBASE code read their Llemma PRM (the logit of ` ки` at each ` ки`);
- `lm_mean`: the mean of a causal LM's logits over its vocabulary, as the Easy-to-Hard
  reference reads its `llemma-7b-prm-*` checkpoints (their reward head is copied into
  every row of `lm_head`);
- `auto` (default): `token_classification` for such a checkpoint, else `weights`.
The head is checked when it loads (rewards/heads.py): it must have exactly one output, and
no weight may be initialised at random.

Tokenization (option `tokenize`): `pieces` (default) encodes the prompt and each step on
its own and puts the marker's id after each (Skywork's reference does this, so "\\n" never
merges into ".\\n"); `whole` tokenizes the text at once, as the others do. Runs on a
plain padded forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ets.config import ConfigError
from ets.rewards.backends import forward_backend
from ets.rewards.base import RewardError
from ets.rewards.heads import LinearHead, Loaded, check_outputs, describe, load_pretrained, read_tensors
from ets.rewards.marker_prm import MarkerPRM
from ets.rewards.marking import (MarkedText, MarkerError, clean_step, mark_steps, split_template, token_id,
                             tokenize_marked_batch, tokenize_pieces_batch)
from ets.rewards.options import RewardContext, check_dtype, choice

HEADS = ("auto", "token_classification", "weights", "lm_logit", "lm_mean")
TOKENIZE = ("pieces", "whole")


@dataclass
class ValueHeadOptions:
    marker: str = "\n"                  # one token after every step; the value is read there
    template: str = "{question}\n{steps}"
    step_separator: str = ""            # text between one marker and the next step
    strip_steps: bool = True
    add_special_tokens: bool = True     # e.g. BOS, as the tokenizer's own encode() adds it
    tokenize: str = "pieces"            # pieces | whole
    head: str = "auto"                  # auto | token_classification | weights | lm_logit | lm_mean
    head_weights: str = "v_head.summary"  # head=weights: prefix of the checkpoint's Linear(hidden, 1)
    head_token: str | int | None = None   # head=lm_logit: the token whose logit is the value (default: the marker)
    trust_remote_code: bool = False
    padding_side: str | None = None
    max_batch_tokens: int = 8192
    batch_invariant: bool = True        # one sequence per forward (rewards/backends.py ForwardBackend)
    device: str | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        if not self.marker:
            raise ValueError("option 'marker' must be a non-empty string, e.g. '\\n'")
        split_template(self.template, "template")
        choice("tokenize", self.tokenize, TOKENIZE)
        choice("head", self.head, HEADS)
        if self.head_token is not None and self.head != "lm_logit":
            raise ValueError(f"option 'head_token' is read only with head: lm_logit (head is {self.head!r})")
        if self.padding_side is not None:
            choice("padding_side", self.padding_side, ("left", "right"))


class ValueHeadPRM(MarkerPRM):
    Options = ValueHeadOptions

    @staticmethod
    def check_tokenizer(tokenizer, options: ValueHeadOptions, name: str) -> None:
        """What building this reward checks of its tokenizer before the weights load: the
        marker, and with `head: lm_logit` the head token, one token each."""
        marker_token(tokenizer, options, name)
        if options.head == "lm_logit":
            head_token(tokenizer, options, name)

    @staticmethod
    def reads_trained_head(options: ValueHeadOptions) -> bool:
        """A value head is trained (a random `tiny:` model has none); a causal LM's own
        logits (`lm_logit`, `lm_mean`) are not."""
        return options.head not in ("lm_logit", "lm_mean")

    def __init__(self, model, tokenizer, options: ValueHeadOptions, columns: list[int], name: str = "value_head"):
        """`columns`: the model's outputs whose mean is the value (one, except for lm_mean)."""
        marker_id = marker_token(tokenizer, options, name)
        self.options = options
        self._head, self._tail = split_template(options.template, "template")
        backend = forward_backend(model, tokenizer, columns, options)
        super().__init__(name, tokenizer, backend, marker_id, positive=0, add_special_tokens=options.add_special_tokens)

    def render(self, question: str, steps: list[str]) -> MarkedText:
        o = self.options
        steps = [clean_step(s, o.marker, o.strip_steps) for s in steps]
        return mark_steps(self._head.replace("{question}", question), steps, o.marker, o.step_separator,
                          self._tail.replace("{question}", question))

    def tokenize(self, marked):
        tokenize = tokenize_pieces_batch if self.options.tokenize == "pieces" else tokenize_marked_batch
        return tokenize(self.tokenizer, marked, self.marker_id, self.add_special_tokens)

    def probabilities(self, rows: torch.Tensor) -> list[float]:
        return torch.sigmoid(rows.float().mean(dim=-1)).tolist()

    @classmethod
    def from_config(cls, options: ValueHeadOptions, ctx: RewardContext):
        if ctx.model is None:
            raise ConfigError(f"reward {ctx.name!r} needs a model: set reward.model to a value-head PRM")
        if options.head in ("lm_logit", "lm_mean"):
            model, tokenizer, columns = _load_lm_head(ctx.model, options, ctx)
        else:
            model, tokenizer = _load_value_head(ctx.model, options, ctx)
            columns = [0]
        return cls(model, tokenizer, options, columns, ctx.name)


def marker_token(tokenizer, options: ValueHeadOptions, name: str) -> int:
    try:
        return token_id(tokenizer, options.marker, "marker")
    except MarkerError as exc:
        raise ConfigError(f"reward {name!r}: {exc}") from exc


def head_token(tokenizer, options: ValueHeadOptions, name: str) -> int:
    """`head: lm_logit`'s token (`head_token`, else the marker): the logit read as the value."""
    try:
        return token_id(tokenizer, options.head_token if options.head_token is not None else options.marker, "head token")
    except MarkerError as exc:
        raise ConfigError(f"reward {name!r}: {exc}") from exc


def _load_lm_head(path: str, options: ValueHeadOptions, ctx: RewardContext):
    """A causal LM whose own logits hold the value: one token's (lm_logit) or their mean."""
    from ets.models.load import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(path)
    ValueHeadPRM.check_tokenizer(tokenizer, options, ctx.name)  # before the weights load
    columns = [head_token(tokenizer, options, ctx.name)] if options.head == "lm_logit" else list(range(len(tokenizer)))
    model, tokenizer = load_causal_lm(path, device=options.device or ctx.device, dtype=options.dtype or ctx.dtype)
    return model, tokenizer, columns


def _load_value_head(path: str, options: ValueHeadOptions, ctx: RewardContext):
    """A one-label token classifier, or a body with the checkpoint's `head_weights` on top."""
    prefix = options.head_weights
    auto_class = {"auto": "auto", "token_classification": "token_classification", "weights": "model"}[options.head]
    loaded = load_pretrained(path, auto_class, name=ctx.name, trust_remote_code=options.trust_remote_code,
                             dtype=options.dtype or ctx.dtype, device=options.device or ctx.device,
                             may_leave=(prefix + ".", "lm_head.", "embed_out."),
                             check_tokenizer=lambda tok: marker_token(tok, options, ctx.name))
    if getattr(loaded.model, "base_model", loaded.model) is loaded.model:   # a bare body: the head is in the weights
        loaded = loaded._replace(model=_with_head(loaded, prefix, ctx.name))
    check_outputs(loaded, ctx.name, "value")
    return loaded.model, loaded.tokenizer


def _with_head(loaded: Loaded, prefix: str, name: str) -> LinearHead:
    tensors = read_tensors(loaded.path, prefix)
    if "weight" not in tensors:
        others = f" (its unused weights: {', '.join(loaded.unused[:4])})" if loaded.unused else ""
        raise RewardError(
            f"reward {name!r}: {describe(loaded)} has no value head: no weights {prefix}.weight in the checkpoint{others}; "
            "set reward.options.head_weights to the prefix of its Linear(hidden, 1), or head: lm_logit or lm_mean "
            "when the causal LM's own logits are the value"
        )
    weight = tensors["weight"]
    hidden = loaded.model.config.hidden_size
    if weight.dim() != 2 or weight.shape[1] != hidden:
        raise RewardError(f"reward {name!r}: {prefix}.weight in {loaded.path!r} has shape {list(weight.shape)}, "
                          f"not [outputs, {hidden}]: it is not a head over this body's hidden states")
    return LinearHead(loaded.model, weight, tensors.get("bias"), name=f"{type(loaded.model).__name__} + {prefix}")
