"""What a hostile world does to a run's files, through the real command on the tiny config:
the results file deleted, moved or replaced mid-run, a full disk, a second run let in by
deleting a lock file, special files as output or data, outputs whose side files would
clash, and results files that readers cannot read. Nothing finished is lost, and every
refusal is one line `ets: error: ...`."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ets.app.cli import main
from tests.helpers import TINY, one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[1]


def data_file(folder: Path, n: int = 12) -> Path:
    path = folder / "d.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i + 1}?", "answer": f"#### {2 * i + 1}"}) + "\n"
                            for i in range(n)))
    return path


def ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def vandal_run(out: Path, data: Path, how: str, *extra: str) -> list[str]:
    return ["run", "--quiet", "--log-level", "WARNING", "--config", str(TINY), f"output={out}", f"data.path={data}",
            "reward.name=tests.fault_rewards:vandal", "reward.model=null", "concurrency=1",
            f"reward.options={{path: {out}, after: 3, how: {how}}}", *extra]


# ---- the results file deleted, emptied, moved or replaced while the run writes it

@pytest.mark.parametrize("how", ["delete", "folder", "empty"])
def test_results_deleted_mid_run_are_written_again_and_the_run_goes_on(tmp_path, capsys, how):
    data = data_file(tmp_path)
    out = tmp_path / "runs" / "r.jsonl"
    assert main(vandal_run(out, data, how)) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "(12 problems, 12 new)" in captured.out
    what = "emptied" if how == "empty" else "deleted"
    assert f"{out} was {what} while this run wrote it; written again from the 3 results" in captured.err
    got = ids(out)
    assert len(got) == 12 == len(set(got))
    assert json.loads((tmp_path / "runs" / "r.summary.json").read_text())["problems"] == 12
    assert (tmp_path / "runs" / "r.config.json").is_file()        # the provenance, with the folder
    assert main(vandal_run(out, data, how)) == 0                    # and it resumes as done
    assert "(12 problems, 0 new)" in capsys.readouterr().out


def test_results_moved_mid_run_stop_it_naming_where_they_are(tmp_path, capsys):
    data = data_file(tmp_path)
    out = tmp_path / "r.jsonl"
    msg = one_line_error(capsys, main(vandal_run(out, data, "move")))
    moved = Path(f"{out}.moved")
    assert f"{out} was moved while this run wrote it; its 3 results are in {moved}" in msg
    assert len(ids(moved)) == 3 and not out.exists()
    os.rename(moved, out)                                           # as the error says
    # the same config (the reward is compared); it does not act twice on one file
    assert run_cli(f"output={out}", f"data.path={data}", "reward.name=tests.fault_rewards:vandal",
                   "reward.model=null", "concurrency=1", f"reward.options={{path: {out}, after: 3, how: move}}") == 0
    assert len(set(ids(out))) == 12


def test_results_replaced_mid_run_are_saved_beside_and_the_new_file_left_alone(tmp_path, capsys):
    data = data_file(tmp_path)
    out = tmp_path / "r.jsonl"
    msg = one_line_error(capsys, main(vandal_run(out, data, "replace")))
    saved = next(tmp_path.glob("r.saved-*.jsonl"))
    assert f"{out} was replaced by another file while this run wrote it; this run's 3 results are saved in {saved}" in msg
    assert out.read_text() == '{"id": "someone else\'s"}\n'
    assert len(ids(saved)) == 3


# ---- a second run beside a live one

SLOW = ["reward.name=tests.fault_rewards:slow", "reward.model=null", "concurrency=1"]


def test_deleting_a_lock_file_does_not_let_a_second_run_in(tmp_path, capsys):
    """A killed run of an older ets left `r.jsonl.lock` behind, which invites deleting it;
    and a user who deletes whatever looks like a lock must still not get two writers."""
    data = data_file(tmp_path)
    out = tmp_path / "r.jsonl"
    argv = ["--config", str(TINY), f"output={out}", f"data.path={data}", *SLOW]
    first = subprocess.Popen([sys.executable, "-m", "ets", "run", "--quiet", *argv], cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (out.exists() and out.read_bytes().count(b"\n") >= 1):
            assert first.poll() is None and time.time() < deadline, first.stderr.read() if first.poll() else "slow"
            time.sleep(0.1)
        for lock in tmp_path.glob("*.lock"):
            lock.unlink()
        msg = one_line_error(capsys, run_cli(*argv[2:]))
        assert f"{out} is being written by process {first.pid}" in msg
        assert first.wait(timeout=300) == 0, first.stderr.read()
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGKILL)
            first.wait()
    got = ids(out)
    assert len(got) == 12 == len(set(got))


# ---- a full disk

@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs mounted for the test; skipped where mounting is not allowed (root only)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
                                 capture_output=True).returncode == 0
    except FileNotFoundError:
        mounted = False
    if not mounted:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def fill(disk: Path, leave: int) -> Path:
    """A file that leaves `leave` bytes of `disk` free."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"x" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def test_a_disk_full_mid_run_keeps_the_finished_problems_and_a_rerun_resumes(tmp_path, small_disk, capsys):
    data = data_file(tmp_path)
    out = small_disk / "r.jsonl"
    filler = fill(small_disk, 12 * 1024)
    msg = one_line_error(capsys, run_cli(f"output={out}", f"data.path={data}"))
    kept = out.read_text().splitlines()
    assert 0 < len(kept) < 12
    assert msg == (f"ets: error: cannot write {out} (No space left on device); the {len(kept)} finished problems "
                   f"are kept in {out}, and rerunning the same command resumes after them once there is free space")
    assert all(json.loads(line) for line in kept)                   # whole lines only
    filler.unlink()
    assert run_cli(f"output={out}", f"data.path={data}") == 0
    lines = out.read_text().splitlines()
    assert lines[:len(kept)] == kept and len(set(ids(out))) == 12


