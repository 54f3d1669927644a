"""Redraw a sweep's plots from its table.csv alone: `methods.png` where it holds one width,
the plots against width where several; each as PNG and PDF.

Several tables (sweeps of the same task and models at other widths, or of other methods)
make one set of plots; a (method, width) pair in two tables is taken from the first. The
config names the task and the models in the title (default: the demo's, ets/demo/demo.yaml,
with `--set key=value` for what the sweep overrode, e.g. `--set reward.name=verifier`).

    python scripts/plot_table.py docs/results/w16_200_seeds_0_1_2
    python scripts/plot_table.py docs/results/w16_200_seeds_0_1_2 docs/results/steer_prm_200 \\
        docs/results/ets_steer_prm_200 docs/results/beam_dvts_w64_200_seeds_0_1_2 --out /tmp/w16_w64
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project's own code, run from anywhere


def fail(message: str) -> None:
    """Bad input: one line naming the problem and the fix, exit code 2, nothing written."""
    print(f"plot_table: {message}", file=sys.stderr)
    raise SystemExit(2)


def table_path(given: str) -> Path:
    path = Path(given) / "table.csv" if Path(given).is_dir() else Path(given)
    if not path.is_file():
        fail(f"{given}: no sweep table at {path} (a folder `ets sweep` or `ets demo` wrote, or its table.csv)")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="+", help="sweep folders or their table.csv files")
    ap.add_argument("--out", help="folder for the plots (default: the first table's)")
    ap.add_argument("--config", default=str(ROOT / "ets" / "demo" / "demo.yaml"),
                    help="the config the sweeps ran: names the task and the models in the title (default: the demo's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a key=value override of the config, as the sweep ran with it (e.g. reward.name=verifier); "
                         "repeatable")
    ap.add_argument("--prefix", default="ets sweep", help="the title's first words (default: ets sweep)")
    args = ap.parse_args(argv)
    paths = [table_path(t) for t in args.tables]

    from ets.app.report import plot_methods, plot_sweep, plot_title, read_table
    from ets.config import ConfigError, load_config

    try:
        config = load_config(args.config, args.set)
    except (ConfigError, FileNotFoundError) as exc:
        fail(f"--config {args.config}: {exc}")
    rows, seen = [], set()
    for path in paths:
        for row in read_table(path):
            if (row["method"], row["width"]) not in seen:
                seen.add((row["method"], row["width"]))
                rows.append(row)
    if not rows:
        fail(f"{' '.join(map(str, paths))}: no rows to plot")
    out = Path(args.out) if args.out else paths[0].parent
    out.mkdir(parents=True, exist_ok=True)
    title = plot_title(config, rows, args.prefix)
    if len({r["width"] for r in rows}) == 1:
        written = plot_methods(rows, out / "methods.png", title)
    else:
        written = plot_sweep(rows, out, title)
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
