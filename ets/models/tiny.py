"""Tiny random-init models built from configs, for tests and smoke runs.

No model hub is reachable here, so tests build their models locally: a byte-level
tokenizer (every string round-trips, no training needed) and a 2-layer decoder of one of
the architectures the engine must support. `tiny:<arch>` is accepted wherever a model path
is (see `ets.models.load.load_causal_lm`), so a YAML config can name one.

Architectures: `llama`, `qwen2` (q/k/v projections with bias), `mistral`; all use
grouped-query attention (4 query heads over 2 key/value heads).
"""

from __future__ import annotations

from pathlib import Path

import torch

# Special tokens added on top of the 256 byte symbols. `STEP_TAG`, `GOOD` and `BAD` give
# tiny PRMs the Math-Shepherd convention (` ки` as the step tag, `+`/`-` as labels).
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
STEP_TAG = " ки"
ARCHS = ("llama", "qwen2", "mistral")


def build_tokenizer():
    """A byte-level BPE tokenizer with no merges: 256 byte symbols + special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {sym: i for i, sym in enumerate(alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD)
    tok.add_tokens([STEP_TAG])
    return tok


def tiny_config(arch: str, vocab_size: int, **overrides):
    """A 2-layer, 64-wide config of `arch` with grouped-query attention."""
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    if arch not in ARCHS:
        raise ValueError(f"unknown tiny architecture {arch!r}; known: {', '.join(ARCHS)}")
    common = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )
    common.update(overrides)
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig}[arch]
    return cls(**common)


def build_tiny_model(arch: str = "llama", seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
    """(model, tokenizer): a random-init causal LM, deterministic for a given seed;
    `overrides`: config fields (e.g. num_key_value_heads=4: one K/V head per query head)."""
    from transformers import AutoModelForCausalLM

    tok = build_tokenizer()
    config = tiny_config(
        arch,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **overrides,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    return model, tok


def save_tiny_model(path: str | Path, arch: str = "llama", seed: int = 0) -> Path:
    """Write a tiny random model + tokenizer in Hugging Face format; returns the folder."""
    path = Path(path)
    model, tok = build_tiny_model(arch, seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