@pytest.mark.parametrize("where", ["r.jsonl", "sub/r.jsonl"])
def test_a_disk_full_at_the_start_leaves_nothing_behind(tmp_path, small_disk, capsys, where):
    fill(small_disk, 0)
    msg = one_line_error(capsys, run_cli(f"output={small_disk / where}", "data.limit=2"))
    assert "(No space left on device); nothing was written; rerun the same command once there is free space" in msg
    assert tree(small_disk) == ["filler"]


def test_a_write_that_fails_leaves_no_part_of_its_line(tmp_path, capsys, monkeypatch):
    """The same at the writer's boundary, where no tmpfs can be mounted: the fourth line
    fails half-written (ENOSPC), and is cut off again."""
    import ets.app.writer as writer

    real, calls = writer._write_all, []

    def full_on_the_fourth(fd, data):
        calls.append(len(data))
        if len(calls) == 4:
            os.write(fd, data[:len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data)

    out = tmp_path / "r.jsonl"
    monkeypatch.setattr(writer, "_write_all", full_on_the_fourth)
    msg = one_line_error(capsys, run_cli(f"output={out}", "data.limit=4"))
    assert "cannot write" in msg and "the 3 finished problems are kept" in msg and "once there is free space" in msg
    assert out.read_bytes().endswith(b"\n") and len(ids(out)) == 3
    monkeypatch.undo()
    assert run_cli(f"output={out}", "data.limit=4") == 0 and len(set(ids(out))) == 4


def test_a_summary_that_cannot_be_written_is_one_line_and_a_rerun_writes_it(tmp_path, capsys, monkeypatch):
    import ets.app.run as run_module

    def full(path, value):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    out = tmp_path / "r.jsonl"
    monkeypatch.setattr(run_module, "write_json_atomic", full)
    msg = one_line_error(capsys, run_cli(f"output={out}", "data.limit=2"))
    assert f"cannot write {tmp_path / 'r.summary.json'} (No space left on device); the 2 results in {out} are complete" in msg
    monkeypatch.undo()
    assert run_cli(f"output={out}", "data.limit=2") == 0
    assert json.loads((tmp_path / "r.summary.json").read_text())["problems"] == 2


# ---- special files as output or data

def ets_subprocess(*argv, timeout=120):
    """`ets run` in its own process (a hang fails the test instead of hanging it)."""
    return subprocess.run([sys.executable, "-m", "ets", "run", "--quiet", "--config", str(TINY), *argv], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("case", ["stdout", "fifo output", "fifo data"])
def test_a_fifo_or_a_stream_is_refused_without_hanging(tmp_path, case):
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    argv = {"stdout": ["--output", "/dev/stdout"], "fifo output": ["--output", str(fifo)],
            "fifo data": ["--output", str(tmp_path / "r.jsonl"), f"data.path={fifo}"]}[case]
    done = ets_subprocess(*argv)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr
    # /dev/stdout is a pipe here; a terminal is a character device, a file is refused by its name
    assert "is a FIFO (named pipe), not a regular file" in err[0]
    assert tree(tmp_path) == ["f.jsonl"]


@pytest.mark.parametrize("data, words", [("folder", "is a folder; set data.path to a JSONL file"),
                                         ("/dev/null", "is a character device, not a regular file")])
def test_data_that_is_not_a_file_is_named_as_what_it_is(tmp_path, capsys, data, words):
    if data == "folder":
        data = tmp_path / "problems"
        data.mkdir()
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", f"data.path={data}"))
    assert words in msg and "does not exist" not in msg


def test_a_folder_where_the_config_record_goes_is_refused(tmp_path, capsys):
    (tmp_path / "r.config.json").mkdir()
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", "data.limit=1"))
    assert "r.config.json' beside it is a folder" in msg
    assert tree(tmp_path) == ["r.config.json"]


# ---- output names: side files that cannot clash, .json that eval reads as another format

@pytest.mark.parametrize("name", ["exp", "r.json", "r.JSONL", ".jsonl"])
def test_an_output_not_named_jsonl_is_refused_before_anything_is_made(tmp_path, capsys, name):
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / name}", "data.limit=1"))
    assert "name it with the .jsonl suffix" in msg
    assert "ets: error:" in one_line_error(capsys, main(["run", "--check", "--config", str(TINY),
                                                         "--output", str(tmp_path / name)]))
    assert tree(tmp_path) == []


def test_two_outputs_never_share_side_files_and_old_ones_resume(tmp_path, capsys):
    exp = tmp_path / "exp.jsonl"
    assert run_cli(f"output={exp}", "data.limit=2") == 0
    shutil.move(exp, tmp_path / "exp")                              # as an earlier ets named it
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'exp'}", "data.limit=2", "method=beam"))
    assert "an existing exp of an earlier ets resumes once renamed exp.jsonl" in msg
    made = json.loads((tmp_path / "exp.config.json").read_text())
    assert made["compared"]["search.method"] == "rebase"           # not overwritten by another run
    shutil.move(tmp_path / "exp", exp)
    assert run_cli(f"output={exp}", "data.limit=3") == 0          # resumes, one problem new
    assert "(3 problems, 1 new)" in capsys.readouterr().out


