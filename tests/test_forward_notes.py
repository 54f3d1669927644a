"""`ets run --check` says how each engine will run its model's forward (ets/app/forward_notes.py):
compiled or eager, what `policy.compile: auto` picks on the device, and on which linears."""

from ets.app.cli import main
from ets.app.forward_notes import forward_note
from tests.helpers import TINY

ENGINE = ["policy.backend=engine"]


def _forward_lines(capsys, *overrides) -> list[str]:
    assert main(["run", "--config", str(TINY), "--check", *ENGINE, *overrides]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if " forward on " in line]


def test_check_says_auto_runs_eagerly_on_the_cpu_and_on_compiles(capsys):
    policy, reward = _forward_lines(capsys)  # the tiny config's step-tag PRM has an engine of its own
    # (the linears prepacked where this torch has oneDNN's kernels: linears.available)
    assert policy.startswith("# policy forward on cpu: eager")
    assert policy.endswith("(policy.compile: auto; auto compiles on cuda only)")
    assert reward.startswith("# reward forward on cpu: eager")
    assert reward.endswith("(reward.options.compile: auto; auto compiles on cuda only)")
    policy, reward = _forward_lines(capsys, "policy.compile=on")
    assert policy.startswith("# policy forward on cpu: compiled by torch.compile (policy.compile: on)")
    assert "CUDA graphs" not in policy and policy.endswith("policy.compile: off runs it eagerly")
    assert reward.startswith("# reward forward on cpu: eager")
    _, reward = _forward_lines(capsys, "reward.options.compile=on")
    assert reward.startswith("# reward forward on cpu: compiled by torch.compile (reward.options.compile: on)")
    assert reward.endswith("reward.options.compile: off runs it eagerly")
    assert _forward_lines(capsys, "policy.backend=hf") == []


def test_on_cuda_auto_compiles_into_cuda_graphs_and_falls_back_to_eager():
    # (worked out from the settings alone: no GPU needed)
    line = forward_note("policy", "cuda", "auto", "auto", "bfloat16")
    assert ("compiled by torch.compile, its pieces between the attention ops replayed as CUDA graphs in forwards of "
            "up to 512 rows") in line
    assert line.endswith("a compiled forward that fails runs again eagerly, as do all after it, with a warning")
    assert forward_note("policy", "cuda", "off", "auto", "bfloat16") == "policy forward on cuda: eager (policy.compile: off)"
    assert "prepacked" in forward_note("policy", "cpu", "off", "on", "float32")


def test_check_counts_a_chat_judgement_prms_engine_as_step_tags(tmp_path, capsys):
    """chat_judgement runs on step_tag's machinery: its own engine, forward and KV pool are
    in `--check`'s notes, and its pool in the fixed pools' line."""
    from tests import tiny_prms

    judge = tiny_prms.chat_judge(tmp_path / "judge")
    reward = ["reward.name=chat_judgement", f"reward.model={judge}", "reward.options.backend=engine",
              "reward.options.kv_budget_tokens=4096"]
    _, line = _forward_lines(capsys, *reward)
    assert line.startswith("# reward forward on cpu: eager")
    assert main(["run", "--config", str(TINY), "--check", *ENGINE, *reward]) == 0
    pools = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# KV memory")]
    assert len(pools) == 1 and "reward 4,096 tokens on cpu" in pools[0], pools
