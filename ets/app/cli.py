"""The `ets` command.

    ets demo [--width 16 --problems 50 --out DIR]  every method on the embedded default
    ets run --config FILE [key=value ...]           search a dataset, one JSON line per problem
    ets eval FILE --agg last --vote weighted        accuracy of a results file
    ets sweep --config FILE --methods a,b --widths 16,64 [key=value ...]
                                                    methods x widths -> table + plots

Every error a user can cause (bad config, data, model path, reward) ends as one line
`ets: error: ...` and exit code 2; nothing already written is lost or corrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# Before torch loads: idle OpenMP threads sleep instead of spinning. On a small CPU shared
# with other work, spinning threads made every op wait on a descheduled one (measured
# 20x slower end to end); with this, 2 threads are as fast as 1 under load, faster idle.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ets.config import AGGREGATIONS, VOTES, ConfigError


def _run(args: argparse.Namespace) -> int:
    from ets.config import load_config
    from ets.app.run import run

    overrides = list(args.overrides)
    if args.output:
        overrides.append(f"output={args.output}")
    config = load_config(args.config, overrides)
    summary = run(config, show_progress=not args.quiet)
    print(f"wrote {config.output} ({summary['problems']} problems, {summary['new_problems']} new)")
    print(
        f"accuracy {summary['accuracy']:.3f} | kv_size/problem {summary['kv_size_per_problem']:.0f} | "
        f"{summary['tokens_per_s']:.1f} tokens/s | {summary['wall_time']:.1f}s"
    )
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ets.app.evaluate import evaluate, load_results

    result = evaluate(load_results(args.file), args.agg, args.vote)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"accuracy {result['accuracy']:.4f} ({result['correct']}/{result['problems']}) agg={args.agg} vote={args.vote}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    import time

    from ets.app.demo import run_demo
    from ets.app.report import markdown_table
    from ets.app.sweep import parse_methods

    methods = parse_methods(args.methods)
    if args.width < 1 or args.problems < 1:
        raise ConfigError("--width and --problems must be >= 1")
    start = time.perf_counter()
    rows = run_demo(args.width, args.problems, args.out, methods, args.backend, show_progress=not args.quiet)
    print()
    print(markdown_table(rows))
    print(f"\nresults, table.md/.csv and methods.png in {args.out}/ ({time.perf_counter() - start:.0f}s)")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ets.config import load_config
    from ets.app.report import markdown_table
    from ets.app.sweep import parse_methods, parse_widths, relative_to_rebase, run_sweep

    config = load_config(args.config, list(args.overrides))
    # Everything is validated before any work starts.
    methods = parse_methods(args.methods or config.search.method)
    widths = parse_widths(args.widths or str(config.search.width))
    out = Path(args.out or Path(config.output).parent / "sweep")
    rows = run_sweep(config, methods, widths, out, show_progress=not args.quiet)
    print()
    print(markdown_table(rows))
    for line in relative_to_rebase(rows):
        print(line)
    print(f"\ntable.md, table.csv and plots in {out}/")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ets", description="Tree-search test-time compute (best-of-N, beam, DVTS, REBASE, ETS).")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="every method on the bundled demo models and task; prints one table")
    p.add_argument("--width", type=int, default=16, help="search width W (default 16)")
    p.add_argument("--problems", type=int, default=50, help="demo test problems to search (default 50)")
    p.add_argument("--out", default="ets-demo", help="output folder (default ./ets-demo); rerun to resume")
    p.add_argument("--methods", default="best_of_n,beam,dvts,rebase,ets", help="comma-separated methods")
    p.add_argument("--backend", default="engine", choices=("engine", "hf"), help="policy backend (default engine)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_demo)

    p = sub.add_parser("run", help="search every problem of a dataset; resumable JSONL output")
    p.add_argument("--config", required=True, help="YAML config (see configs/)")
    p.add_argument("--output", help="results JSONL (overrides the config's `output`)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. width=32 method=ets policy.backend=hf")
    p.set_defaults(func=_run)

    p = sub.add_parser("sweep", help="methods x widths on one dataset: CSV, Markdown table, PNG plots; resumable")
    p.add_argument("--config", required=True, help="YAML config (dataset, models, search settings)")
    p.add_argument("--methods", help="comma-separated, e.g. best_of_n,beam,dvts,rebase,ets (default: the config's)")
    p.add_argument("--widths", help="comma-separated, e.g. 16,64,256 (default: the config's)")
    p.add_argument("--out", help="output folder (default: <config output folder>/sweep)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("overrides", nargs="*", help="key=value overrides")
    p.set_defaults(func=_sweep)

    p = sub.add_parser("eval", help="accuracy of a results file (ours or the ETS code's answers.json)")
    p.add_argument("file")
    p.add_argument("--agg", default="last", choices=AGGREGATIONS, help="step-score aggregation")
    p.add_argument("--vote", default="weighted", choices=VOTES, help="how the answer is chosen")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_eval)
    return parser


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input, reported as one line rather than a traceback."""
    from ets.config import ConfigError
    from ets.data import DataError
    from ets.app.evaluate import EvalError
    from ets.models.load import ModelLoadError
    from rewards.base import RewardError

    return (ConfigError, DataError, EvalError, ModelLoadError, RewardError, KeyError, FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except user_errors() as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"ets: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ets: interrupted; finished problems are saved, rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
