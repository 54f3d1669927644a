"""Model folders checked before a search for what loading and searching need: each damage
is one line `ets: error: ...` naming the folder and the fix, for the policy's model and the
reward's, and `ets run --check` finds those it can without loading weights. A `~/` path
loads as it checks."""

from __future__ import annotations

import json
import shutil

import pytest

from ets.models.tiny import build_tiny_model, save_tiny_model
from tests.helpers import one_line_error, run_cli


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("models") / "good", "llama")


def copy_of(good, tmp_path):
    return shutil.copytree(good, tmp_path / "model")


def no_tokenizer(good, tmp_path):
    folder = copy_of(good, tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    return folder


def other_shapes(good, tmp_path):
    folder = copy_of(good, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] = 256        # the weights were saved with 128
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def truncated(good, tmp_path):
    folder = copy_of(good, tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    return folder


def not_safetensors(good, tmp_path):
    folder = copy_of(good, tmp_path)
    (folder / "model.safetensors").write_bytes(b"<html>404 Not Found</html>" * 10)
    return folder


def missing_shard(good, tmp_path):
    folder = copy_of(good, tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                                            "lm_head.weight": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def tokenizer_outgrows_the_embedding(good, tmp_path):
    model, tok = build_tiny_model("llama")
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tok.add_tokens([f"<extra_{i}>" for i in range(12)])
    tok.save_pretrained(folder)
    return folder


# (damage, words of the message, found by --check without loading the weights)
CASES = {
    "no tokenizer files": (no_tokenizer, ["has no tokenizer files", "tokenizer.save_pretrained"], True),
    "weights of other shapes than config.json": (
        other_shapes, ["its weights do not have the shapes its config.json gives",
                       "model.layers.0.mlp.down_proj.weight is [64, 128] in the weights but [64, 256] by config.json",
                       "put the model's own config.json beside them"], False),
    "a truncated safetensors file": (truncated, ["model.safetensors is truncated", "download or save the model again"],
                                     True),
    "a file that is not safetensors": (not_safetensors, ["model.safetensors is not a whole safetensors file",
                                                         "download or save the model again"], True),
    "a shard the index names is missing": (missing_shard, ["model-00002-of-00002.safetensors named by "
                                                           "model.safetensors.index.json is missing"], True),
    "a tokenizer larger than the embedding": (
        tokenizer_outgrows_the_embedding, ["its tokenizer has 272 token ids but its embedding only 260 rows",
                                           "resize_token_embeddings"], False),
}


@pytest.mark.parametrize("side", ["policy", "reward"])
@pytest.mark.parametrize("case", CASES)
def test_a_damaged_model_folder_is_one_line(good, tmp_path, capsys, case, side):
    damage, words, _ = CASES[case]
    folder = damage(good, tmp_path)
    out = tmp_path / "r.jsonl"
    msg = one_line_error(capsys, run_cli(f"output={out}", "data.limit=1", "policy.backend=engine",
                                         f"{side}.model={folder}"))
    assert str(folder) in msg
    for word in words:
        assert word in msg, msg
    assert not out.exists()


@pytest.mark.parametrize("case", [c for c, (_, _, at_check) in CASES.items() if at_check])
def test_check_finds_a_damaged_folder_without_loading_it(good, tmp_path, capsys, case):
    damage, words, _ = CASES[case]
    folder = damage(good, tmp_path)
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", f"reward.model={folder}", "--check"))
    assert str(folder) in msg and words[0] in msg


@pytest.mark.parametrize("backend", ["engine", "hf"])
def test_a_home_relative_model_path_loads(good, tmp_path, monkeypatch, backend):
    """`~/m` exists for the check and must load as well: the loaders expand it too."""
    home = tmp_path / "home"
    shutil.copytree(good, home / "m")
    monkeypatch.setenv("HOME", str(home))
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", "data.limit=1", f"policy.backend={backend}", "policy.model=~/m",
                   "reward.model=~/m") == 0
    assert len(out.read_text().splitlines()) == 1


def test_a_home_relative_classifier_prm_loads(tmp_path, monkeypatch):
    """The head PRMs' loader (rewards/heads.py) expands `~` as well."""
    from tests import tiny_prms

    home = tmp_path / "home"
    tiny_prms.token_classifier(home / "prm")
    monkeypatch.setenv("HOME", str(home))
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", "data.limit=1", "reward.name=token_classification", "reward.model=~/prm") == 0
