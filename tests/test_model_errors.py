"""Models and devices a user can get wrong: one line `ets: error: ...`, exit code 2."""

from pathlib import Path

import pytest

from ets.app.cli import main

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"


def not_a_model(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "readme.txt").write_text("not weights")
    return f"policy.model={folder}"


CASES = {
    "a folder that is not a model": (not_a_model, "is not a model folder (no config.json)"),
    "an unknown tiny model": (lambda _: "policy.model=tiny:foo", "unknown tiny model 'tiny:foo'; use one of: tiny:llama"),
    "tiny gemma": (lambda _: "policy.model=tiny:gemma", "unknown tiny model 'tiny:gemma'"),
    "a GPU this machine lacks": (lambda _: "policy.device=cuda", "set policy.device=cpu"),
    "a GPU this machine lacks for the PRM": (lambda _: "reward.options.device=cuda", "set reward.options.device=cpu"),
    "not a device": (lambda _: "reward.options.device=gpu",
                     "reward.options.device: 'gpu' is not a device; use cpu, cuda, cuda:N"),
    "a seed too large for the generators": (lambda _: "seed=99999999999999999999", "must be below 2**63"),
    "a missing embedder": (lambda _: "search.embedder=/no/such/embedder", "search.embedder '/no/such/embedder' does not exist"),
    "a static form of a missing embedder": (lambda _: "search.embedder=static:/no/such/embedder",
                                            "search.embedder '/no/such/embedder' does not exist"),
    # the PRM's pool, checked before the PRM loads against its longest sequence
    "a PRM pool too small for one sequence": (
        lambda _: "reward.options.backend=engine reward.options.kv_budget_tokens=40",
        "reward.options.kv_budget_tokens: a KV pool of 40 tokens cannot hold the longest sequence the PRM may score"),
    "a shared pool too small for the PRM's sequence": (
        lambda _: "policy.backend=engine policy.kv_budget_tokens=96 reward.options.share_policy_engine=true",
        "policy.kv_budget_tokens: a KV pool of 96 tokens cannot hold the longest sequence the PRM may score"),
}


@pytest.mark.parametrize("case", CASES)
def test_one_line_error(tmp_path, capsys, case):
    make, message = CASES[case]
    override = make(tmp_path)
    if case.startswith("a GPU this machine lacks"):
        import torch

        if torch.cuda.is_available():
            pytest.skip("reason: this machine has a CUDA GPU, so cuda is a valid device here")
    code = main(["run", "--quiet", "--config", str(TINY), f"output={tmp_path / 'r.jsonl'}", "data.limit=1",
                 "method=ets", *override.split()])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("ets: error: ") and message in err[0], err


@pytest.mark.parametrize("overrides, key, whose", [
    (["reward.options.backend=engine", "reward.options.kv_budget_tokens=40"], "reward.options.kv_budget_tokens",
     "the PRM's KV pool of 40 tokens"),
    (["policy.backend=engine", "policy.kv_budget_tokens=96", "reward.options.share_policy_engine=true"],
     "policy.kv_budget_tokens", "the policy's KV pool, which the PRM shares, of 96 tokens"),
])
def test_a_prm_pool_found_too_small_mid_search_names_its_key(overrides, key, whose):
    """Where nothing checked the PRM's pool before the search (`ets.search` with a reward
    built by hand), the engine's refusal of a sequence it cannot hold still comes out as
    one `ConfigError` naming the key that sized the pool."""
    from ets import api
    from ets.config import ConfigError

    config = api.load_config(TINY, ["data.limit=1", "width=2", *overrides])
    policy = api.build_policy(config)
    with pytest.raises(ConfigError) as error:
        api.search(config, policy=policy, reward=api.build_reward(config, policy))
    assert str(error.value).startswith(f"{key}: {whose} cannot hold a sequence the PRM scores")
    assert f"set {key} >= " in str(error.value)


def test_gemma2_on_the_engine_says_to_use_the_hf_backend(tmp_path, capsys):
    """Gemma-2 soft-caps its attention logits, which the engine's attention does not do:
    refused when the engine is built, not in the middle of a search; `backend: hf` runs it."""
    import torch
    from transformers import AutoModelForCausalLM, Gemma2Config

    from ets.models.tiny import build_tokenizer

    tok = build_tokenizer()
    config = Gemma2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, bos_token_id=tok.bos_token_id,
                          eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    folder = tmp_path / "gemma2"
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    base = ["run", "--quiet", "--config", str(TINY), "data.limit=1", "width=2", f"policy.model={folder}",
            f"reward.model={folder}"]
    assert main([*base, f"output={tmp_path / 'engine.jsonl'}", "policy.backend=engine"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "soft-capping (Gemma-2)" in err[0] and "policy.backend: hf" in err[0], err
    assert main([*base, f"output={tmp_path / 'hf.jsonl'}", "policy.backend=hf"]) == 0


def test_a_classifier_checkpoint_as_the_step_tag_prm_is_refused(tmp_path, capsys):
    """A token-classification checkpoint loaded as a causal LM gets a random lm_head:
    its step-tag scores would be noise. Refused at load, one line."""
    from transformers import LlamaConfig, LlamaForTokenClassification

    from ets.models.tiny import build_tokenizer

    tok = build_tokenizer()
    folder = tmp_path / "classifier"
    LlamaForTokenClassification(LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                            num_labels=2)).save_pretrained(folder)
    tok.save_pretrained(folder)
    code = main(["run", "--quiet", "--config", str(TINY), f"output={tmp_path / 'r.jsonl'}", "data.limit=1",
                 f"reward.model={folder}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "has no trained weights for lm_head.weight" in err[0] and "token_classification" in err[0], err


@pytest.mark.parametrize("override, message", [
    ("policy.model=tiny:foo", "unknown tiny model 'tiny:foo'; use one of: tiny:llama"),
    ("reward.model=tiny:foo", "unknown tiny model 'tiny:foo'"),
    ("reward.options.dtype=bf16", "option 'dtype' = 'bf16' is not allowed; choose one of: float32, float16, bfloat16"),
    ("reward.options.device=gpu", "reward.options.device: 'gpu' is not a device"),
])
def test_check_refuses_what_the_run_would_refuse(tmp_path, capsys, override, message):
    """`ets run --check` stops on these as the run would, before any model loads."""
    code = main(["run", "--check", "--config", str(TINY), f"output={tmp_path / 'r.jsonl'}", override])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
