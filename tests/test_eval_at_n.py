"""`ets eval --at-n`: accuracy with n of each problem's trajectories, for the naive,
weighted and majority choices. Hand-made records whose figures are worked out by hand,
and a real best-of-N run of the bundled demo models through the command."""

import json
from pathlib import Path

import pytest

from ets.app.at_n import accuracy_at_n, at_n_table, n_values
from ets.app.cli import main
from ets.app.demo import DEMO_CONFIG
from tests.helpers import one_line_error


def traj(answer, score):
    return {"steps": ["s"], "step_scores": [score], "answer": answer, "finish": "answer"}


# A is always right and B always wrong, whatever is drawn. C: one wrong "5" scored highest,
# three right "7" whose scores sum above it.
A = {"id": "a", "ground_truth": "7", "trajectories": [traj("7", 0.1), traj("7", 0.2)]}
B = {"id": "b", "ground_truth": "3", "trajectories": [traj("5", 0.9), traj("5", 0.8)]}
C = {"id": "c", "ground_truth": "7",
     "trajectories": [traj("5", 0.9), traj("7", 0.3), traj("7", 0.4), traj("7", 0.35)]}


def test_the_n_values_are_the_powers_of_two_below_the_width_and_the_width():
    assert n_values(1) == [1]
    assert n_values(8) == [1, 2, 4, 8]
    assert n_values(12) == [1, 2, 4, 8, 12]


def test_all_trajectories_give_the_runs_own_choices():
    f = accuracy_at_n([A, B, C], draws=3)
    assert (f["n"], f["width"], f["problems"], f["draws"]) == ([1, 2, 4], 4, 3, 3)
    # n = 4: C's naive choice is the 0.9 "5" (wrong); its three 7s outweigh and outnumber it
    assert [f[s]["mean"][-1] for s in ("naive", "weighted", "majority")] == pytest.approx([1 / 3, 2 / 3, 2 / 3])
    assert all(f[s]["sd"][-1] == 0.0 for s in ("naive", "weighted", "majority"))


def test_draws_of_n_average_to_the_expected_accuracy():
    f = accuracy_at_n([A, B, C], draws=400)
    # n = 1: one trajectory is every choice; C is right when a 7 is drawn (3 in 4):
    # the share of right trajectories, (1 + 0 + 3/4) / 3
    for s in ("naive", "weighted", "majority"):
        assert f[s]["mean"][0] == f["naive"]["mean"][0]
        assert {f[s]["min"][0], f[s]["max"][0]} <= {1 / 3, 2 / 3}
    assert f["naive"]["mean"][0] == pytest.approx(1.75 / 3, abs=0.03)
    # n = 2: C is right only on the 3 of its 6 pairs without the "5" (with it, the "5"
    # scores highest, outweighs a 7 and ties one, the tie going to the earlier trajectory)
    for s in ("naive", "weighted", "majority"):
        assert f[s]["mean"][1] == pytest.approx(1.5 / 3, abs=0.03)
        assert f[s]["sd"][1] > 0
    assert accuracy_at_n([A, B, C], draws=400) == f       # seeded: the same draws again


def test_a_single_draw_has_no_spread_and_the_table_is_narrow():
    f = accuracy_at_n([A, B, C], "min", draws=1, float_rounding=None)
    assert f["naive"]["sd"] == [0.0, 0.0, 0.0]
    lines = at_n_table(f)
    assert all(len(line) <= 80 for line in lines)
    assert lines[3] == "| n | naive (best score) | weighted vote | majority vote |"
    assert lines[-1] == "| 4 | 33.3 ± 0.0 | 66.7 ± 0.0 | 66.7 ± 0.0 |"
    assert lines[1] == "agg=min: mean ± sample sd over 1 draw of n."


@pytest.fixture(scope="module")
def bon(tmp_path_factory):
    """Best-of-8 on 10 demo problems: its three votes score 40%, 30% and 40%."""
    out = tmp_path_factory.mktemp("at_n") / "bon.jsonl"
    assert main(["run", "--quiet", "--config", str(DEMO_CONFIG), "method=best_of_n", "width=8", "data.limit=10",
                 "concurrency=10", f"output={out}"]) == 0
    return out


def test_ets_eval_at_n_prints_a_table_and_writes_the_plot(bon, capsys):
    assert main(["eval", str(bon), "--at-n", "--at-n-seeds", "3", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["n"] == [1, 2, 4, 8] and figures["draws"] == 3
    # at n = W every draw keeps all trajectories: the run's accuracy under each vote
    at_w = []
    for selection, vote in (("naive", "best"), ("weighted", "weighted"), ("majority", "majority")):
        assert main(["eval", str(bon), "--vote", vote, "--json"]) == 0
        at_w.append(json.loads(capsys.readouterr().out)["accuracy"])
        assert figures[selection]["mean"][-1] == pytest.approx(at_w[-1], abs=1e-12)
    assert len(set(at_w)) > 1            # the votes disagree on this run: each was checked
    png, pdf = (Path(p) for p in figures["plot"])
    assert png == bon.with_name("bon.at_n.png") and pdf == bon.with_name("bon.at_n.pdf")
    assert png.read_bytes().startswith(b"\x89PNG") and pdf.read_bytes().startswith(b"%PDF")
    assert main(["eval", str(bon), "--at-n"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line.split(" | ")[0] for line in out if line.startswith("| ") and line[2].isdigit()]
    assert rows == ["| 1", "| 2", "| 4", "| 8"]
    assert all(len(line) <= 80 for line in out) and out[-1].startswith("plot: ")


def test_at_n_plot_goes_where_asked_and_several_files_merge(bon, tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"   # the run cut in two slices
    lines = bon.read_text().splitlines(keepends=True)
    a.write_text("".join(lines[:4]))
    b.write_text("".join(lines[4:]))
    for part in (a, b):
        part.with_name(part.stem + ".config.json").write_text(bon.with_name("bon.config.json").read_text())
    assert main(["eval", str(a), str(b), "--at-n", "--plot", str(tmp_path / "plots" / "acc.png"), "--json"]) == 0
    merged = json.loads(capsys.readouterr().out)
    assert merged["plot"] == [str(tmp_path / "plots" / "acc.png"), str(tmp_path / "plots" / "acc.pdf")]
    assert merged["files"] == [str(a), str(b)] and merged["problems"] == len(lines)
    assert main(["eval", str(bon), "--at-n", "--json", "--plot", str(tmp_path / "one")]) == 0
    whole = json.loads(capsys.readouterr().out)
    for s in ("naive", "weighted", "majority"):
        assert merged[s] == whole[s]
    assert (tmp_path / "one.png").is_file() and (tmp_path / "one.pdf").is_file()


def test_at_n_refuses_a_run_without_trajectories(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"id": "x", "ground_truth": "1", "trajectories": []}) + "\n")
    assert "nothing to draw from" in one_line_error(capsys, main(["eval", str(empty), "--at-n"]))
    assert "give a whole number >= 1" in _usage_error(capsys, ["eval", str(empty), "--at-n", "--at-n-seeds", "0"])
    for flag, value in (("--plot", str(tmp_path / "p")), ("--at-n-seeds", "3")):
        err = one_line_error(capsys, main(["eval", str(empty), flag, value]))
        assert f"{flag} is an option of --at-n" in err


def _usage_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err
