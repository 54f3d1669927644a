"""Clustering: the cut matches scipy's own cosine linkage; the real MiniLM groups step texts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage

from lp import StepClusterer, cluster_embeddings


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
    clusterer.cluster(texts)
    assert clusterer.encoded == 5              # cached: nothing new encoded
