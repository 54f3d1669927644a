"""scripts/train_demo_models.py trains reproducibly by seed: the same command gives the same
bytes, another seed other weights, and a run's step-N snapshot is an N-step run (the
schedule does not depend on the run's length, and evaluation draws from its own streams).
The shipped policy was retrained from its seed bit for bit (docs/demo.md, "Training
them"); these are the same properties on a model small
enough for the test suite."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import load_script

TINY = ["--stage", "policy", "--hidden", "16", "--layers", "1", "--kv-heads", "1", "--batch", "4",
        "--eval-every", "0"]


@pytest.fixture(scope="module")
def train():
    module = load_script("train_demo_models")
    threads = torch.get_num_threads()           # main() sets the process's threads: keep ours

    def run(out: Path, *extra: str) -> Path:
        module.main(TINY + ["--out", str(out), "--threads", str(threads), *extra])
        return out / "policy"

    return run


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(path / "model.safetensors")


def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_weights(train, tmp_path):
    a = train(tmp_path / "a", "--policy-steps", "3")
    b = train(tmp_path / "b", "--policy-steps", "3")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    other = weights(train(tmp_path / "c", "--policy-steps", "3", "--seed", "1"))
    assert any(not other[k].equal(v) for k, v in weights(a).items())


def test_a_snapshot_at_step_n_is_an_n_step_run(train, tmp_path):
    train(tmp_path / "long", "--policy-steps", "4", "--snapshots", "--eval-every", "2")
    short = weights(train(tmp_path / "short", "--policy-steps", "2"))
    snapshot = weights(tmp_path / "long" / "policy-step2")
    assert snapshot.keys() == short.keys()
    assert all(snapshot[k].equal(short[k]) for k in short)
    # and the run went on past it: the 4-step policy is another one
    final = weights(tmp_path / "long" / "policy")
    assert any(not final[k].equal(short[k]) for k in short)


def test_a_cooldown_decays_the_last_steps_and_leaves_the_ones_before(train, tmp_path):
    """`--policy-cooldown N` (and `--prm-cooldown`): the plain schedule, then its last N
    steps falling linearly towards 0; another schedule, so other weights; and 0 is the
    shipped recipe (the snapshot test above)."""
    module = load_script("train_demo_models")

    def lr(step, cooldown):
        return module.inv_sqrt_lr(step, 1.0, 4, 12, cooldown)

    assert [lr(s, 4) for s in range(8)] == [lr(s, 0) for s in range(8)]
    assert [lr(s, 4) for s in range(8, 12)] == [lr(8, 0) * k / 4 for k in (4, 3, 2, 1)]
    plain = weights(train(tmp_path / "plain", "--policy-steps", "3"))
    cooled = weights(train(tmp_path / "cooled", "--policy-steps", "3", "--policy-cooldown", "2"))
    assert any(not cooled[k].equal(v) for k, v in plain.items())
    with pytest.raises(SystemExit) as exit_:
        train(tmp_path / "bad", "--policy-steps", "3", "--policy-cooldown", "4")
    assert exit_.value.code == 2 and not (tmp_path / "bad").exists()
