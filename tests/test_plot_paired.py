"""scripts/plot_paired.py: each run paired with its base as `ets compare` pairs them, and
one-line errors for bad input."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "plot_paired.py"


def _results(path: Path, right: list[bool], kv: float) -> Path:
    with open(path, "w") as f:
        for i, ok in enumerate(right):
            f.write(json.dumps({"id": f"p{i}", "correct": ok, "kv_size": kv}) + "\n")
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_points_are_the_paired_difference_and_the_kv_ratio(tmp_path):
    base = _results(tmp_path / "rebase.jsonl", [True] * 6 + [False] * 4, 100_000)
    # two seeds of a sweep's run: problem 0 right in one of them (a share of 0.5), 5 lost in both
    for seed, first in ((0, True), (1, False)):
        _results(tmp_path / f"ets_w64_s{seed}.jsonl", [first] + [True] * 4 + [False] * 5, 50_000)
    out = tmp_path / "plot.png"
    done = _run("--out", str(out), "--target", "1,1.8", "--pair", f"ETS W=64={tmp_path / 'ets_w64'}@{base}")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:4] == b"\x89PNG" and out.with_suffix(".pdf").read_bytes()[:4] == b"%PDF"
    # accuracy 45% against 60%: -15 points; 100k / 50k KV
    assert "ETS W=64 -15.0 points (" in done.stdout and "at 2.00x less KV" in done.stdout, done.stdout


def test_bad_pairs_fail_in_one_line(tmp_path):
    base = _results(tmp_path / "rebase.jsonl", [True, False], 100_000)
    other = _results(tmp_path / "other.jsonl", [True, True], 50_000)
    elsewhere = tmp_path / "elsewhere.jsonl"
    with open(elsewhere, "w") as f:
        f.write(json.dumps({"id": "q0", "correct": True, "kv_size": 1}) + "\n")
    out = tmp_path / "plot.png"
    for args, says in ((["--pair", f"x={other}"], "LABEL=RUN@BASE"),
                       (["--pair", f"x={tmp_path / 'none.jsonl'}@{base}"], "does not exist"),
                       (["--pair", f"x={elsewhere}@{base}"], "share no problem"),
                       (["--pair", f"x={other}@{base}", "--target", "1"], "POINTS,TIMES"),
                       (["--pair", f"x={other}@{base}", "--target", "1,0"], "above 0")):
        done = _run("--out", str(out), *args)
        assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()
