"""Where a run's votes went (ets/app/diagnose.py, `ets diagnose`)."""

import json

import pytest

from ets.app.diagnose import diagnose


def trajectory(answer, steps=("a", "b", "c"), score=0.5, finish="answer"):
    return {"steps": list(steps), "step_scores": [0.9] * (len(steps) - 1) + [score], "answer": answer,
            "tokens": 10, "finish": finish}


def record(pid, truth, trajectories, correct):
    return {"id": pid, "question": "q", "ground_truth": truth, "trajectories": trajectories, "correct": correct,
            "aggregation": "last", "kv_size": 1}


# p0: the right answer 5 on two trajectories, a wrong 7 on three (written two ways: the
# vote pools 7 and 7.0), one cut at the depth cap; the vote went to 7.
# p1: only wrong answers, all 4.
P0 = record("p0", "5", [trajectory("5", score=0.8), trajectory("5", ("a", "x", "y"), score=0.8),
                        trajectory("7", ("z",), score=0.2), trajectory("7.0", score=0.2), trajectory("7", score=0.2),
                        trajectory(None, finish="max_depth")], correct=False)
P1 = record("p1", "3", [trajectory("4"), trajectory("4")], correct=False)


def test_the_figures_of_a_run_follow_its_trajectories():
    d = diagnose([P0, P1])
    assert d["problems"] == 2 and d["accuracy"] == 0.0
    assert d["solved"] == 1 and d["vote_right_when_solved"] == 0.0
    # shares of each problem's trajectories, the cut one included in the count
    assert d["right_share"] == pytest.approx((2 / 6 + 0) / 2)
    assert d["top_wrong_share"] == pytest.approx((3 / 6 + 2 / 2) / 2)
    assert d["right_leads"] == 0                      # 2 right against 3 of one wrong answer
    # weighted as the vote weighs them: p0's right answer 1.6 of the answered 2.2
    assert d["right_weight_share"] == pytest.approx((1.6 / 2.2 + 0) / 2)
    assert d["top_wrong_weight_share"] == pytest.approx((0.6 / 2.2 + 1.0) / 2)
    assert d["distinct_answers"] == 1.5               # {5, 7 = 7.0} and {4}
    assert d["distinct_prefixes"] == 2.0              # p0: (a, b, c), (a, x, y), (z,); p1: one
    assert diagnose([P0, P1], prefix_steps=1)["distinct_prefixes"] == 1.5   # p0: a, z
    assert d["cut_at_depth"] == 0.5 and d["trajectories"] == 4
    assert d["steps"] == pytest.approx((5 * 3 + 1 + 2 * 3) / 8)
    # p0's right trajectories (0.8, 0.8) outscore its wrong ones (0.2 x 3); p1 has no right one
    assert (d["score_auc_within"], d["problems_right_and_wrong"]) == (1.0, 1)


def test_the_scores_separation_is_per_problem_not_pooled():
    """Two problems whose scores each rank wrong above right, but one scored high
    throughout: pooled, right would seem to outscore wrong 3 times in 4."""
    high = record("p0", "5", [trajectory("5", score=0.8), trajectory("6", score=0.9)], correct=False)
    low = record("p1", "5", [trajectory("5", score=0.1), trajectory("6", score=0.2)], correct=False)
    assert diagnose([high, low])["score_auc_within"] == 0.0
    mixed = record("p2", "5", [trajectory("5", score=0.3), trajectory("5", score=0.9), trajectory("6", score=0.5),
                               trajectory(None, score=0.0, finish="max_depth")], correct=True)
    assert diagnose([mixed])["score_auc_within"] == 0.5   # the unanswered one is left out
    assert diagnose([P1])["score_auc_within"] is None     # no problem with both


def test_a_run_that_votes_right_when_it_can():
    won = record("p0", "5", [trajectory("5"), trajectory("5"), trajectory("6")], correct=True)
    d = diagnose([won])
    assert (d["solved"], d["vote_right_when_solved"], d["right_leads"]) == (1, 1.0, 1)


def test_a_run_that_solves_nothing_has_no_vote_share_to_give():
    from ets.app.diagnose import diagnose_table

    d = diagnose([P1])
    assert d["solved"] == 0 and d["vote_right_when_solved"] is None
    row = next(line for line in diagnose_table([("run", d)]) if "the vote picks the right answer" in line)
    assert row.endswith("| n/a |")


