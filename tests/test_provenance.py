"""An output knows what made it: reruns with another config are refused naming the keys,
`--overwrite` starts afresh, ids come from the data, a second process is locked out.
All through the real command on the tiny config."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ets.app.cli import main
from ets.app.provenance import BLOCK, BLOCKS, FULL_HASH_BYTES, _file_digest, fingerprint

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"


def run_cli(out, *argv):
    return main(["run", "--quiet", "--config", str(TINY), f"output={out}", *argv])


def ids(path):
    return [json.loads(l)["id"] for l in Path(path).read_text().splitlines()]


def refused(capsys, code):
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("ets: error:"), err
    return err[0]


def data_file(tmp_path, questions, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"question": q, "answer": "#### 1"}) + "\n" for q in questions))
    return path


def test_rerun_with_another_config_is_refused_naming_the_keys(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert run_cli(out, "data.limit=2") == 0
    before = out.read_text()
    made = json.loads((tmp_path / "r.config.json").read_text())
    assert made["compared"]["search.method"] == "rebase" and made["compared"]["search.seed"] == 0
    assert made["recorded"]["data.sha256"] and made["recorded"]["concurrency"] == 4

    msg = refused(capsys, run_cli(out, "data.limit=2", "method=beam", "width=8"))
    assert "search.method: 'rebase' -> 'beam'" in msg and "search.width: 4 -> 8" in msg
    assert "--overwrite" in msg and "new output" in msg
    for change, key in [("temperature=0.5", "search.temperature"), ("seed=3", "search.seed"),
                        ("policy.prompt_template=Q: {question}", "policy.prompt_template"),
                        ("reward.options.tag=X", "reward.options"), ("policy.model=tiny:qwen2", "policy.model"),
                        ("vote=majority", "search.vote")]:
        assert key in refused(capsys, run_cli(out, "data.limit=2", change)), change
    assert out.read_text() == before

    # Keys that do not change a problem's result are recorded, not compared.
    assert run_cli(out, "data.limit=2", "concurrency=1", "policy.max_batch_tokens=512",
                   "reward.options.max_batch_tokens=512") == 0
    assert out.read_text() == before


def test_overwrite_starts_the_output_afresh(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert run_cli(out, "data.limit=2") == 0
    assert run_cli(out, "data.limit=1", "method=beam", "--overwrite") == 0
    records = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(records) == 1 and records[0]["method"] == "beam"
    assert json.loads((tmp_path / "r.config.json").read_text())["compared"]["search.method"] == "beam"
    assert json.loads((tmp_path / "r.summary.json").read_text())["problems"] == 1
    assert run_cli(out, "data.limit=1", "method=beam") == 0  # and it resumes as beam from now on


def files(folder):
    return {p.name: p.read_bytes() for p in Path(folder).iterdir()}


# A reward whose model fails to load: the run fails once its output is open, before its
# first result (its options pass every check made before).
FAILING_REWARD = """
from ets.rewards import ProcessRewardModel


class Unloadable(ProcessRewardModel):
    def __init__(self):
        raise OSError("the PRM's weights are not there")

    def score(self, questions, trajectories):
        return []
