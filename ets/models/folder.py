"""What a local model folder must hold, checked before its weights load.

transformers finds a damaged folder out late and in its own words (a tokenizer it cannot
build, "incomplete metadata, file not fully covered", a size-mismatch report and then a
RuntimeError); the search would index past an embedding that a tokenizer outgrows. Each
check here is one `ModelLoadError` line naming the folder, what is wrong and the fix:

- tokenizer files: tokenizer.json, a SentencePiece or tiktoken model, or vocab files;
- safetensors weights whole: each file's header readable and its size the size its header
  describes (a download cut short, a copy that stopped), each shard an index names present;
- weights of the shapes config.json gives (`check_shapes`, on transformers' load report);
- a tokenizer no larger than the model's embedding (`check_vocab_fits`).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterable

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json",
                   "vocab.txt")
_MAX_HEADER = 100 << 20  # a safetensors header is JSON of a few MB at most


def _error(message: str):
    from ets.models.load import ModelLoadError

    return ModelLoadError(message)


def local_path(name_or_path: str) -> str:
    """`name_or_path` with a leading `~` expanded when it names a local path (transformers
    takes `~/m` for a hub name and refuses it); hub names and `tiny:` unchanged."""
    if name_or_path.startswith("~"):
        return str(Path(name_or_path).expanduser())
    return name_or_path


def check_model_folder(name_or_path: str) -> None:
    """The tokenizer and weight checks of a local model folder; nothing for a hub name."""
    folder = Path(local_path(name_or_path))
    if not folder.is_dir() or not (folder / "config.json").is_file():
        return
    check_tokenizer_files(folder, name_or_path)
    for weights in _safetensors_files(folder, name_or_path):
        check_safetensors(weights, name_or_path)


def check_tokenizer_files(folder: Path, name: str) -> None:
    if any((folder / f).is_file() for f in TOKENIZER_FILES) or any(folder.glob("*.tiktoken")):
        return
    raise _error(
        f"model folder {name!r} has no tokenizer files (tokenizer.json, tokenizer.model or vocab.json); save the "
        f"tokenizer into it (tokenizer.save_pretrained(folder)) or copy those files from the model it was made from")


def _safetensors_files(folder: Path, name: str) -> list[Path]:
    """The folder's safetensors weights: those its index names (each must exist), else every
    *.safetensors file in it."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return sorted(folder.glob("*.safetensors"))
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _error(f"model folder {name!r}: its model.safetensors.index.json is not a weight index ({exc}); "
                     "download or save the model again") from None
    missing = [s for s in shards if not (folder / s).is_file()]
    if missing:
        raise _error(f"model folder {name!r}: {_few(missing)} named by model.safetensors.index.json "
                     f"{'is' if len(missing) == 1 else 'are'} missing; download or copy the whole model")
    return [folder / s for s in shards]


def check_safetensors(path: Path, name: str) -> None:
    """A safetensors file's header parses and its size is what the header describes."""
    size = path.stat().st_size
    broken = f"model folder {name!r}: its weights file {path.name} "
    fix = "download or save the model again"
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise _error(f"{broken}is {size} bytes, too short to be safetensors; {fix}")
            (n,) = struct.unpack("<Q", head)
            if n > min(_MAX_HEADER, size - 8):
                raise _error(f"{broken}is not a whole safetensors file (its header says {n:,} bytes of header in a "
                             f"file of {size:,}); {fix}")
            header = json.loads(fh.read(n))
    except (ValueError, UnicodeDecodeError) as exc:
        raise _error(f"{broken}is corrupt: its header is not JSON ({exc}); {fix}") from None
    if not isinstance(header, dict):
        raise _error(f"{broken}is corrupt: its header is not a table of tensors; {fix}")
    try:
        ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
    except (KeyError, IndexError, TypeError, ValueError):
        raise _error(f"{broken}is corrupt: its header does not give every tensor's place; {fix}") from None
    expected = 8 + n + max(ends, default=0)
    if size < expected:
        raise _error(f"{broken}is truncated: {size:,} of the {expected:,} bytes its header describes (a download or "
                     f"copy cut short); {fix}")
    if size > expected:
        raise _error(f"{broken}is corrupt: {size:,} bytes where its header describes {expected:,}; {fix}")


def check_shapes(name: str, mismatched: Iterable[Any]) -> None:
    """transformers' `mismatched_keys` (key, shape in the checkpoint, shape config.json
    gives) as one line: the weights were saved with another config."""
    rows = [m if isinstance(m, tuple) else (m, None, None) for m in mismatched or ()]
    if not rows:
        return
    key, saved, wanted = sorted(rows, key=lambda r: str(r[0]))[0]
    shapes = f" is {list(saved)} in the weights but {list(wanted)} by config.json" if saved is not None else ""
    more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
    raise _error(f"model {name!r}: its weights do not have the shapes its config.json gives: {key}{shapes}{more}; "
                 "the config.json is not the one these weights were saved with: put the model's own config.json "
                 "beside them, or save the model again")


def check_vocab_fits(name: str, tokenizer, embedding_rows: int | None) -> None:
    """Every token id the tokenizer can give must have a row in the model's embedding."""
    if embedding_rows is None:
        return
    ids = len(tokenizer)
    try:
        ids = max(ids, max(tokenizer.get_vocab().values()) + 1)
    except (AttributeError, ValueError, TypeError, NotImplementedError):
        pass
    if ids > embedding_rows:
        raise _error(
            f"model {name!r}: its tokenizer has {ids:,} token ids but its embedding only {embedding_rows:,} rows "
            f"(vocab_size): ids {embedding_rows:,} and above would index past it; use the tokenizer the model was "
            "trained with, or resize the embedding (model.resize_token_embeddings(len(tokenizer))) and save both")


def _few(items: list[str], n: int = 3) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")