def test_eval_of_results_named_json_names_the_fix(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", "data.limit=2") == 0
    shutil.copy(out, tmp_path / "old.json")
    msg = one_line_error(capsys, main(["eval", str(tmp_path / "old.json")]))
    assert "holds one result per line (JSONL), as `ets run` writes" in msg and "rename it old.jsonl" in msg


# ---- ground truths that are not one answer

@pytest.mark.parametrize("answer, kind", [([1, 2], "a JSON list"), ({"a": 1}, "a JSON object"),
                                          (True, "a JSON boolean")])
def test_a_ground_truth_that_is_not_one_answer_is_refused(tmp_path, capsys, answer, kind):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "What is 1 + 1?", "answer": "2"}) + "\n"
                    + json.dumps({"question": "Which two numbers?", "answer": answer}) + "\n")
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", f"data.path={data}", "data.format=fields",
                                         "data.question_field=question", "data.answer_field=answer"))
    assert f"{data}:2: field 'answer' is {kind}, {json.dumps(answer)}, not a string or a number" in msg
    assert tree(tmp_path) == ["d.jsonl"]


def test_a_numeric_ground_truth_is_graded_as_its_text(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "What is 3 + 4?", "answer": 7}) + "\n")
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", f"data.path={data}", "data.format=fields", "data.question_field=question",
                   "data.answer_field=answer") == 0
    assert json.loads(out.read_text())["ground_truth"] == "7"


# ---- readers of results files