"""


@pytest.fixture
def failing_reward(tmp_path_factory, monkeypatch):
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "unloadable_reward.py").write_text(FAILING_REWARD)
    monkeypatch.syspath_prepend(str(folder))
    return "reward.name=unloadable_reward:Unloadable"


def test_an_overwrite_that_fails_before_its_first_result_leaves_the_old_results(tmp_path, capsys, failing_reward):
    """--overwrite clears the output when the new run writes its first result, not when it
    opens it: a run that fails while its models are built loses nothing, and the old
    results still resume."""
    out = tmp_path / "r.jsonl"
    assert run_cli(out, "data.limit=2") == 0
    before = files(tmp_path)
    assert set(before) == {"r.jsonl", "r.config.json", "r.summary.json"}
    assert "weights are not there" in refused(capsys, run_cli(out, "data.limit=2", "method=beam", failing_reward,
                                                               "--overwrite"))
    assert files(tmp_path) == before
    assert run_cli(out, "data.limit=2") == 0 and files(tmp_path) == before  # nothing left to do


def test_a_sweep_overwrite_that_fails_leaves_every_old_output(tmp_path, capsys, failing_reward):
    out = tmp_path / "sw"
    argv = ["sweep", "--quiet", "--config", str(TINY), "--methods", "beam,rebase", "--widths", "2",
            "--out", str(out), "data.limit=1"]
    assert main(argv) == 0
    before = files(out)
    assert "weights are not there" in refused(capsys, main([*argv, failing_reward, "--overwrite"]))
    assert files(out) == before


@pytest.mark.parametrize("argv", [[], ["--overwrite"], ["--check"]])
def test_the_data_file_is_never_the_output(tmp_path, capsys, argv):
    """Results written into the problems' own file would replace the problems (with
    --overwrite, which the resume error suggests)."""
    data = data_file(tmp_path, ["What is 1 + 0?", "What is 2 - 1?"])
    before = data.read_bytes()
    msg = refused(capsys, run_cli(data, f"data.path={data}", *argv))
    assert "is the data file the problems are read from (data.path)" in msg
    assert data.read_bytes() == before and {p.name for p in tmp_path.iterdir()} == {data.name}


def test_check_says_what_the_output_holds_and_refuses_as_a_run_would(tmp_path, capsys):
    out = tmp_path / "r.jsonl"

    def check(*argv):
        code = run_cli(out, "--check", *argv)
        return code, [line for line in capsys.readouterr().out.splitlines() if line.startswith("# output")]

    assert check("data.limit=2") == (0, [f"# output {out}: new; a run searches all 2 problems"])
    assert run_cli(out, "data.limit=1") == 0
    capsys.readouterr()
    before = files(tmp_path)
    assert check("data.limit=3") == (0, [f"# output {out}: holds 1 result of this config; a run searches the "
                                         "other 2 problems"])
    assert "search.width: 4 -> 8" in refused(capsys, run_cli(out, "--check", "data.limit=1", "width=8"))
    code, lines = check("data.limit=1", "width=8", "--overwrite")
    assert code == 0 and "--overwrite: its results go when the run writes its first new one" in lines[0]
    assert files(tmp_path) == before


def test_prepended_problem_is_searched_and_nothing_twice(tmp_path):
    out = tmp_path / "r.jsonl"
    data = data_file(tmp_path, ["What is 1 + 0?", "What is 2 - 1?"])
    assert run_cli(out, f"data.path={data}") == 0
    first = out.read_text()
    data_file(tmp_path, ["What is 3 - 2?", "What is 1 + 0?", "What is 2 - 1?"])
    assert run_cli(out, f"data.path={data}") == 0
    got = ids(out)
    assert len(got) == 3 == len(set(got)) and out.read_text().startswith(first)


def test_more_problems_resume_fewer_or_other_problems_are_refused(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert run_cli(out, "data.limit=2") == 0
    assert run_cli(out, "data.limit=3") == 0 and len(ids(out)) == 3
    msg = refused(capsys, run_cli(out, "data.limit=1"))
    assert "2 of the 3 problems it holds are not among this run's problems" in msg and "data.limit" in msg
    other = data_file(tmp_path, ["What is 5 - 4?"])
    assert "not among this run's problems" in refused(capsys, run_cli(out, f"data.path={other}"))
    assert len(ids(out)) == 3


def test_a_problem_changed_under_its_id_is_refused(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "p1", "question": "What is 1 + 0?", "answer": "#### 1"}) + "\n")
    assert run_cli(out, f"data.path={data}") == 0
    data.write_text(json.dumps({"id": "p1", "question": "What is 1 + 0?", "answer": "#### 2"}) + "\n")
    assert "problem 'p1' has another ground truth" in refused(capsys, run_cli(out, f"data.path={data}"))


def test_results_without_their_config_are_refused(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert run_cli(out, "data.limit=1") == 0
    (tmp_path / "r.config.json").unlink()
    assert "no readable record of the config" in refused(capsys, run_cli(out, "data.limit=1"))
    assert run_cli(out, "data.limit=1", "--overwrite") == 0


def test_sweep_refuses_a_changed_config_before_any_work_and_overwrites(tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", "--quiet", "--config", str(TINY), "--methods", "beam,rebase", "--widths", "2",
            "--out", str(out), "data.limit=1"]
    assert main(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    msg = refused(capsys, main([*argv, "temperature=0.5"]))
    assert "beam_w2.jsonl" in msg and "search.temperature: 1.0 -> 0.5" in msg and "--out" in msg
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert main([*argv, "temperature=0.5", "--overwrite"]) == 0
    made = json.loads((out / "rebase_w2.config.json").read_text())
    assert made["compared"]["search.temperature"] == 0.5


def test_demo_with_fewer_problems_is_refused_and_more_resume(tmp_path, capsys):
    out = tmp_path / "demo"
    demo = ["demo", "--quiet", "--width", "2", "--methods", "best_of_n", "--seeds", "0", "--out", str(out)]
    assert main([*demo, "--problems", "2"]) == 0
    table = (out / "table.md").read_text()
    msg = refused(capsys, main([*demo, "--problems", "1"]))
    assert "best_of_n_w2.jsonl" in msg and "--out" in msg and "--overwrite" in msg
    assert (out / "table.md").read_text() == table  # not redrawn from the 2-problem results
    assert main([*demo, "--problems", "1", "--overwrite"]) == 0
    assert len(ids(out / "best_of_n_w2.jsonl")) == 1


HOLD = """
import sys, time
from pathlib import Path
from ets.app.lock import lock_results
lock_results(Path(sys.argv[1]))
print("locked", flush=True)
time.sleep(120)
"""


def test_a_second_process_on_the_output_is_refused(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "locked"
        msg = refused(capsys, run_cli(out, "data.limit=1"))
        assert f"being written by process {holder.pid}" in msg
        assert out.read_bytes() == b""   # nothing written beside the holder
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The kernel dropped the dead process's lock: the empty file it left blocks nothing.
    assert run_cli(out, "data.limit=1") == 0
    assert len(ids(out)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.config.json", "r.jsonl", "r.summary.json"]


def test_an_output_removed_by_its_holder_after_another_opened_it_is_opened_again(tmp_path, monkeypatch):
    """A writer that wrote nothing removes the results file when it lets go; a process that
    opened the file just before locks a file no longer at the path, and must open it again."""
    from ets.app.lock import lock_results, same_file
    from ets.app.writer import ResultsWriter

    path = tmp_path / "r.jsonl"
    ResultsWriter(path).close()
    assert not path.exists()           # an output left empty leaves nothing behind

    real_open, opened = os.open, []

    def open_then_removed(name, *args, **kwargs):
        fd = real_open(name, *args, **kwargs)
        if not opened:
            os.unlink(name)            # the holder lets go between this open and the lock
        opened.append(fd)
        return fd

    monkeypatch.setattr(os, "open", open_then_removed)
    fd = lock_results(path)
    monkeypatch.undo()
    assert len(opened) == 2 and same_file(path, fd)
    os.close(fd)


def test_model_fingerprints(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"a": 1}')
    (folder / ".cache").mkdir()
    (folder / ".cache" / "junk").write_text("x")
    big = folder / "model.safetensors"
    with big.open("wb") as fh:  # sparse: larger than the full-hash limit, cheap to make
        fh.truncate(FULL_HASH_BYTES + 10 * BLOCK)
    first = fingerprint(folder)
    assert first.startswith("sha256:") and fingerprint(folder) == first
    (folder / ".cache" / "junk").write_text("y")
    assert fingerprint(folder) == first                    # hidden files are not the model
    (folder / "config.json").write_text('{"a": 2}')
    assert fingerprint(folder) != first                    # small files: their contents
    second = fingerprint(folder)
    stat = big.stat()
    with big.open("r+b") as fh:  # one byte in a sampled block (the 9th of 16)
        fh.seek(8 * (stat.st_size - BLOCK) // (BLOCKS - 1) + 100)
        fh.write(b"\1")
    os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    _file_digest.cache_clear()  # cached per (path, size, mtime) within one process
    assert fingerprint(folder) != second                   # large files: sampled blocks ...
    third = fingerprint(folder)
    os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert fingerprint(folder) != third                    # ... and the modification time


def test_an_output_of_the_earlier_sampler_is_not_resumed(tmp_path, capsys):
    """Outputs written before the engine's sampler changed (no `policy.sampler` in their
    config record) hold samples of the old rule: resuming them would mix two rules in one
    table, so it is refused, naming the key; a vLLM output (its own sampler) is not."""
    from ets.app.provenance import differences
    from ets.engine.sampling import STREAMS, STREAMS_BEFORE

    out = tmp_path / "r.jsonl"
    assert run_cli(out, "data.limit=2") == 0
    record = tmp_path / "r.config.json"
    made = json.loads(record.read_text())
    assert made["compared"]["policy.sampler"] == STREAMS
    del made["compared"]["policy.sampler"]          # as an older ets wrote it
    record.write_text(json.dumps(made))
    msg = refused(capsys, run_cli(out, "data.limit=2"))
    assert f"policy.sampler: {STREAMS_BEFORE!r} -> {STREAMS!r}" in msg and "--overwrite" in msg
    old_vllm = {"policy.backend": "vllm", "search.width": 4}
    assert differences(old_vllm, {"policy.backend": "vllm", "search.width": 4, "policy.sampler": "vllm's own"}) == []


def test_an_output_read_before_the_answer_rules_existed_resumes_only_with_them(tmp_path, capsys):
    """Outputs written before `search.answer_extraction` read answers without the last
    number: resumed with the rules they were read with, refused with the new default."""
    out = tmp_path / "r.jsonl"
    assert run_cli(out, "data.limit=1", "answer_extraction=[boxed,marker,hashes]") == 0
    record = tmp_path / "r.config.json"
    made = json.loads(record.read_text())
    del made["compared"]["search.answer_extraction"]          # as an older ets wrote it
    record.write_text(json.dumps(made))
    assert run_cli(out, "data.limit=2", "answer_extraction=[boxed,marker,hashes]") == 0
    assert len(ids(out)) == 2
    msg = refused(capsys, run_cli(out, "data.limit=2"))
    assert ("search.answer_extraction: ['boxed', 'marker', 'hashes'] -> ['boxed', 'marker', 'hashes', 'last_number']"
            in msg)


SLOW_REWARD = '''
import time
from pathlib import Path

def slow(questions, trajectories):
    Path(__file__).with_name("scoring").touch()
    time.sleep(120)
'''


def test_sigterm_stops_a_run_as_ctrl_c_does(tmp_path):
    """SIGTERM (a scheduler's, `timeout`'s) unwinds the run: its output, opened but holding
    nothing yet, is removed, and the exit code says it was terminated."""
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    out, scoring = tmp_path / "r.jsonl", tmp_path / "scoring"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    run = subprocess.Popen([sys.executable, "-m", "ets", "run", "--quiet", "--config", str(TINY), f"output={out}",
                            "data.limit=1", "reward.name=slow_reward:slow"], cwd=tmp_path, env=env,
                           stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # the search's first reward call, its output open
            if scoring.exists() or run.poll() is not None:
                break
            time.sleep(0.1)
        assert scoring.exists() and out.exists(), run.stderr.read() if run.poll() is not None else "no reward call"
        run.send_signal(signal.SIGTERM)
        assert run.wait(60) == 143
    finally:
        run.kill()
    assert "ets: interrupted; finished problems are saved" in run.stderr.read()
    assert not out.exists()


SLOW_TO_STOP_REWARD = '''
import os
import time
from pathlib import Path

def slow_to_stop(questions, trajectories):
    Path(__file__).with_name(f"scoring.{os.getpid()}").touch()
    try:
        time.sleep(120)
    finally:
        time.sleep(2)  # unwinding takes a while: a second SIGTERM comes meanwhile
'''


def test_sigterm_to_a_sweeps_process_group_stops_every_run_as_ctrl_c_does(tmp_path):
    """A scheduler's SIGTERM reaches a `--jobs 2` sweep's driver and its workers at once; the
    driver's own SIGTERM to them then comes second, while they are still closing their
    outputs: each still unwinds (its empty output removed), and no semaphore is left over."""
    (tmp_path / "slow_to_stop_reward.py").write_text(SLOW_TO_STOP_REWARD)
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    run = subprocess.Popen([sys.executable, "-m", "ets", "sweep", "--config", str(TINY), "--methods", "rebase,beam",
                            "--widths", "2", "--jobs", "2", "--out", str(out), "data.limit=1",
                            "reward.name=slow_to_stop_reward:slow_to_stop"],
                           cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for _ in range(1800):  # both runs in their first reward call, their outputs open
            if len(list(tmp_path.glob("scoring.*"))) == 2 or run.poll() is not None:
                break
            time.sleep(0.1)
        assert len(list(tmp_path.glob("scoring.*"))) == 2, run.stderr.read() if run.poll() is not None else "no calls"
        assert len(list(out.glob("*.jsonl"))) == 2
        os.killpg(run.pid, signal.SIGTERM)
        assert run.wait(60) == 143
    finally:
        run.kill()
    stderr = run.stderr.read()
    assert "ets: interrupted; finished problems are saved" in stderr and "leaked" not in stderr
    assert not list(out.glob("*.jsonl"))


KILLED_REWARD = '''
import os
import signal
from pathlib import Path

def killed(questions, trajectories):
    try:  # the first run to score is killed, as the kernel's out-of-memory killer would
        os.close(os.open(Path(__file__).with_name("killed"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return [[[0.5] * len(steps) for steps in trajs] for trajs in trajectories]
    os.kill(os.getpid(), signal.SIGKILL)
'''


def test_a_sweep_run_whose_process_is_killed_is_one_line_and_resumes(tmp_path):
    """A `--jobs 2` sweep whose worker dies by SIGKILL (no exception, no result): one line,
    exit code 1, not the pool's traceback; the same command then finishes the sweep."""
    (tmp_path / "killed_reward.py").write_text(KILLED_REWARD)
    argv = [sys.executable, "-m", "ets", "sweep", "--quiet", "--config", str(TINY), "--methods", "rebase,beam",
            "--widths", "2", "--jobs", "2", "--out", str(tmp_path / "sweep"), "data.limit=2",
            "reward.name=killed_reward:killed", "reward.model=null"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    first = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 1, first.stderr
    assert first.stderr.strip().splitlines()[-1] == (
        "ets: error: a run's process ended abruptly (killed by a signal: the kernel's out-of-memory killer, say); "
        "the finished runs and problems are kept: the same command resumes")
    # (not the pool's traceback, nor an idle worker's, stopped in its wait for work)
    assert "BrokenProcessPool" not in first.stderr and "_process_worker" not in first.stderr
    again = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert all(len((tmp_path / "sweep" / f"{m}_w2.jsonl").read_text().splitlines()) == 2 for m in ("rebase", "beam"))


STUBBORN_REWARD = '''
import time
from pathlib import Path

def stubborn(questions, trajectories):
    Path(__file__).with_name("scoring").touch()
    while True:
        try:
            time.sleep(120)
        except BaseException:  # what a library catching everything does to the stop
            pass
'''


@pytest.mark.parametrize("grace, signals", [(1.0, 1), (600.0, 2)])
def test_a_swallowed_sigterm_still_ends_the_process(tmp_path, grace, signals):
    """Code that catches every exception swallows SIGTERM's stop: the process still ends,
    after the grace period, or at once on a second SIGTERM."""
    (tmp_path / "stubborn_reward.py").write_text(STUBBORN_REWARD)
    scoring = tmp_path / "scoring"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    code = (f"import sys, ets.app.stopping as s; s.STOP_GRACE_SECONDS = {grace}; from ets.app.cli import main; "
            f"sys.exit(main(['run', '--quiet', '--config', {str(TINY)!r}, 'output={tmp_path / 'r.jsonl'}', "
            "'data.limit=1', 'reward.name=stubborn_reward:stubborn']))")
    run = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):
            if scoring.exists() or run.poll() is not None:
                break
            time.sleep(0.1)
        assert scoring.exists(), run.stderr.read() if run.poll() is not None else "no reward call"
        for _ in range(signals):
            run.send_signal(signal.SIGTERM)
            time.sleep(0.5)
        assert run.wait(30) == 143
    finally:
        run.kill()
