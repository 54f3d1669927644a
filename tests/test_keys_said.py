"""A key that does nothing where it is set is said, in `--check` and (where it concerns the
run itself) in the run's log; a value that can only be a mistake is refused."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from ets.app.run import check_config, inert_keys_notes
from ets.config import ConfigError, DataConfig, SearchConfig, load_config
from ets.config.method_keys import unread_keys_note
from tests.helpers import TINY, one_line_error, run_cli

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("value", [0, -2])
def test_a_fixed_width_below_one_is_refused_and_minus_one_is_unset(value):
    with pytest.raises(ConfigError, match=f"fixed_width: {value} is not a count of beams or subtrees"):
        SearchConfig(method="beam", fixed_width=value)
    assert SearchConfig(method="beam", fixed_width=-1).fixed_width is None  # the ETS code's "not set"


def test_keys_the_method_does_not_read_are_named():
    assert unread_keys_note(SearchConfig(method="rebase", lambda_s=2.0, fixed_width=3)) == (
        "not read by rebase: fixed_width (beam, dvts), lambda_s (ets); each is read by the method in brackets")
    assert unread_keys_note(SearchConfig(method="ets", lambda_s=0.0, embedder="static:all-MiniLM-L6-v2")) == (
        "not read by ets: embedder (ets with lambda_s > 0); each is read by the method in brackets")
    for method in ("best_of_n", "beam", "dvts", "rebase", "ets"):  # defaults: nothing to say
        assert unread_keys_note(SearchConfig(method=method)) is None
    assert unread_keys_note(SearchConfig(method="ets", lambda_s=2.0, softmax_temperature=0.5)) is None


def test_check_names_the_unread_keys(tmp_path):
    out = check_config(load_config(str(TINY), [f"output={tmp_path / 'r.jsonl'}", "method=beam", "lambda_c=2"]))
    assert "# not read by beam: lambda_c (ets);" in out


def test_naming_the_fields_reads_the_file_by_them():
    assert DataConfig(path="d.jsonl", question_field="q", answer_field="a").format == "fields"
    with pytest.raises(ConfigError, match="data.question_field: read with data.format=fields, and the format is gsm8k"):
        DataConfig(path="d.jsonl", format="gsm8k", question_field="q")


def test_a_named_field_is_read_from_a_file_auto_would_read_otherwise(tmp_path):
    """Records with gsm8k's keys and the user's own: the fields named win."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "ignored", "answer": "0", "prompt": "What is 1 + 1?", "gt": "2"}) + "\n")
    from ets.data import load_problems

    [problem] = load_problems(DataConfig(path=str(data), question_field="prompt", answer_field="gt"))
    assert (problem.question, problem.answer) == ("What is 1 + 1?", "2")


def test_a_split_beside_a_data_path_is_said_to_do_nothing(tmp_path):
    config = load_config(str(TINY), ["data.hf_split=train", f"output={tmp_path / 'r.jsonl'}"])
    assert any(n.startswith("data.hf_split: train has no effect: the problems come from data.path")
               for n in inert_keys_notes(config))
    assert not any("hf_split" in n for n in inert_keys_notes(load_config(str(TINY), [])))


def test_an_unshared_policy_engine_is_said(tmp_path):
    out = check_config(load_config(str(TINY), [f"output={tmp_path / 'r.jsonl'}",
                                               "reward.options.share_policy_engine=true"]))
    assert ("# reward.options.share_policy_engine: true has no effect: the policy runs on no engine "
            "(policy.backend); the PRM scores on a plain forward") in out
    out = check_config(load_config(str(TINY), [f"output={tmp_path / 'r.jsonl'}", "policy.backend=engine",
                                               "reward.model=tiny:qwen2", "reward.options.share_policy_engine=true"]))
    assert "true has no effect: reward.model is not the policy's model; the PRM scores on an engine of its own" in out
    assert "reward 65,536 tokens" in out  # the engine of its own is in the memory forecast
    out = check_config(load_config(str(TINY), [f"output={tmp_path / 'r.jsonl'}", "policy.backend=engine",
                                               "reward.model=null", "reward.options.share_policy_engine=true"]))
    assert "share_policy_engine" not in out.split("# ", 1)[1]


def test_chat_template_kwargs_without_a_chat_template_are_said(tmp_path):
    out = check_config(load_config(str(TINY), [f"output={tmp_path / 'r.jsonl'}", "policy.chat_template_kwargs.x=1"]))
    assert "# WARNING: policy.chat_template_kwargs (x) have no effect: the prompts are raw text" in out


def test_save_trees_on_results_without_trees_is_said(tmp_path, caplog):
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", "data.limit=2") == 0
    from ets.app.cli import main

    with caplog.at_level(logging.WARNING):  # not --quiet: that shows errors alone
        assert main(["run", "--config", str(TINY), f"output={out}", "data.limit=3", "save_trees=true"]) == 0
    assert "save_trees: 2 of the results already in" in caplog.text
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert ["tree" in r for r in records] == [False, False, True]
    note = check_config(load_config(str(TINY), [f"output={out}", "data.limit=3", "save_trees=true"]))
    assert "save_trees: 2 of the results already in" in note


def test_eval_reads_a_sweep_run_over_its_seeds(tmp_path, capsys):
    from ets.app.cli import main

    out = tmp_path / "rebase_w4_s0.jsonl"
    assert run_cli(f"output={out}", "data.limit=2") == 0
    shutil.copy(out, tmp_path / "rebase_w4_s1.jsonl")
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "rebase_w4")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["seed 0", "seed 1"]
    assert "± 0.0 points (mean ± sd over 2 seeds) agg=last vote=weighted" in lines[2]
    msg = one_line_error(capsys, main(["eval", str(tmp_path / "rebase_w4"), "--at-n"]))
    assert "--at-n reads one run: pass one seed's file" in msg


def test_eval_at_n_refuses_a_vote(tmp_path, capsys):
    from ets.app.cli import main

    msg = one_line_error(capsys, main(["eval", str(tmp_path / "r.jsonl"), "--at-n", "--vote", "majority"]))
    assert msg.endswith("--vote is not an option of --at-n, which shows all three votes; drop --vote")


def test_a_preset_word_that_matches_no_model_lists_the_presets_that_mention_it(capsys):
    from ets.app.cli import main

    msg = one_line_error(capsys, main(["presets", "qwen"]))
    assert "presets that mention it: qwen2.5-math-*-instruct, qwen2.5-*-instruct" in msg


def test_a_reward_that_scores_every_step_alike_is_said(tmp_path, caplog, monkeypatch):
    """A PRM reading a saturated logit scores 1.0 everywhere: the run says so."""
    from ets.app.cli import main

    (tmp_path / "flat_reward.py").write_text(
        "def flat(questions, trajectories):\n    return [[[1.0] * len(t) for t in ts] for ts in trajectories]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert main(["run", "--config", str(TINY), f"output={tmp_path / 'r.jsonl'}", "data.limit=2",
                     "reward.name=flat_reward:flat"]) == 0
    assert "step scores was 1: the reward told no step from another" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["run", "--config", str(TINY), f"output={tmp_path / 's.jsonl'}", "data.limit=2"]) == 0
    assert "told no step from another" not in caplog.text
