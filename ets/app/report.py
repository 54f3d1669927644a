"""Tables and plots of run summaries: one row per (method, width).

Rows are the dicts `ets.app.run.run` returns, plus `method` and `width`. Both KV-size
metrics are columns: the project's (prompt counted) and the ETS code's (prompt as 2 tokens,
its selection steps only), which is the one the paper's ratios are on. The Markdown
table is table.md (and what `ets demo --wide` prints; ets/app/terminal.py has the narrow
one); the CSV has every column; the plots (PNG and PDF) are for people who would rather
look than read. Rows that are means over seeds (ets/app/sweep.py `aggregate_seeds`:
`seeds` > 1, `<key>_sd` beside each mean) print as `mean ± sd`.

Error bars: the accuracy's 95% interval (ets/app/paired.py `accuracy_interval`: Wilson's over
the problems for one seed; over several, a bootstrap that draws the problems and each
problem's seeds) wherever the rows know each problem's outcome; otherwise (rows
read back from a table.csv of old) one sd over the seeds. Other figures: one sd over the
seeds. No bar reaches below 0, nor an accuracy above 100%.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any, Sequence

# (key, header, format) of the printed table, in order.
COLUMNS = (
    ("method", "method", "{}"),
    ("width", "W", "{}"),
    ("accuracy", "accuracy", "{:.1%}"),
    ("vote_rule", "vote (aggregation)", "{}"),
    ("kv_size_sum", "KV size, sum (paper metric)", "{:,}"),
    ("kv_size_per_problem", "KV size/problem", "{:,.0f}"),
    ("kv_size_ref_per_problem", "KV size/problem (ETS code's metric)", "{:,.0f}"),
    ("peak_kv_tokens", "peak live KV (engine)", "{:,}"),
    ("mean_kv_tokens", "mean live KV (engine)", "{:,.0f}"),
    ("generated_tokens", "tokens generated", "{:,}"),
    ("wall_time", "wall s", "{:.1f}"),
    ("problems_per_s", "problems/s", "{:.3f}"),
    ("tokens_per_s", "tokens/s", "{:,.0f}"),
    ("mean_active", "in flight (mean)", "{:.1f}"),
)


# The columns measured while a run searched, not read from its records: a resumed run's
# describe the problems it searched after resuming alone, and are marked so (`PART_MARK`).
MEASURED = ("peak_kv_tokens", "mean_kv_tokens", "wall_time", "problems_per_s", "tokens_per_s", "mean_active")
PART_MARK = "*"


def partly_measured(row: dict[str, Any]) -> bool:
    """Whether the row's MEASURED figures cover fewer problems than its records (a run
    resumed after an interruption or a larger data.limit; over seeds, in any seed)."""
    measured = row.get("measured_problems_min", row.get("measured_problems"))
    return isinstance(measured, (int, float)) and 0 < measured < row.get("problems", 0)


# The columns timed on the wall clock: a run that shared the machine with others (`ets sweep
# --jobs`, `ets demo`'s default) was timed on a shared machine, and is marked so.
TIMED = ("wall_time", "problems_per_s", "tokens_per_s")
SHARED_MARK = "†"


def shared_machine(row: dict[str, Any]) -> int:
    """The most runs that shared the machine while the row's run(s) searched (1: alone)."""
    shared = row.get("runs_at_a_time_max", row.get("runs_at_a_time"))
    return int(shared) if isinstance(shared, (int, float)) and shared > 1 else 1


def most_sharing(rows: Sequence[dict[str, Any]]) -> int:
    """The most runs that shared the machine with any of `rows`' runs (1: all ran alone)."""
    return max((shared_machine(r) for r in rows), default=1)


def shared_note(rows: Sequence[dict[str, Any]]) -> str | None:
    """The note under a table with cells timed on a shared machine, else None."""
    most = most_sharing(rows)
    if most == 1:
        return None
    return (f"{SHARED_MARK} timed with up to {most} runs at a time sharing the machine: a run's throughput depends on "
            "what ran beside it; compare it across methods from runs made one at a time (--jobs 1).")


def marks(row: dict[str, Any], key: str) -> str:
    """What a cell of `key` carries after its value: `*` partly measured, `†` timed shared."""
    return ((PART_MARK if key in MEASURED and partly_measured(row) else "")
            + (SHARED_MARK if key in TIMED and shared_machine(row) > 1 else ""))