@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A best-of-N output of 3 problems (rescore reads only those), its config beside it."""
    folder = tmp_path_factory.mktemp("finished")
    out = folder / "bon.jsonl"
    assert run_cli(f"output={out}", "data.limit=3", "method=best_of_n") == 0
    return out


def spoiled(finished: Path, folder: Path, name: str, lines: list[str]) -> Path:
    """A copy of `finished` (and its config record) holding `lines`."""
    path = folder / f"{name}.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    shutil.copy(finished.with_name("bon.config.json"), folder / f"{name}.config.json")
    return path


def reader(command: str, path: Path, finished: Path, folder: Path) -> list[str]:
    return {"eval": ["eval", str(path)], "compare": ["compare", str(finished), str(path)],
            "diagnose": ["diagnose", str(path)],
            "rescore": ["rescore", "--quiet", "--from", str(path), "--config", str(TINY), "--output",
                        str(folder / "rescored.jsonl"), "method=best_of_n"]}[command]


@pytest.mark.parametrize("command", ["eval", "compare", "diagnose", "rescore"])
def test_a_problem_twice_in_a_file_is_refused_by_every_reader(finished, tmp_path, capsys, command):
    lines = finished.read_text().splitlines()
    both = spoiled(finished, tmp_path, "both", lines + lines[:1])
    msg = one_line_error(capsys, main(reader(command, both, finished, tmp_path)))
    assert f"{both}: lines 1 and 4 both hold problem {json.loads(lines[0])['id']!r} (two outputs concatenated?)" in msg
    assert not (tmp_path / "rescored.jsonl").exists()


def _drop(key):
    return lambda r: r.pop(key)


def _drop_in_trajectory(key):
    return lambda r: r["trajectories"][0].pop(key)


SPOILS = {  # name -> (how a record is spoiled, what the error says, the commands that read it)
    "no answer": (_drop_in_trajectory("answer"), "trajectory 0: no 'answer' field", ("eval", "diagnose")),
    "no correct": (_drop("correct"), "no 'correct' field", ("compare", "diagnose")),
    "no steps": (_drop_in_trajectory("steps"), "trajectory 0: no 'steps' field", ("diagnose", "rescore")),
    "null scores": (lambda r: r["trajectories"][0].update(step_scores=None),
                    "trajectory 0: 'step_scores' is null, not a list of finite numbers", ("eval", "diagnose")),
    # a NaN: json reads and writes it, and no vote can rank it
    "a NaN score": (lambda r: r["trajectories"][0].update(step_scores=[float("nan")]),
                    "trajectory 0: 'step_scores' is [nan], not a list of finite numbers", ("eval", "diagnose")),
    "string trajectory": (lambda r: r["trajectories"].__setitem__(0, "oops"),
                          "trajectory 0 is 'oops', not an object", ("eval", "diagnose", "rescore")),
}


@pytest.mark.parametrize("command, spoil", [(c, s) for s, (_, _, cs) in SPOILS.items() for c in cs])
def test_a_record_without_what_a_reader_reads_is_one_line_naming_it(finished, tmp_path, capsys, command, spoil):
    how, words, _ = SPOILS[spoil]
    records = [json.loads(line) for line in finished.read_text().splitlines()]
    how(records[1])
    path = spoiled(finished, tmp_path, "spoiled", [json.dumps(r) for r in records])
    msg = one_line_error(capsys, main(reader(command, path, finished, tmp_path)))
    assert f"{path}: line 2 (problem {records[1]['id']!r})" in msg and words in msg
    assert f"ets {command} reads the records `ets run` writes" in msg


def test_overwrite_on_a_full_disk_keeps_the_old_results(tmp_path, small_disk, capsys):
    """--overwrite empties the old results only once the new run's first line is sure to
    fit: on a full disk it refuses with the old run's files as they were."""
    out = small_disk / "r.jsonl"
    assert run_cli(f"output={out}", "data.limit=1") == 0
    before = {p.name: p.read_bytes() for p in small_disk.iterdir()}
    fill(small_disk, 0)
    msg = one_line_error(capsys, main(["run", "--quiet", "--overwrite", "--config", str(TINY), f"output={out}",
                                       "data.limit=2", "save_trees=true", "width=8"]))
    assert "(No space left on device)" in msg
    assert {p.name: p.read_bytes() for p in small_disk.iterdir() if p.name != "filler"} == before


@pytest.mark.parametrize("key", ["output", "data.path"])
def test_a_loop_of_symbolic_links_is_one_line(tmp_path, capsys, key):
    (tmp_path / "a.jsonl").symlink_to(tmp_path / "b.jsonl")
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "a.jsonl")
    loop = tmp_path / "a.jsonl"
    over = [f"output={loop}"] if key == "output" else [f"output={tmp_path / 'r.jsonl'}", f"data.path={loop}"]
    msg = one_line_error(capsys, run_cli(*over, "data.limit=1"))
    # (a run reads the data first, and finds no file there)
    assert (f"{key} '{loop}' is a loop of symbolic links; point it at a file" if key == "output"
            else f"data file '{loop}' does not exist") in msg
    msg = one_line_error(capsys, main(["run", "--check", "--config", str(TINY), *over]))
    assert f"{key} '{loop}' is a loop of symbolic links; point it at a file" in msg


def test_an_error_mid_run_is_printed_on_a_line_of_its_own_after_the_progress_bar(tmp_path, capsys):
    """The progress bar is closed before the error is printed: its last state ends its line,
    and the error is the last line, not written over the bar's or followed by it."""
    out = tmp_path / "r.jsonl"
    code = main(["run", "--config", str(TINY), f"output={out}", "reward.name=tests.fault_rewards:short",
                 "reward.model=null", "data.limit=2"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.replace("\r", "\n").strip().splitlines()
    assert lines[-1].startswith("ets: error: ") and "reward" in lines[-1], err
    assert "\nets: error: " in err and "%|" in err  # the bar was shown, and the error starts a line
