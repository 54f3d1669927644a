"""`search.embedder` and the cut of ETS's dendrogram that goes with it.

ETS clusters each candidate's newest step by an embedding (lp/clustering.py): a sentence
model's (a sentence-transformers name or folder, or `static:<name>`), or a model's own
hidden states, pooled over the step's tokens from the forward it runs anyway: the
policy's (`policy`) or the PRM's (`prm`).

A cut (`search.cluster_threshold`, a cosine distance) only means something for the
embedder it was measured with: mean-pooled hidden states of one model lie much closer
together than a sentence model's unit vectors, and how close depends on the model. So:
- a sentence embedder's default cut is the paper's, 0.05;
- `policy` and `prm` have none: ETS with either needs its cut given (calibrate it with
  scripts/calibrate_cluster_cut.py on the models the run uses);
- `cluster_threshold` may be a mapping from embedder to cut, so that one config holds
  each embedder's calibrated cut and `embedder=...` on the command line picks its own.
The resolved cut (a number, or None where nothing reads it) is what the config keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ets.config.checks import ConfigError, check_value, positive

# A model's own hidden states, not a sentence model: the policy's, or the PRM's.
HIDDEN_EMBEDDERS = ("policy", "prm")
SENTENCE_CUT = 0.05   # the paper's cut, with its sentence embedder


def calibration_command(embedder: str) -> str:
    return f"python scripts/calibrate_cluster_cut.py --config <your config> --embedder {embedder}"


def cluster_cut(cut: Any, embedder: str, needed: bool) -> float | None:
    """The cut for `embedder` from `search.cluster_threshold` (a number, a mapping from
    embedder to number, or None: the embedder's default). `needed`: ETS clusters with it
    (method ets, lambda_s > 0), so a hidden-state embedder without a cut is an error."""
    given = cut
    if isinstance(cut, Mapping):
        for name, value in cut.items():
            check_value(f"cluster_threshold.{name}", value, float)
            positive(f"cluster_threshold.{name}", value, zero_ok=True)
        cut = cut.get(embedder)
    if cut is not None:
        positive("cluster_threshold", cut, zero_ok=True)
        return cut
    if embedder not in HIDDEN_EMBEDDERS:
        return SENTENCE_CUT
    if not needed:
        return None
    where = (f"it gives cuts for {', '.join(map(repr, given))} only" if isinstance(given, Mapping) and given
             else "none is given")
    raise ConfigError(f"cluster_threshold: embedder {embedder!r} has no default cut (its hidden states' distances "
                      f"depend on the model) and {where}; set cluster_threshold=<cut> (or a mapping "
                      f"{{{embedder}: <cut>, ...}}), calibrated with: {calibration_command(embedder)}")
