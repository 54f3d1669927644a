"""Model loading: Hugging Face models by path or hub name, and tiny random models for tests.

    load.py   load_causal_lm / load_tokenizer (`tiny:<arch>` included), ModelLoadError
    folder.py what a local model folder must hold, checked before its weights load
    tiny.py   random-init tiny models and a small tokenizer, built from a config
"""

from ets.models.load import ModelLoadError, load_causal_lm, load_tokenizer

__all__ = ["ModelLoadError", "load_causal_lm", "load_tokenizer"]
