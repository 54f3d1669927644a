"""`ets run --check` refuses, in the run's own words, what a run would refuse only after
its models had loaded: a prompt with no room in the model's context, a KV pool too small
for one sequence (the policy's, or the PRM's), an output folder that cannot be made, a trained-head reward given a
random `tiny:` model, an embedder folder that is not there. It leaves nothing behind."""

from __future__ import annotations

import pytest

from ets.config import ConfigError, PolicyConfig, RewardConfig
from tests.helpers import TINY, one_line_error, run_cli

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def check_and_run(tmp_path, capsys, *overrides):
    """The one error line of `--check`, then of the run itself (`engine` backend)."""
    argv = ["policy.backend=engine", f"output={tmp_path / 'out' / 'r.jsonl'}", *overrides]
    checked = one_line_error(capsys, run_cli("--check", *argv))
    ran = one_line_error(capsys, run_cli(*argv))
    assert not (tmp_path / "out").exists()
    return checked, ran


def test_a_prompt_with_no_room_in_the_context_is_refused_by_check_as_by_the_run(tmp_path, capsys):
    checked, ran = check_and_run(tmp_path, capsys, "policy.max_context=6")
    # each names a problem whose prompt does not fit (the run, the first it formats), in the same words
    assert checked.split(" tokens and ")[1] == ran.split(" tokens and ")[1]
    assert "prompt is" in checked and "the model's context is 6 (no room to generate)" in checked


def test_a_pool_too_small_for_one_sequence_is_refused_by_check_as_by_the_run(tmp_path, capsys):
    checked, ran = check_and_run(tmp_path, capsys, "policy.kv_budget_tokens=20")
    assert checked == ran
    assert "policy.kv_budget_tokens: the policy's KV pool of 20 tokens cannot hold one sequence" in checked


@pytest.mark.parametrize("overrides, key", [
    (["reward.options.backend=engine", "reward.options.kv_budget_tokens=40"], "reward.options.kv_budget_tokens"),
    (["policy.kv_budget_tokens=96", "reward.options.share_policy_engine=true"], "policy.kv_budget_tokens"),
])
def test_a_prm_pool_too_small_for_its_longest_sequence_is_refused_by_check_as_by_the_run(tmp_path, capsys,
                                                                                           overrides, key):
    checked, ran = check_and_run(tmp_path, capsys, *overrides)
    assert checked == ran
    assert f"{key}: a KV pool of " in checked and "cannot hold the longest sequence the PRM may score" in checked
    # the bound it names is enough: a pool of that size passes the check
    need = int(checked.split(f"set {key} >= ")[1].split()[0])
    from ets.app.run import check_config
    from ets.config import load_config

    config = load_config(TINY, ["policy.backend=engine", f"output={tmp_path / 'r.jsonl'}", *overrides,
                                f"{key}={need}"])
    assert check_config(config).endswith("# config OK: no model was loaded, nothing was run\n")


def test_check_shows_the_prompts_lengths_and_the_cut_ones(tmp_path, capsys):
    from ets.app.run import check_config
    from ets.config import load_config

    out = check_config(load_config(str(TINY), [f"output={tmp_path / 'r.jsonl'}"]))
    assert "# prompts: " in out and "the model's context: 2,048 tokens" in out
    assert "cut to fit" not in out
    out = check_config(load_config(str(TINY), [f"output={tmp_path / 'r.jsonl'}", "policy.max_context=12",
                                               "policy.prompt_overflow=truncate"]))
    assert "questions cut to fit the context (policy.prompt_overflow: truncate)" in out
    assert "the model's context: 12 tokens" in out
    [first] = [line for line in out.splitlines() if line.startswith("# first prompt (")]
    assert ", cut from " in first  # the prompt shown is the one the run writes


def test_an_output_folder_that_cannot_be_made_is_refused_by_check(tmp_path, capsys, monkeypatch):
    """Root passes the permission bits where the file system still refuses (under /sys):
    `--check` makes what the run would make, and removes it again."""
    import ets.app.output as output

    def refuse(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(output.tempfile, "mkstemp", refuse)
    msg = one_line_error(capsys, run_cli("--check", f"output={tmp_path / 'a' / 'b' / 'r.jsonl'}"))
    assert msg.endswith("(Operation not permitted); choose another output path")
    assert list(tmp_path.iterdir()) == []


def test_check_leaves_no_folder_behind(tmp_path, capsys):
    assert run_cli("--check", f"output={tmp_path / 'a' / 'b' / 'r.jsonl'}") == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("reward, options", [("token_classification", {}), ("value_head", {})])
def test_a_trained_head_reward_on_a_tiny_model_is_refused(tmp_path, capsys, reward, options):
    from ets.rewards.registry import build_reward

    msg = one_line_error(capsys, run_cli("--check", f"reward.name={reward}", f"output={tmp_path / 'r.jsonl'}"))
    assert f"reward {reward!r} reads a trained PRM's head, and 'tiny:llama' (reward.model)" in msg
    with pytest.raises(ConfigError, match="reward.model is unset, so the policy's model"):
        build_reward(RewardConfig(name=reward, options=options), PolicyConfig(model="tiny:llama"))


def test_a_value_head_reading_the_lm_logits_runs_on_a_tiny_model(tmp_path):
    assert run_cli("--check", "reward.name=value_head", "reward.options.head=lm_logit",
                   "reward.options.marker=a", f"output={tmp_path / 'r.jsonl'}") == 0


def test_an_embedder_folder_that_is_not_there_is_refused_and_an_uncached_hub_name_noted(tmp_path, capsys):
    out = f"output={tmp_path / 'r.jsonl'}"
    msg = one_line_error(capsys, run_cli("--check", "method=ets", f"embedder={tmp_path / 'nothere'}", out))
    assert "does not exist" in msg
    assert run_cli("--check", "method=ets", "embedder=no-such-embedder-here", out) == 0
    assert ("# search.embedder 'no-such-embedder-here': 'no-such-embedder-here' is neither a folder nor in this "
            "machine's Hugging Face cache") in capsys.readouterr().out
    assert run_cli("--check", "method=ets", out) == 0  # the default ships offline: no note
    assert "search.embedder" not in capsys.readouterr().out.split("\n# ", 1)[1]


def test_a_reward_token_that_is_not_one_token_is_refused_by_check_as_by_the_run(tmp_path, capsys):
    checked, ran = check_and_run(tmp_path, capsys, "reward.options.tag=' two tokens'")
    assert checked == ran
    assert "reward 'step_tag': the tokenizer has no single token for the step tag ' two tokens'" in checked