def mark_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The notes under a table that say what its marks (`marks`) mean, those it has."""
    return [note for note in (part_note(rows), shared_note(rows)) if note]


def part_note(rows: Sequence[dict[str, Any]]) -> str | None:
    """The note under a table with marked cells, else None."""
    if not any(partly_measured(r) for r in rows):
        return None
    return (f"{PART_MARK} measured over the problems the run searched after it was resumed, not all of them: "
            "wall time, throughput, live KV and searches in flight (rerun with --overwrite to measure them all).")


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    """The value as the column formats it; over several seeds `mean ± sd` (the sd of a
    percentage in points, e.g. `66.0% ± 3.1`)."""
    value = row.get(key)
    if value is None:
        return "n/a"
    sd = row.get(f"{key}_sd") if row.get("seeds", 1) > 1 else None
    text = _format(value, fmt)
    if sd is not None:
        text = f"{text} ± {100 * sd:.1f}" if fmt.endswith("%}") else f"{text} ± {_format(sd, fmt)}"
    return text + marks(row, key)


def _format(value: Any, fmt: str) -> str:
    if fmt == "{:,}" and isinstance(value, float):
        fmt = "{:,.0f}"  # a mean of counts
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], caption: bool = True) -> str:
    """One line per row. Rows aggregated over seeds (ets/app/sweep.py `aggregate_seeds`)
    show `mean ± sd` and, with `caption`, a line under the table saying so."""
    header = "| " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(_cell(r, k, f) for k, _, f in COLUMNS) + " |" for r in rows]
    lines = [header, rule, *body]
    seeds = _seeds(rows)
    if caption and len(seeds) > 1:
        lines += ["", f"Each cell: mean ± sample standard deviation over {len(seeds)} seeds ({', '.join(seeds)}); "
                      "accuracy's ± in points. Min and max per column in table.csv, per-seed rows in table_runs.csv."]
    notes = mark_notes(rows)
    if caption and notes:
        lines += ["", *notes]
    return "\n".join(lines)


def _seeds(rows: Sequence[dict[str, Any]], default: int | None = None) -> list[str]:
    """The seeds the rows were run with, as text, e.g. ["0", "1", "2"]."""
    seeds: list[str] = []
    for r in rows:
        given = str(r["seed_list"]).split(",") if r.get("seed_list") else [str(r.get("seed", default))]
        seeds += [s for s in given if s not in seeds and s != "None"]
    return seeds


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Every column that is not a mapping or list; where a row knows each problem's outcome,
    its accuracy's 95% interval over the problems beside it (`accuracy_ci_low`, `_high`),
    so that the plots redrawn from the table alone (scripts/plot_table.py) show it."""
    rows = [_with_interval(r) for r in rows]
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys and not isinstance(r[k], (dict, list))]
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a table.csv that `write_csv` wrote, numbers as numbers (whole ones as
    int), an empty cell left out (a row of one seed in a table of several has no `seeds`):
    what the plots take."""
    def value(text: str) -> Any:
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
        return text

    with open(path, newline="") as fh:
        return [{k: value(v) for k, v in r.items() if v != ""} for r in csv.DictReader(fh)]


def _with_interval(row: dict[str, Any]) -> dict[str, Any]:
    bounds = accuracy_bounds(row)
    if bounds is None or "accuracy_ci_low" in row:
        return row
    at = list(row).index("accuracy") + 1 if "accuracy" in row else len(row)
    items = list(row.items())
    return dict(items[:at] + [("accuracy_ci_low", bounds[0]), ("accuracy_ci_high", bounds[1])] + items[at:])


def accuracy_bounds(row: dict[str, Any]) -> tuple[float, float] | None:
    """The accuracy's 95% interval over the problems (fractions): from the row's own
    columns (a table.csv read back), or each problem's outcome over its seeds; for a row
    of one seed, from its count of problems right (each problem is right or wrong, so the
    resampling depends on that count alone). None for a mean over seeds that keeps
    neither (a table.csv written before the interval was kept)."""
    from ets.app.paired import accuracy_interval

    if row.get("accuracy_ci_low") is not None and row.get("accuracy_ci_high") is not None:
        return float(row["accuracy_ci_low"]), float(row["accuracy_ci_high"])
    if row.get("correct_by_problem"):
        return accuracy_interval(row["correct_by_problem"])
    problems, accuracy = row.get("problems"), row.get("accuracy")
    if row.get("seeds", 1) == 1 and isinstance(problems, int) and problems > 0 and accuracy is not None:
        right = round(accuracy * problems)
        return accuracy_interval({str(i): i < right for i in range(problems)})
    return None


# Names the plots give methods, and a colour and a marker each keeps in every figure: the
# paper's comparison, REBASE against ETS, in blue and red (told apart without red-green
# vision too), and a marker each, so that a greyscale print tells every method apart.
METHOD_LABELS = {"best_of_n": "best-of-N", "beam": "beam", "dvts": "DVTS", "rebase": "REBASE", "ets": "ETS"}
_METHOD_COLOURS = {"best_of_n": "C2", "beam": "C1", "dvts": "C4", "rebase": "C0", "ets": "C3"}
_METHOD_MARKERS = {"best_of_n": "s", "beam": "^", "dvts": "v", "rebase": "o", "ets": "D"}
_OTHER_MARKERS = ("P", "X", "*", "h", "<", ">")
# A checkpoint folder's own name says little ("checkpoint-500"): its parent's goes with it.
_GENERIC_FOLDER = re.compile(r"(checkpoint|step|epoch|global_step|iter)[-_]?\d+|final|best|last|latest|model|hf",
                             re.IGNORECASE)


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def method_colours(methods: Sequence[str]) -> dict[str, str]:
    """The built-in methods their own colours; others the next free ones, in order."""
    free = iter(f"C{i}" for i in range(5, 100))
    return {m: _METHOD_COLOURS.get(m) or next(free) for m in methods}


def method_markers(methods: Sequence[str]) -> dict[str, str]:
    """The built-in methods their own markers; others the next free ones, in order (then again)."""
    free = iter(_OTHER_MARKERS * 20)
    return {m: _METHOD_MARKERS.get(m) or next(free) for m in methods}


def _demo_names() -> dict[Path, str]:
    from ets.demo import POLICY_PATH, PRM_PATH, TEST_PATH

    return {POLICY_PATH.resolve(): "demo policy", PRM_PATH.resolve(): "demo PRM", TEST_PATH.resolve(): "demo task"}


def model_label(name: str | None) -> str:
    """A model as a title names it: a hub id or a built-in (`tiny:llama`) as given; the
    bundled demo models as such; another folder by its name (with its parent's where the
    name is a checkpoint's, e.g. `run7/checkpoint-500`), never the whole path."""
    if not name:
        return "none"
    path = Path(name).expanduser()
    if not (path.is_absolute() or path.exists() or name.startswith((".", "~"))):
        return name
    path = path.resolve()
    if path in _demo_names():
        return _demo_names()[path]
    if _GENERIC_FOLDER.fullmatch(path.name) and path.parent.name:
        return f"{path.parent.name}/{path.name}"
    return path.name


def task_label(path: str | None = None, hf_name: str | None = None, hf_split: str | None = None) -> str:
    """The problems' source as a title names it: a hub dataset by name (and split), the
    demo's test set as `demo task`, a file by its name (with its folder's where the name is
    a split's, e.g. `math500/test`)."""
    if hf_name:
        return f"{hf_name} ({hf_split})" if hf_split else hf_name
    if not path:
        return "problems"
    file = Path(path).expanduser().resolve()
    if file in _demo_names():
        return _demo_names()[file]
    if file.stem.lower() in ("test", "train", "validation", "val", "dev", "data", "problems") and file.parent.name:
        return f"{file.parent.name}/{file.stem}"
    return file.stem


def plot_title(config, rows: Sequence[dict[str, Any]], prefix: str = "ets sweep") -> str:
    """Two lines: what was run (the task, problems, widths, seeds) and with which models,
    e.g. `ets demo, W=16: demo task, 50 problems, 3 seeds (0, 1, 2)` / `policy demo policy,
    PRM step_tag (demo PRM)`. Each figure adds what its own error bars are
    (`error_bars_text`)."""
    from ets.app.terminal import plural

    counts = sorted({r["problems"] for r in rows if r.get("problems") is not None})
    problems = "? problems" if not counts else plural(counts[0], "problem") if len(counts) == 1 \
        else f"{counts[0]}-{counts[-1]} problems"
    seeds = _seeds(rows, config.search.seed)
    widths = sorted({r["width"] for r in rows if r.get("width") is not None})
    width_text = "" if not widths or "W=" in prefix else f", W={'/'.join(map(str, widths))}"
    task = task_label(config.data.path, config.data.hf_name, config.data.hf_split if config.data.hf_name else None)
    head = f"{prefix}: {task}, {problems}{width_text}, {plural(len(seeds), 'seed')} ({', '.join(seeds)})"
    most = most_sharing(rows)
    if most > 1:  # what the throughput panels show, where the title says the run
        head += f"; throughput timed with up to {most} runs at a time sharing the machine"
    return f"{head}\n{models_line(config.policy.model, config.reward.name, config.reward.model)}"


def error_bars_text(rows: Sequence[dict[str, Any]], keys: Sequence[str] = ("accuracy",)) -> str:
    """What the error bars of a figure showing `keys` are (as `error_bars` draws them), for
    its title; "" when it shows none."""
    several = any(r.get("seeds", 1) > 1 for r in rows)
    sd = "± 1 sd over seeds" if several else ""
    if "accuracy" in keys and rows and None not in [accuracy_bounds(r) for r in rows]:
        # (over seeds a bootstrap, but Wilson's where every answer was right or every one wrong)
        interval = ("accuracy's 95% interval over the problems and seeds" if several
                    else "accuracy's 95% interval over the problems (Wilson)")
        others = sd and set(keys) - {"accuracy", "width"}
        return f"error bars: {interval}" + (f"; others {sd}" if others else "")
    return f"error bars: {sd}" if sd and set(keys) - {"width"} else ""


def figure_title(title: str, rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> str:
    """`title` (the run, `plot_title`) and what this figure's error bars are."""
    return "\n".join(line for line in (title, error_bars_text(rows, keys) if title else "") if line)


def models_line(policy_model: str | None, reward_name: str | None, reward_model: str | None) -> str:
    """`policy <model>, PRM <name> (<model>)`: the models a title names."""
    prm = f"{reward_name} ({model_label(reward_model)})" if reward_model else f"{reward_name} (the policy's model)"
    return f"policy {model_label(policy_model)}, PRM {prm}"


def error_bars(rows: Sequence[dict[str, Any]], key: str, scale: float = 1.0) -> list[list[float]] | None:
    """[below, above] each row's value (scaled), for matplotlib's `yerr`: the accuracy's
    95% interval over the problems where every row knows it (`accuracy_bounds`), else one
    sd over seeds where rows are means over several; never below 0, and an accuracy never
    above 100%. None when there is no spread to show."""
    values = [(r.get(key) or 0.0) * scale for r in rows]
    bounds = [accuracy_bounds(r) for r in rows] if key == "accuracy" else []
    if bounds and None not in bounds:  # each row's bootstrap, computed once
        below = [max(0.0, v - low * scale) for v, (low, _) in zip(values, bounds)]
        above = [max(0.0, high * scale - v) for v, (_, high) in zip(values, bounds)]
        return [below, above]
    if not any(r.get("seeds", 1) > 1 for r in rows):
        return None
    sd = [(r.get(f"{key}_sd") or 0.0) * scale if r.get("seeds", 1) > 1 else 0.0 for r in rows]
    top = scale if key == "accuracy" else float("inf")
    return [[min(s, v) for s, v in zip(sd, values)], [min(s, top - v) for s, v in zip(sd, values)]]


def count_formatter():
    """A tick formatter for counts: 20k, 1.5M, 0.4 (no "m" for milli, as EngFormatter would)."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v / 1e6:g}M" if abs(v) >= 1e6 else f"{v / 1e3:g}k" if abs(v) >= 1e3
                         else f"{v:g}")


# Where a point's label may go, in points from it: right, then above, left, below, farther out.
_LABEL_SPOTS = ((5, 4), (5, -11), (-5, 4), (-5, -11), (0, 9), (0, -16), (12, 12), (12, -19), (-12, 12), (-12, -19),
                (5, 19), (5, -26), (-5, 19), (-5, -26))


def label_points(ax, points: Sequence[tuple[float, float, str, str]], fontsize: float = 7) -> None:
    """Each (x, y, text, colour) labelled beside its point, at the first of `_LABEL_SPOTS`
    inside the axes that overlaps no label already placed and no other point's marker (two
    points close together get their labels on different sides, not one over the other);
    where none is clear, the spot inside the axes that overlaps least. Call it once
    everything else is drawn: it reads the axes' final scale."""
    ax.autoscale_view()
    renderer = ax.figure.canvas.get_renderer()
    pixels = ax.transData.transform([(x, y) for x, y, _, _ in points]) if points else []
    frame = ax.get_window_extent(renderer)
    taken: list[tuple[float, float, float, float]] = []

    def overlap(a, b) -> float:
        return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))

    for i, (x, y, text, colour) in enumerate(points):
        markers = [(px - 4, py - 4, px + 4, py + 4) for j, (px, py) in enumerate(pixels) if j != i]
        best = None
        for dx, dy in _LABEL_SPOTS:
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            label = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                                color=colour, ha=ha, va="bottom",
                                bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none",
                                      "alpha": 0.75})
            e = label.get_window_extent(renderer)
            box = (e.x0, e.y0, e.x1, e.y1)
            inside = frame.x0 <= e.x0 and e.x1 <= frame.x1 and frame.y0 <= e.y0 and e.y1 <= frame.y1
            cost = (0.0 if inside else 1e9) + sum(overlap(box, b) for b in taken + markers)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, label, box)
            else:
                label.remove()
            if cost == 0:
                break
        taken.append(best[2])


