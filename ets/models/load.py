"""Loading models and tokenizers by path, hub name, or `tiny:<arch>`.

Real models load through `transformers`' Auto classes exactly as on a machine with a hub;
`tiny:<arch>` builds a random-init model from a config (see ets/models/tiny.py) for tests.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

import torch

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says which and what to do."""


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported; choose one of: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def hide_loading_bars() -> None:
    """Load models quietly in this process (ets/models/quiet.py): for a run inside a
    sweep's worker process, whose bars and warnings would cut through the driver's one
    progress bar."""
    from ets.models.quiet import quiet_model_loading

    quiet_model_loading(True)


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or Path(name).exists()


def load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    from ets.models.folder import check_model_folder, local_path

    if name_or_path.startswith("tiny:"):
        from ets.models.tiny import build_tokenizer

        return build_tokenizer()
    check_model_exists(name_or_path)
    check_model_folder(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(local_path(name_or_path))
    except (OSError, ValueError) as exc:  # ValueError: tokenizer files transformers cannot build a tokenizer from
        raise ModelLoadError(f"could not load the tokenizer of {name_or_path!r}: {_first_line(exc)}; pass a folder "
                             "with the model's tokenizer files, or a hub name on a machine that can reach the hub") from exc


def load_causal_lm(name_or_path: str, device: str = "cpu", dtype: str | torch.dtype = "float32", seed: int = 0):
    """(model in eval mode on `device`, tokenizer). A local folder is checked first
    (ets/models/folder.py): its tokenizer, its safetensors files whole, its weights' shapes
    against its config.json, its tokenizer no larger than its embedding."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    from ets.models.folder import check_shapes, check_vocab_fits, local_path

    torch_dtype = resolve_dtype(dtype)
    check_device(device)
    if name_or_path.startswith("tiny:"):
        from ets.models.tiny import build_tiny_model

        arch = check_tiny_name(name_or_path)
        model, tok = build_tiny_model(arch, seed=seed, dtype=torch_dtype)
        return model.to(device), tok
    tokenizer = load_tokenizer(name_or_path)  # the folder's checks, and a missing tokenizer, before the weights
    try:
        with quiet_load_report():
            # Mismatched shapes load (at random) and are listed, rather than raised as a
            # RuntimeError after a report: check_shapes says it in one line.
            model, info = AutoModelForCausalLM.from_pretrained(local_path(name_or_path), dtype=torch_dtype,
                                                               output_loading_info=True, ignore_mismatched_sizes=True)
    except (OSError, ValueError, SafetensorError) as exc:  # ValueError: a config transformers cannot map to a model
        raise ModelLoadError(
            f"could not load model {name_or_path!r}: {_first_line(exc).rstrip('. ')}. Pass a local folder in Hugging "
            "Face format, or a hub name on a machine that can reach the hub."
        ) from exc
    check_shapes(name_or_path, info.get("mismatched_keys"))
    missing = sorted(info["missing_keys"])
    if missing:  # e.g. a classifier checkpoint: its language-model head would be random noise
        arch = (getattr(model.config, "architectures", None) or ["?"])[0]
        raise ModelLoadError(
            f"model {name_or_path!r} (a {arch}) has no trained weights for {', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''} as a causal language model (they would be random); "
            "pass a causal-LM checkpoint (*ForCausalLM), or for a classifier PRM use reward.name: "
            "token_classification or value_head"
        )
    unused = sorted(info.get("unexpected_keys") or ())
    if unused:  # transformers' report would have listed them; now quiet, so say it here
        log.warning("model %r: its checkpoint's weights %s are not part of a causal language model and were not "
                    "loaded", name_or_path, ", ".join(unused[:3]) + (f" and {len(unused) - 3} more" if len(unused) > 3 else ""))
    check_vocab_fits(name_or_path, tokenizer, model.get_input_embeddings().num_embeddings)
    return model.to(device).eval(), tokenizer


@contextmanager
def quiet_load_report():
    """transformers' load report (missing, unexpected, mismatched weights) kept quiet: the
    loaders here check what it lists and say what matters in one line."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def eos_token_ids(model=None, tokenizer=None) -> set[int]:
    """Every token id that ends a generation: the `eos_token_id` (an id or a list of ids)
    of the model's generation config, of its config, and of the tokenizer, as given."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer):
        eos = getattr(source, "eos_token_id", None) if source is not None else None
        if eos is not None:
            ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
    return ids


def check_model_exists(name_or_path: str, key: str | None = None) -> None:
    """A path that is no model folder is refused in one line (starting with the config key
    that named it, `key`, where known); a hub name is left to transformers."""
    if not _looks_like_path(name_or_path):
        return  # a hub name: transformers resolves it
    path = Path(name_or_path).expanduser()
    where = f"{key}: " if key else ""
    if not path.exists():
        raise ModelLoadError(
            f"{where}model path {name_or_path!r} does not exist; pass a folder in Hugging Face format "
            "(config.json + weights + tokenizer), a hub name, or tiny:llama for a random test model"
        )
    if path.is_dir() and not (path / "config.json").is_file():
        raise ModelLoadError(
            f"{where}model path {name_or_path!r} is not a model folder (no config.json); pass a folder in "
            "Hugging Face format (config.json + weights + tokenizer), e.g. one written by save_pretrained"
        )


def read_model_config(model: str):
    """A model's config without its weights: tiny:<arch>'s, a folder's config.json, a hub
    name's if cached; None if it cannot be read."""
    from transformers import AutoConfig

    from ets.models.folder import local_path

    if model.startswith("tiny:"):
        from ets.models.tiny import build_tokenizer, tiny_config

        return tiny_config(check_tiny_name(model), len(build_tokenizer()))
    try:
        return AutoConfig.from_pretrained(local_path(model))
    except (OSError, ValueError):
        return None


def check_tiny_name(name: str) -> str:
    """The architecture of a `tiny:<arch>` model name; ModelLoadError for one not known."""
    from ets.models.tiny import ARCHS

    arch = name.split(":", 1)[1]
    if arch not in ARCHS:
        raise ModelLoadError(f"unknown tiny model {name!r}; use one of: {', '.join('tiny:' + a for a in ARCHS)}")
    return arch


def check_device(device: str | torch.device, key: str = "policy.device") -> None:
    """Refuse a device this machine does not have, or not a device at all, before anything
    is loaded onto it; `key` is the config key that set it (named in the fix)."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"{key}: {str(device)!r} is not a device; use cpu, cuda, cuda:N (the GPU numbered N) "
                             "or mps") from None
    if kind == "cuda" and not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise ModelLoadError(f"device {str(device)!r} asked for, but {why}; set {key}=cpu")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError(f"device {str(device)!r} asked for, but MPS is not available; set {key}=cpu")
