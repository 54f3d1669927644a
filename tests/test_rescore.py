"""`ets rescore`: a best-of-N run scored by another reward is the run that reward would
have made (real tiny models: configs/tiny.yaml's policy and step-tag PRM)."""

import json
from pathlib import Path

import pytest

from ets.app.cli import main
from tests.helpers import TINY, one_line_error, run_cli

# Another reward for the same samples: the step-tag PRM read with its LM's surprise.
OTHER = "reward.options={surprise: {tag: 1.0, step: 0.7, path: 0.3, bias: -0.2}}"


def lines(path):
    return [json.loads(l) for l in Path(path).read_text().splitlines()]


def rescore(source, *argv):
    return main(["rescore", "--quiet", "--from", str(source), *map(str, argv)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Best-of-N sampled once with each reward, and the first run rescored with the second."""
    d = tmp_path_factory.mktemp("rescore")
    assert run_cli("method=best_of_n", f"output={d / 'tag.jsonl'}") == 0
    assert run_cli("method=best_of_n", OTHER, f"output={d / 'other.jsonl'}") == 0
    assert rescore(d / "tag.jsonl", "--config", TINY, "--output", d / "rescored.jsonl", "method=best_of_n", OTHER) == 0
    return d


def test_rescored_records_are_the_live_runs_of_that_reward(runs):
    tag, live, rescored = (lines(runs / f"{n}.jsonl") for n in ("tag", "other", "rescored"))
    assert [r["id"] for r in rescored] == [r["id"] for r in live]
    changed = 0
    for old, want, got in zip(tag, live, rescored):
        assert [t["steps"] for t in got["trajectories"]] == [t["steps"] for t in want["trajectories"]]
        assert got["answer"] == want["answer"] and got["correct"] == want["correct"]
        for g, w, o in zip(got["trajectories"], want["trajectories"], old["trajectories"]):
            assert g["step_scores"] == pytest.approx(w["step_scores"], abs=1e-5)
            changed += g["step_scores"] != pytest.approx(o["step_scores"], abs=1e-3)
        for key in ("kv_size", "kv_size_ref", "generated_tokens", "num_nodes", "wall_time"):
            assert got[key] == old[key]  # the sampling run's figures, kept
        assert got.pop("rescored_from") == str((runs / "tag.jsonl").resolve()) and "rescored_from" not in want
    assert changed > 0  # the new reward did score: its scores are not the source's


def test_the_output_resumes_as_a_run_of_the_new_config(runs, capsys):
    # `ets run` with the new reward finds every problem done: nothing is sampled again.
    assert run_cli("method=best_of_n", OTHER, f"output={runs / 'rescored.jsonl'}") == 0
    assert "0 new" in capsys.readouterr().out
    made = json.loads((runs / "rescored.config.json").read_text())
    live = json.loads((runs / "other.config.json").read_text())
    assert made["compared"] == live["compared"]
    assert made["recorded"]["rescored_from"] == str((runs / "tag.jsonl").resolve())
    summary = json.loads((runs / "rescored.summary.json").read_text())
    assert summary["problems"] == 4 and summary["tokens_per_s"] is None and summary["rescore_seconds"] > 0


def test_an_interrupted_rescore_resumes_without_scoring_twice(runs, tmp_path):
    out = tmp_path / "r.jsonl"
    whole = lines(runs / "rescored.jsonl")
    out.write_text(json.dumps(whole[0]) + "\n" + json.dumps(whole[1])[:50])  # one done, one torn
    (tmp_path / "r.config.json").write_text((runs / "rescored.config.json").read_text())
    assert rescore(runs / "tag.jsonl", "--config", TINY, "--output", out, "method=best_of_n", OTHER) == 0
    got = lines(out)
    assert [r["id"] for r in got] == [r["id"] for r in whole]
    assert got[0] == whole[0]


def test_the_answer_rules_may_change_too_and_give_the_live_runs_answers(runs, tmp_path):
    """Answers are read again from the stored steps: a rescore with other answer rules
    writes the answers (and rules) a live run with them would."""
    marked = "answer_extraction=[boxed,marker,hashes]"
    assert run_cli("method=best_of_n", OTHER, marked, f"output={tmp_path / 'live.jsonl'}") == 0
    assert rescore(runs / "tag.jsonl", "--config", TINY, "--output", tmp_path / "r.jsonl", "method=best_of_n", OTHER,
                   marked) == 0
    source, live, got = lines(runs / "tag.jsonl"), lines(tmp_path / "live.jsonl"), lines(tmp_path / "r.jsonl")
    read = lambda records, key: [[t[key] for t in r["trajectories"]] for r in records]
    for key in ("answer", "answer_rule"):
        assert read(got, key) == read(live, key)
    assert read(got, "answer_rule") != read(source, "answer_rule")   # the source read last numbers too
    assert [(r["answer"], r["correct"]) for r in got] == [(r["answer"], r["correct"]) for r in live]


@pytest.mark.parametrize("args, words", [
    (["method=rebase"], "only best-of-N's samples do not depend on the reward"),
    (["method=best_of_n", "width=8"], "search.width: 4 -> 8"),
    (["method=best_of_n", "temperature=0.5"], "search.temperature"),
])
def test_a_config_that_would_draw_other_samples_is_refused(runs, tmp_path, capsys, args, words):
    out = tmp_path / "r.jsonl"
    err = one_line_error(capsys, rescore(runs / "tag.jsonl", "--config", TINY, "--output", out, *args))
    assert words in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_tree_search_or_the_source_itself_is_refused(runs, tmp_path, capsys):
    assert run_cli("method=rebase", "data.limit=1", f"output={tmp_path / 'rebase.jsonl'}") == 0
    err = one_line_error(capsys, rescore(tmp_path / "rebase.jsonl", "--config", TINY, "--output", tmp_path / "r.jsonl",
                                         "method=best_of_n"))
    assert "searched by 'rebase'" in err and not (tmp_path / "r.jsonl").exists()
    before = (runs / "tag.jsonl").read_bytes()
    err = one_line_error(capsys, rescore(runs / "tag.jsonl", "--config", TINY, "--output", runs / "tag.jsonl",
                                         "method=best_of_n", OTHER))
    assert "the output is the source" in err and (runs / "tag.jsonl").read_bytes() == before
    err = one_line_error(capsys, rescore(tmp_path / "none.jsonl", "--config", TINY, "--output", tmp_path / "r.jsonl",
                                         "method=best_of_n"))
    assert "does not exist" in err
    err = one_line_error(capsys, rescore(tmp_path, "--config", TINY, "--output", tmp_path / "r.jsonl", "method=beam"))
    assert "is a folder; pass the results file" in err  # (before the method: the source comes first)


def test_a_slice_of_the_data_rescores_that_slices_problems(runs, tmp_path):
    """data.start / end / limit select problems of the data as `ets run` does (the source's
    lines are in the order its problems finished)."""
    from ets.api import load_problems

    out = tmp_path / "r.jsonl"
    assert rescore(runs / "tag.jsonl", "--config", TINY, "--output", out, "method=best_of_n", OTHER,
                   "data.start=1", "data.end=3") == 0
    ids = [p.id for p in load_problems(str(TINY))]
    assert sorted(r["id"] for r in lines(tmp_path / "r.1-3.jsonl")) == sorted(ids[1:3])