def save_figure(fig, path: str | Path, title: str = "", fontsize: float = 9) -> list[Path]:
    """The figure as PNG (for screens) and PDF (for papers): `path` with each suffix (a
    .png or .pdf it has is replaced, any other dot kept: `lambda_c_0.5` -> `lambda_c_0.5.png`).
    `title` (the run, and what the error bars are) goes over the PNG only: a paper says
    that in the figure's caption. The figure is laid out already."""
    path = Path(path)
    base = path.with_suffix("") if path.suffix.lower() in (".png", ".pdf") else path
    png, pdf = base.with_name(base.name + ".png"), base.with_name(base.name + ".pdf")
    fig.savefig(pdf, dpi=150)
    if title:
        fig.suptitle(title, fontsize=fontsize)
        fig.tight_layout()
    fig.savefig(png, dpi=150)
    return [png, pdf]


def finish_plot(fig, ax, labels: Sequence[tuple[float, float, str, str]], out: str | Path,
                title: str = "") -> list[Path]:
    """A one-axes figure of the plot scripts finished and written: a light grid, the legend
    where it hides least, the points' `labels` (`label_points`), saved as `out` (PNG and
    PDF, `save_figure`, `title` over the PNG, its folder made) and closed."""
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    label_points(ax, labels, fontsize=8)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    written = save_figure(fig, out, title)
    pyplot().close(fig)
    return written


