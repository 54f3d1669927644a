"""Loading models and tokenizers by path, hub name, or `tiny:<arch>`.

Real models load through `transformers`' Auto classes exactly as on a machine with a hub;
`tiny:<arch>` builds a random-init model from a config (see ets/models/tiny.py) for tests.
"""

from __future__ import annotations

from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says which and what to do."""


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported; choose one of: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or Path(name).exists()


def load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    if name_or_path.startswith("tiny:"):
        from ets.models.tiny import build_tokenizer

        return build_tokenizer()
    check_model_exists(name_or_path)
    return AutoTokenizer.from_pretrained(name_or_path)


def load_causal_lm(name_or_path: str, device: str = "cpu", dtype: str | torch.dtype = "float32", seed: int = 0):
    """(model in eval mode on `device`, tokenizer)."""
    from transformers import AutoModelForCausalLM

    torch_dtype = resolve_dtype(dtype)
    if name_or_path.startswith("tiny:"):
        from ets.models.tiny import build_tiny_model

        model, tok = build_tiny_model(name_or_path.split(":", 1)[1], seed=seed, dtype=torch_dtype)
        return model.to(device), tok
    check_model_exists(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype)
    except OSError as exc:
        raise ModelLoadError(
            f"could not load model {name_or_path!r}: {exc}. Pass a local folder in Hugging Face "
            "format, or a hub name on a machine that can reach the hub."
        ) from exc
    return model.to(device).eval(), load_tokenizer(name_or_path)


def check_model_exists(name_or_path: str) -> None:
    if _looks_like_path(name_or_path) and not Path(name_or_path).expanduser().exists():
        raise ModelLoadError(
            f"model path {name_or_path!r} does not exist; pass a folder in Hugging Face format "
            "(config.json + weights + tokenizer), a hub name, or tiny:llama for a random test model"
        )
