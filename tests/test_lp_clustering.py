"""Clustering: the cut matches scipy's own cosine linkage; the real MiniLM groups step texts,
and so does its static distillation (made once, cached, never left half-written)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage

from ets.config import ConfigError, SearchConfig
from ets.lp import StepClusterer, cluster_embeddings
from ets.lp.clustering import DEFAULT_EMBEDDER, STATIC_PREFIX, prepare_embedder, static_embedder
from ets.strategies import build


def test_matches_scipy_cosine_average_linkage():
    rng = np.random.default_rng(0)
    for _ in range(30):
        centres = rng.normal(size=(int(rng.integers(1, 6)), 16))
        points = centres[rng.integers(0, len(centres), 20)] + rng.normal(scale=0.15, size=(20, 16))
        for threshold in (0.05, 0.2):
            ours = cluster_embeddings(points, threshold)
            ref = fcluster(linkage(points, method="average", metric="cosine"), threshold, criterion="distance") - 1
            assert np.array_equal(ours, ref)


def test_identical_vectors_share_a_cluster_and_labels_are_dense():
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])
    labels = cluster_embeddings(vectors, 0.05)
    assert labels[0] == labels[1] == labels[3] != labels[2]
    assert sorted(set(labels)) == [0, 1]
    assert list(cluster_embeddings(vectors[:1], 0.05)) == [0]


@pytest.fixture(scope="module")
def clusterer():
    return StepClusterer()   # the offline all-MiniLM-L6-v2


def test_minilm_groups_repeats_and_paraphrases(clusterer):
    texts = [
        "First, we compute 3 + 4 = 7.",
        "First we compute 3 + 4 = 7",            # punctuation only
        "First, we compute 3 + 4 = 7.",          # identical
        "The area of a circle is pi r^2.",
        "So the final answer is 12.",
        "So the final answer is 12.",
        "Let x be the number of apples.",
    ]
    labels = clusterer.cluster(texts)          # the paper's cut, 0.05
    assert labels[0] == labels[1] == labels[2]
    assert labels[4] == labels[5]
    assert len({labels[0], labels[3], labels[4], labels[6]}) == 4
    assert clusterer.encoded == 5              # one embedding per distinct text

    # Reworded steps are further apart than 0.05 with this model; a looser cut joins them.
    loose = StepClusterer(threshold=0.15)
    loose._model = clusterer.model             # same model, no second load
    paraphrases = [
        "First, compute 3 + 4, which is 7.",
        "First, we compute 3 + 4 = 7.",
        "The area of a circle is pi r^2.",
        "The area of the circle equals pi times r squared.",
    ]
    labels = loose.cluster(paraphrases)
    assert labels[0] == labels[1] != labels[2] == labels[3]


STEPS = [
    "Pens, hundreds: 3 * 400 = 1200",
    "Pens, hundreds: 3 * 400 = 1200",          # identical
    "The pens' hundreds: 3 * 400 = 1200",      # another wording of the same product
    "Mugs, tens: 7 * 50 = 350",
    "The answer is: 1130",
]


def test_static_distillation_groups_steps_and_is_made_once(monkeypatch):
    """The real distillation of MiniLM (about 20 s, once per test session's cache)."""
    static = StepClusterer(STATIC_PREFIX + DEFAULT_EMBEDDER, threshold=0.1)
    labels = static.cluster(STEPS)
    assert labels[0] == labels[1] == labels[2]
    assert len({labels[0], labels[3], labels[4]}) == 3
    assert static.encoded == 4

    # From now on the cached folder is what loads: a second distillation would fail.
    import model2vec.distill

    monkeypatch.setattr(model2vec.distill, "distill", lambda *a, **k: pytest.fail("distilled twice"))
    folder = static_embedder(DEFAULT_EMBEDDER)
    from sentence_transformers import SentenceTransformer

    again = SentenceTransformer(str(folder)).encode(STEPS)
    assert np.allclose(again, static.embed(STEPS), atol=1e-6)


def test_static_cache_is_keyed_by_model_and_reused(fake_distill, tmp_path):
    first = static_embedder(DEFAULT_EMBEDDER)
    assert first.parent == tmp_path / "static-embedders" and (first / "modules.json").exists()
    assert static_embedder("sentence-transformers/all-MiniLM-L6-v2") == first   # same offline copy
    assert len(fake_distill) == 1


def test_prepare_distils_a_static_embedder_once_and_nothing_else(fake_distill, tmp_path):
    prepare_embedder(DEFAULT_EMBEDDER)                                   # a transformer: nothing to make
    build(SearchConfig(method="ets", lambda_s=0, embedder=STATIC_PREFIX + DEFAULT_EMBEDDER)).prefetch()  # unused
    assert fake_distill == [] and not (tmp_path / "static-embedders").exists()
    for _ in range(2):
        build(SearchConfig(method="ets", embedder=STATIC_PREFIX + DEFAULT_EMBEDDER)).prefetch()
    assert len(fake_distill) == 1 and len(list((tmp_path / "static-embedders").iterdir())) == 1


def test_an_interrupted_distillation_leaves_nothing(fake_distill, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    def save_half(self, path, *args, **kwargs):
        (Path(path) / "modules.json").write_text("[")   # half a model written, then killed
        raise KeyboardInterrupt

    monkeypatch.setattr(SentenceTransformer, "save", save_half)
    with pytest.raises(KeyboardInterrupt):
        static_embedder(DEFAULT_EMBEDDER)
    assert list((tmp_path / "static-embedders").iterdir()) == []


def test_static_of_nothing_or_of_a_missing_model_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="names no model"):
        static_embedder("")
    with pytest.raises(ConfigError, match="'/no/such/model' does not exist"):
        static_embedder("/no/such/model")


def test_a_missing_embedder_folder_is_named_once(tmp_path):
    from ets.lp import load_embedder

    with pytest.raises(ConfigError) as caught:
        load_embedder(str(tmp_path / "nope"))
    message = str(caught.value)
    assert "does not exist" in message and "could not be loaded" not in message
    assert message.count("pass a sentence-transformers model folder") == 1
