"""scripts/plot_tradeoff.py: one point per sweep row, and one-line errors for bad input."""

import csv
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "plot_tradeoff.py"


def _table(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir()
    with open(folder / "table.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder


def _row(method: str, accuracy: float, kv: float) -> dict:
    return {"method": method, "width": 64, "problems": 24, "accuracy": accuracy, "accuracy_sd": 0.05,
            "kv_size_per_problem": kv, "kv_size_per_problem_sd": 1000, "seeds": 3, "seed_list": "0,1,2"}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_points_from_several_sweeps(tmp_path):
    both = _table(tmp_path / "both", [_row("rebase", 0.6, 98000), _row("ets", 0.44, 64000)])
    one = _table(tmp_path / "one", [_row("ets", 0.52, 80000)])
    out = tmp_path / "plot.png"
    done = _run("--out", str(out), "--point", f"REBASE, W=64={both}@rebase", "--point", f"ETS={both}@ets",
                "--point", f"ETS 0.5={one / 'table.csv'}")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:4] == b"\x89PNG" and out.with_suffix(".pdf").read_bytes()[:4] == b"%PDF"
    assert "REBASE, W=64 60.0% at 98,000; ETS 44.0% at 64,000; ETS 0.5 52.0% at 80,000" in done.stdout


def test_bad_points_fail_in_one_line(tmp_path):
    both = _table(tmp_path / "both", [_row("rebase", 0.6, 98000), _row("ets", 0.44, 64000)])
    out = tmp_path / "plot.png"
    for point, says in ((f"x={both}", "has 2 rows"), ("x", "LABEL=PATH"), (f"x={tmp_path / 'none'}", "no sweep table"),
                        (f"x={both}@beam", "0 rows")):
        done = _run("--out", str(out), "--point", point)
        assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def test_many_points_get_a_legend_beside_the_axes(tmp_path):
    """Beyond ten points the colours come from a 20-colour map (the default cycle repeats)."""
    folder = _table(tmp_path / "many", [_row(f"ets{i}", 0.4 + i / 100, 60000 + 3000 * i) for i in range(12)])
    out = tmp_path / "plot.png"
    done = _run("--out", str(out), *[arg for i in range(12) for arg in ("--point", f"ETS {i}={folder}@ets{i}")])
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:4] == b"\x89PNG" and "ETS 11 51.0% at 93,000" in done.stdout
