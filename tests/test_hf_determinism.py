"""On the transformers backend (`policy.backend: hf`, the PRM on its plain forward) a
problem's records, step scores included bit for bit, do not depend on `concurrency` or on a
resume: the PRM scores each sequence in a forward of its own (rewards/backends.py,
`batch_invariant`), so a sequence's scores do not move with its batch-mates.

Real tiny models (configs/tiny.yaml: tiny:llama policy on transformers' generate, step-tag
PRM on tiny:llama), sampled at temperature 1."""

from __future__ import annotations

import shutil

import pytest
import torch

from ets.models.tiny import build_tiny_model
from ets.rewards.backends import ForwardBackend
from tests.test_determinism import assert_same_records, overrides, run_to, write_problems


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_problems(tmp_path_factory.mktemp("data") / "problems.jsonl", 6)


def test_hf_records_are_the_same_at_any_concurrency_and_after_a_resume(tmp_path, data):
    base = overrides(data, "hf")
    alone = run_to(tmp_path, "c1", [*base, "concurrency=1"])
    together = run_to(tmp_path, "c4", [*base, "concurrency=4"])
    assert_same_records(alone, together)                     # exact: step scores bit for bit

    # A run stopped after 3 problems and resumed: the other 3 are searched with fewer
    # problems in flight than the first time.
    resumed = tmp_path / "resumed" / "results.jsonl"
    shutil.copytree(together.parent, resumed.parent)
    lines = resumed.read_text().splitlines(keepends=True)
    resumed.write_text("".join(lines[:3]))
    run_to(tmp_path, "resumed", [*base, "concurrency=4"])
    assert_same_records(alone, resumed)


def test_a_sequences_scores_do_not_depend_on_its_batch_mates():
    """The plain forward's rows of one sequence, scored alone and among sequences of other
    lengths, are equal bit for bit (they are not in one padded batch)."""
    model, _ = build_tiny_model("llama", seed=3)
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, 256, (37,), generator=g).tolist()
    positions = [5, 17, 36]
    others = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (90, 12, 141, 64)]
    backend = ForwardBackend(model, columns=[10, 20], pad_id=0)
    (alone,) = backend.logits_at([target], [positions])
    among = backend.logits_at([others[0], target, *others[1:]], [[89], positions, [11], [140], [63]])[1]
    assert torch.equal(alone, among)