def pyplot():
    """matplotlib's pyplot, drawing to files (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_methods(rows: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> list[Path]:
    """Bars per method: accuracy, both KV-size metrics, measured peak KV, throughput, with
    error bars (`error_bars`) and each bar's value above it; written as `path` (PNG) and
    its .pdf, returned."""
    plt = pyplot()
    from ets.app.terminal import compact

    panels = (
        ("accuracy", "accuracy (%)", 100.0),
        ("kv_size_per_problem", "KV size per problem, paper metric (tokens)", 1.0),
        ("kv_size_ref_per_problem", "KV size per problem, ETS code's metric (tokens)", 1.0),
        ("peak_kv_tokens", "peak live KV, engine measured (tokens)", 1.0),
        ("problems_per_s", "throughput (problems/s)", 1.0),
        ("tokens_per_s", "throughput (generated tokens/s)", 1.0),
    )
    one_width = len({r["width"] for r in rows}) == 1
    labels = [method_label(r["method"]) if one_width else f"{method_label(r['method'])}\nW={r['width']}" for r in rows]
    colours = method_colours([r["method"] for r in rows])
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    for ax, (key, name, scale) in zip(axes.flat, panels):
        values = [(r.get(key) or 0) * scale for r in rows]
        bars = error_bars(rows, key, scale)
        ax.bar(labels, values, yerr=bars, capsize=4, color=[colours[r["method"]] for r in rows],
               error_kw={"elinewidth": 1.2})
        # each value above its bar and error bar, clear of both
        tops = [v + (bars[1][i] if bars else 0) for i, v in enumerate(values)]
        for i, (v, top, r) in enumerate(zip(values, tops, rows)):
            text = "n/a" if r.get(key) is None else f"{v:.1f}" if key == "accuracy" else compact(v)
            ax.annotate(text, (i, top), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                        fontsize=8)
        ax.set_title(name, fontsize=10)
        highest = max(tops, default=0) or 1.0
        if key == "accuracy":
            ax.set_ylim(0, max(100, highest * 1.12))
            ax.set_yticks(range(0, 101, 20))
        else:
            ax.set_ylim(0, highest * 1.15)
            ax.yaxis.set_major_formatter(count_formatter())
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    fig.tight_layout()
    try:
        return save_figure(fig, Path(path), figure_title(title, rows, [key for key, _, _ in panels]), fontsize=10)
    finally:
        plt.close(fig)


def dodge_factor(index: int, count: int, span: float = 4.0) -> float:
    """Where the `index`-th of `count` methods sits against a width on a log2 axis, as a
    factor of the width, centred on it, so that two methods of equal accuracy show side by
    side, not one over the other: 0.08 doublings apart on an axis of `span` >= 4 doublings
    (5 methods span a third of one), less on a shorter axis (on one of a single doubling,
    a quarter as far), where the same offsets would move points well off their width."""
    step = 0.08 * min(1.0, max(span, 1.0) / 4)
    return 2 ** (step * (index - (count - 1) / 2))


def plot_sweep(rows: Sequence[dict[str, Any]], out: str | Path, title: str = "") -> list[Path]:
    """Accuracy, KV size (both metrics) and throughput vs width, and accuracy vs KV size,
    each as PNG and PDF; returns their paths. Against width the methods sit a little apart
    (dodged) so that no line hides another where two methods measure the same; against KV
    size each point says its width. Error bars: `error_bars`."""
    plt = pyplot()
    out = Path(out)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    colours, markers = method_colours(methods), method_markers(methods)
    widths = sorted({r["width"] for r in rows})
    span = math.log2(widths[-1] / widths[0]) if widths and widths[0] > 0 else 0.0
    width_label = "search width W (log scale)"
    figures = (
        ("accuracy_vs_width", "accuracy vs width", "width", ("accuracy",), "accuracy (%)", width_label),
        ("kv_size_vs_width", "KV size vs width (dashed: the ETS code's metric)", "width",
         ("kv_size_per_problem", "kv_size_ref_per_problem"), "KV size per problem (tokens)", width_label),
        ("throughput_vs_width", "throughput vs width", "width", ("problems_per_s",), "throughput (problems/s)",
         width_label),
        ("accuracy_vs_kv_size", "accuracy vs KV size (labels: width W)", "kv_size_per_problem", ("accuracy",),
         "accuracy (%)", "KV size per problem (tokens, paper metric)"),
    )
    scale = {"accuracy": 100.0}
    paths = []
    for name, what, xkey, ykeys, ylabel, xlabel in figures:
        fig, ax = plt.subplots(figsize=(8, 5))
        labels: list[tuple[float, float, str, str]] = []
        for i, m in enumerate(methods):
            # (accuracy alone: the other figures' methods seldom meet, and sit on their widths)
            dodge = dodge_factor(i, len(methods), span) if name == "accuracy_vs_width" else 1.0
            for ykey, style in zip(ykeys, ("-", "--")):
                ms = sorted((r for r in rows
                             if r["method"] == m and r.get(xkey) is not None and r.get(ykey) is not None),
                            key=lambda r: r[xkey])
                if not ms:
                    continue
                xs = [r[xkey] * dodge for r in ms]
                ys = [r[ykey] * scale.get(ykey, 1.0) for r in ms]
                xerr = error_bars(ms, xkey) if xkey != "width" else None
                label = method_label(m) if style == "-" else None  # the title says what dashes are
                ax.errorbar(xs, ys, yerr=error_bars(ms, ykey, scale.get(ykey, 1.0)), xerr=xerr, marker=markers[m],
                            markersize=5, linestyle=style, color=colours[m], capsize=3, label=label)
                if xkey != "width":
                    labels += [(x, y, f"W={r['width']}", colours[m]) for x, y, r in zip(xs, ys, ms)]
        if xkey == "width":
            ax.set_xscale("log", base=2)
            ax.set_xticks(widths, [str(w) for w in widths])
            ax.minorticks_off()
        else:
            ax.xaxis.set_major_formatter(count_formatter())
        if ykeys[0] != "accuracy":
            ax.yaxis.set_major_formatter(count_formatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(what, fontsize=10)
        ax.grid(alpha=0.3)
        # beside the axes, not over a point or its error bar
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        fig.tight_layout()
        label_points(ax, labels)
        paths += save_figure(fig, out / name, figure_title(title, rows, (xkey, *ykeys)))
        plt.close(fig)
    return paths
