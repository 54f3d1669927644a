"""Loading a PRM whose scores come from a head, and checking that the head is the one read.

A wrong head gives numbers, not errors: transformers loads a checkpoint into whatever class
it is asked for, initialising missing weights at random and dropping unused ones (its load
report says they "can be ignored"), and a bare body's hidden states index like logits. So
each head PRM is checked when it loads, before it scores anything:

1. custom code: a checkpoint whose config maps an Auto class to its own modelling code
   (`auto_map`, e.g. Qwen2.5-Math-PRM) needs `trust_remote_code`; without it transformers
   loads its built-in body of the same model type and drops the head;
2. weights: none initialised at random (missing from the checkpoint), none of the
   checkpoint's left unused (except those the caller reads itself, e.g. a value head's);
3. outputs: one probe forward; the model must return logits with the number of outputs
   the PRM reads (`check_outputs`).
Each failure is one `RewardError` line saying what was loaded and what to set.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, NamedTuple

import torch

from ets.rewards.base import RewardError

AUTO_CLASSES = {
    "token_classification": "AutoModelForTokenClassification",
    "model": "AutoModel",
}
# What a PRM reads from its head, by kind: (description, test on the number of outputs).
KINDS = {
    "labels": ("a softmax over 2 or more label logits", lambda n: n >= 2),
    "value": ("one value per token (its sigmoid is the score)", lambda n: n == 1),
}


class Loaded(NamedTuple):
    model: Any
    tokenizer: Any
    path: str
    architecture: str         # the checkpoint's own class (config.architectures[0])
    unused: list[str]         # checkpoint weights the loaded class did not take


def load_pretrained(path: str, auto_class: str, *, name: str, trust_remote_code: bool, dtype, device: str,
                    may_leave: tuple[str, ...] = (), check_tokenizer=None) -> Loaded:
    """Load `path` with `AUTO_CLASSES[auto_class]` ("auto": token_classification for a
    `*ForTokenClassification` checkpoint, else the bare `AutoModel`), checked by 1 and 2.
    `may_leave`: prefixes of checkpoint weights that may stay unused (the caller reads them);
    `check_tokenizer(tokenizer)` runs before the weights load (a wrong marker fails fast)."""
    import transformers
    from safetensors import SafetensorError

    from ets.models.folder import check_model_folder, check_shapes, check_vocab_fits, local_path
    from ets.models.load import ModelLoadError, check_model_exists, quiet_load_report, resolve_dtype

    check_model_exists(path)
    check_model_folder(path)
    where = local_path(path)
    try:
        config = transformers.AutoConfig.from_pretrained(where, trust_remote_code=trust_remote_code)
        tokenizer = transformers.AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        hint = "; set reward.options.trust_remote_code: true" if "trust_remote_code" in str(exc) and not trust_remote_code else ""
        raise ModelLoadError(f"reward {name!r}: could not read the config and tokenizer of {path!r}: {_one_line(exc)}{hint}") from exc
    if check_tokenizer is not None:
        check_tokenizer(tokenizer)
    architecture = (getattr(config, "architectures", None) or [type(config).__name__])[0]
    if auto_class == "auto":
        auto_class = "token_classification" if architecture.endswith("ForTokenClassification") else "model"
    auto_name = AUTO_CLASSES[auto_class]
    remote = (getattr(config, "auto_map", None) or {}).get(auto_name)
    if remote and not trust_remote_code:
        raise RewardError(
            f"reward {name!r}: {path!r} is a {architecture} with its own modelling code ({auto_name} -> {remote}); "
            f"without it transformers loads its built-in {config.model_type} body and drops the head; "
            "set reward.options.trust_remote_code: true"
        )
    # The checks below replace transformers' load report, whose note that unused weights
    # "can be ignored" is wrong for a PRM: quiet it for this load. Mismatched shapes load
    # (at random) and are listed, rather than raised after the report.
    try:
        with quiet_load_report():
            model, info = getattr(transformers, auto_name).from_pretrained(
                where, dtype=resolve_dtype(dtype), trust_remote_code=trust_remote_code, output_loading_info=True,
                ignore_mismatched_sizes=True)
    except (OSError, ValueError, SafetensorError) as exc:
        raise ModelLoadError(f"reward {name!r}: could not load {path!r} with {auto_name}: {_one_line(exc)}") from exc
    check_shapes(path, info.get("mismatched_keys"))
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    check_vocab_fits(path, tokenizer, getattr(embedding, "num_embeddings", None))
    loaded = Loaded(model.to(device).eval(), tokenizer, path, architecture, sorted(info["unexpected_keys"]))
    missing = sorted(info["missing_keys"])
    if missing:
        raise RewardError(
            f"reward {name!r}: {describe(loaded)} has no trained weights for {_few(missing)} "
            f"(transformers initialised them at random); {_hint(loaded)}"
        )
    unused = [k for k in loaded.unused if not k.startswith(may_leave)]
    if unused:
        raise RewardError(
            f"reward {name!r}: {describe(loaded)} left the checkpoint's weights {_few(unused)} unused "
            f"(the head was dropped); {_hint(loaded)}"
        )
    return loaded


def check_outputs(loaded: Loaded, name: str, kind: str) -> int:
    """Run one token through the model: it must return logits whose last dimension `n`
    fits `kind` (see `KINDS`). Returns `n`; else a `RewardError` naming what came out."""
    want, ok = KINDS[kind]
    tok = loaded.tokenizer
    first = tok.bos_token_id if tok.bos_token_id is not None else 0
    device = next(loaded.model.parameters()).device
    with torch.inference_mode():
        out = loaded.model(input_ids=torch.tensor([[first]], device=device))
    logits = getattr(out, "logits", None)
    if logits is None:
        size = out[0].shape[-1]         # e.g. a BaseModelOutputWithPast: last_hidden_state first
        raise RewardError(
            f"reward {name!r}: {describe(loaded)} is a body without a head: it returns {size} hidden dimensions "
            f"per token, not {want}; {_hint(loaded)}"
        )
    n = int(logits.shape[-1])
    if ok(n):
        return n
    if n == getattr(loaded.model.config, "vocab_size", None):
        what, hint = f"{n} outputs per token (its vocabulary: a language-model head)", CAUSAL_HINT
    elif n == 1:
        what, hint = "1 output per token", "a head with one output is a value head: use reward.name: value_head"
    else:
        what, hint = f"{n} outputs per token", "a head with several outputs is a label classifier: use reward.name: token_classification"
    raise RewardError(f"reward {name!r}: the head of {describe(loaded)} has {what}, but {name!r} reads {want}; {hint}")


def describe(loaded: Loaded) -> str:
    """`'path' (a X) loaded as Y`, or `'path' (a X)` when Y is X."""
    cls = loaded.model.name if isinstance(loaded.model, LinearHead) else type(loaded.model).__name__
    base = f"{loaded.path!r} (a {loaded.architecture})"
    return base if cls == loaded.architecture else f"{base} loaded as {cls}"


CAUSAL_HINT = "for a causal-LM PRM use reward.name: step_tag or chat_judgement (or value_head with head: lm_logit or lm_mean)"


def _hint(loaded: Loaded) -> str:
    """What to set, from what the checkpoint is."""
    import transformers

    arch = loaded.architecture
    if any(k.startswith("v_head.") for k in loaded.unused):
        return "its head is a value head in the checkpoint's v_head.* weights: use reward.name: value_head with head: auto"
    if arch.endswith("ForCausalLM"):
        return CAUSAL_HINT
    if not hasattr(transformers, arch):
        return (f"{arch} is not a transformers class: if the model ships its own code set "
                "reward.options.trust_remote_code: true, else check reward.model")
    if arch.endswith("ForTokenClassification"):
        return "set reward.options.auto_class: token_classification"
    return "check reward.model: it should be a PRM with a classification or value head"


def read_tensors(path: str, prefix: str) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors named `prefix.*` (e.g. Skywork's `v_head.summary.weight`),
    read from its safetensors files without loading the rest; {} when there are none."""
    from safetensors import safe_open
    from transformers.utils import cached_file

    index = cached_file(path, "model.safetensors.index.json", _raise_exceptions_for_missing_entries=False)
    if index is not None:
        with open(index) as fh:
            files = sorted({f for k, f in json.load(fh)["weight_map"].items() if k.startswith(prefix + ".")})
    else:
        files = ["model.safetensors"]
    out: dict[str, torch.Tensor] = {}
    for filename in files:
        local = cached_file(path, filename, _raise_exceptions_for_missing_entries=False)
        if local is None:
            continue
        with safe_open(local, framework="pt") as fh:
            for key in fh.keys():
                if key.startswith(prefix + "."):
                    out[key[len(prefix) + 1:]] = fh.get_tensor(key)
    return out


class LinearHead(torch.nn.Module):
    """A body (`AutoModel`) and a linear head from the checkpoint: logits = head(last hidden state).

    The head runs in float32 (as Skywork's reference upcasts it); `logits_to_keep` (the
    positions the scoring backend reads) is applied before the head.
    """

    def __init__(self, body, weight: torch.Tensor, bias: torch.Tensor | None, name: str = "LinearHead"):
        super().__init__()
        self.name = name                # e.g. "Qwen2Model + v_head.summary", for messages
        self.body = body
        self.config = body.config
        self.head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        with torch.no_grad():
            self.head.weight.copy_(weight.float())
            if bias is not None:
                self.head.bias.copy_(bias.float())
        self.head.to(next(body.parameters()).device)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=None):
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                           use_cache=use_cache).last_hidden_state           # [B, T, H]
        if isinstance(logits_to_keep, torch.Tensor):
            hidden = hidden[:, logits_to_keep]                               # [B, K, H]
        elif logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        return SimpleNamespace(logits=self.head(hidden.float()))              # [B, K, outputs]


def _few(keys: list[str], n: int = 4) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