def test_ets_diagnose_prints_a_column_per_run_and_refuses_bad_files(tmp_path, capsys):
    from ets.app.cli import main

    a, b = tmp_path / "rebase_w64.jsonl", tmp_path / "ets_w64.jsonl"
    a.write_text(json.dumps(P0) + "\n" + json.dumps(P1) + "\n")
    b.write_text(json.dumps(P1) + "\n")
    assert main(["diagnose", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| | rebase_w64 | ets_w64 |"
    assert "| problems with a right trajectory | 1 (50.0%) | 0 (0.0%) |" in lines
    assert "| distinct 3-step prefixes per problem | 2.0 of 4 | 1.0 of 2 |" in lines
    assert main(["diagnose", "--json", str(b)]) == 0
    assert json.loads(capsys.readouterr().out)["ets_w64"]["top_wrong_share"] == 1.0
    answers = tmp_path / "answers.json"
    answers.write_text("[]")
    for argv, words in (([str(answers)], "ets eval"), ([str(tmp_path / "none.jsonl")], "does not exist"),
                        (["--prefix-steps", "0", str(a)], "--prefix-steps 0"), ([str(a), str(a)], "named twice")):
        assert main(["diagnose", *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1


def test_ets_diagnose_pools_a_sweeps_seed_files_into_one_column(tmp_path, capsys):
    from ets.app.cli import main

    (tmp_path / "rebase_w64_s0.jsonl").write_text(json.dumps(P0) + "\n" + json.dumps(P1) + "\n")
    (tmp_path / "rebase_w64_s1.jsonl").write_text(json.dumps(P1) + "\n")
    single = tmp_path / "ets_w64.jsonl"
    single.write_text(json.dumps(P1) + "\n")
    assert main(["diagnose", str(tmp_path / "rebase_w64"), str(single)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| | rebase_w64 (seeds 0,1: 2/1 problems) | ets_w64 |"
    # each (problem, seed) search is one of the column's problems: P0 once, P1 twice
    # over seeds the rows count searches, each problem once per seed
    assert "| searches (problem x seed) | 3 (2 seeds) | 1 |" in lines
    assert "| searches (problem x seed) with a right trajectory | 1 (33.3%) | 0 (0.0%) |" in lines
    # two files of one name stay apart by their paths; a name that is neither file nor run: exit 2
    (tmp_path / "b").mkdir()
    other = tmp_path / "b" / "ets_w64.jsonl"
    other.write_text(json.dumps(P0) + "\n")
    assert main(["diagnose", str(single), str(other)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"| | {single} | {other} |"
    assert main(["diagnose", str(tmp_path / "b" / "ets_w16")]) == 2
    assert "neither a results file nor a sweep's run" in capsys.readouterr().err


def test_the_rule_that_read_each_answer_is_counted_per_run(tmp_path, capsys):
    """A row per answer rule, its share of the run's trajectories; records written before
    the rule was recorded count as unknown."""
    from ets.app.cli import main

    def ruled(answer, rule):
        return {**trajectory(answer), "answer_rule": rule}

    new = record("p0", "5", [ruled("5", "marker"), ruled("5", "last_number"), ruled("6", "last_number"),
                             ruled(None, None)], correct=True)
    assert diagnose([new, P1])["answer_rules"] == {"marker": 1, "last_number": 2, "none": 1, "unknown": 2}
    a, b = tmp_path / "new.jsonl", tmp_path / "old.jsonl"
    a.write_text(json.dumps(new) + "\n")
    b.write_text(json.dumps(P1) + "\n")
    assert main(["diagnose", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if "share of trajectories" in line or "not recorded" in line]
    assert rows == [
        "| answer read by marker (share of trajectories) | 25.0% (1) | 0.0% (0) |",
        "| answer read by last_number (share of trajectories) | 50.0% (2) | 0.0% (0) |",
        "| no answer (share of trajectories) | 25.0% (1) | 0.0% (0) |",
        "| answer rule not recorded (records of an older ets) | 0.0% (0) | 100.0% (2) |",
    ]
