"""ets/app/report.py's plots: PNG and PDF, error bars that stay within what can be, methods
side by side, labels clear of each other; scripts/plot_table.py redraws them from a table."""

import subprocess
import sys
from pathlib import Path

from ets.app.report import accuracy_bounds, dodge_factor, error_bars, read_table, write_csv

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "plot_table.py"


def seeded(method, width, accuracy, accuracy_sd, kv=1000.0, **extra):
    return dict(method=method, width=width, problems=12, accuracy=accuracy, accuracy_sd=accuracy_sd,
                kv_size_per_problem=kv, kv_size_per_problem_sd=50.0, problems_per_s=0.5, problems_per_s_sd=0.1,
                seeds=3, seed_list="0,1,2", **extra)


def test_error_bars_stay_within_0_and_100_percent():
    rows = [seeded("ets", 64, 0.083, 0.144), seeded("rebase", 64, 0.95, 0.1)]   # 8.3 ± 14.4, 95.0 ± 10.0
    below, above = error_bars(rows, "accuracy", 100.0)
    assert below[0] == 8.3 and round(above[0], 6) == 14.4        # not below 0%
    assert below[1] == 10.0 and round(above[1], 6) == 5.0        # not above 100%
    assert error_bars(rows, "problems_per_s") == [[0.1, 0.1], [0.1, 0.1]]   # throughput: its sd over seeds


def test_the_table_keeps_the_accuracys_interval_for_plots_redrawn_from_it(tmp_path):
    rights = {f"p{i}": i % 3 == 0 for i in range(12)}
    row = dict(method="ets", width=4, seed=0, accuracy=4 / 12, kv_size_per_problem=10.0, correct_by_problem=rights)
    write_csv([row], tmp_path / "table.csv")
    back = read_table(tmp_path / "table.csv")[0]
    assert list(back)[:5] == ["method", "width", "seed", "accuracy", "accuracy_ci_low"]
    assert back["width"] == 4 and isinstance(back["width"], int) and "correct_by_problem" not in back
    assert accuracy_bounds(back) == accuracy_bounds(row) and back["accuracy_ci_low"] < 1 / 3 < back["accuracy_ci_high"]


def test_methods_sit_side_by_side_against_width():
    factors = [dodge_factor(i, 5) for i in range(5)]
    assert factors == sorted(set(factors)) and abs(factors[2] - 1) < 1e-12      # distinct, centred on the width
    assert 2 ** 0.3 < factors[-1] / factors[0] < 2 ** 0.34                      # a third of a doubling in all
    # on an axis of one doubling (widths 4 and 8), a quarter as far: near their widths still
    narrow = [dodge_factor(i, 5, span=1.0) for i in range(5)]
    assert abs(narrow[-1] / narrow[0] - (factors[-1] / factors[0]) ** 0.25) < 1e-12


def test_point_labels_keep_clear_of_each_other():
    from ets.app.report import label_points, pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    points = [(20_000, 53.2, "W=16", "C3"), (20_500, 53.3, "W=16", "C2"), (60_000, 40.0, "W=64", "C3")]
    ax.plot([p[0] for p in points], [p[1] for p in points], "o")
    label_points(ax, points)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == 3 and not boxes[0].overlaps(boxes[1])
    frame = ax.get_window_extent(renderer)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 for b in boxes)
    plt.close(fig)


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_plot_table_redraws_a_sweeps_plots_from_its_tables(tmp_path):
    one, other = tmp_path / "w16", tmp_path / "w64"
    for folder, width in ((one, 16), (other, 64)):
        folder.mkdir()
        write_csv([seeded(m, width, acc, 0.03, kv=kv * width) for m, acc, kv in
                   (("rebase", 0.53, 1600), ("ets", 0.53, 1200), ("best_of_n", 0.46, 2600))], folder / "table.csv")
    done = run_script(str(one))
    assert done.returncode == 0, done.stderr
    assert (one / "methods.png").stat().st_size > 10_000 and (one / "methods.pdf").read_bytes()[:4] == b"%PDF"
    both = tmp_path / "both"
    done = run_script(str(one), str(other / "table.csv"), "--out", str(both))
    assert done.returncode == 0, done.stderr
    names = {"accuracy_vs_width", "kv_size_vs_width", "throughput_vs_width", "accuracy_vs_kv_size"}
    assert {p.name for p in both.iterdir()} == {f"{n}.{ext}" for n in names for ext in ("png", "pdf")}
    bad = run_script(str(tmp_path / "none"))
    assert bad.returncode == 2 and "no sweep table" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_a_one_seed_rows_interval_comes_from_its_count_right():
    """One seed: each problem right or wrong, so a table's accuracy and problem count give
    the interval the problems' outcomes give (the same resampling, up to its noise)."""
    from ets.app.paired import accuracy_interval

    outcomes = {f"q{i}": i % 4 != 1 for i in range(24)}                      # 18 of 24 right, shuffled
    from_count = accuracy_bounds(dict(method="rebase", width=64, problems=24, accuracy=0.75))
    from_outcomes = accuracy_interval(outcomes)
    assert all(abs(a - b) <= 1 / 24 + 1e-9 for a, b in zip(from_count, from_outcomes))
    assert from_count[0] < 0.75 < from_count[1]
    # a mean over seeds without outcomes or a kept interval has none
    assert accuracy_bounds(dict(problems=24, accuracy=0.75, seeds=3, accuracy_sd=0.05)) is None
