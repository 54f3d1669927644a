"""The `ets` command: run, eval (and demo, sweep as they land).

    ets run --config FILE [key=value ...]     search a dataset, one JSON line per problem
    ets eval FILE --agg last --vote weighted  accuracy of a results file

Every error a user can cause (bad config, data, model path, reward) ends as one line
`ets: error: ...` and exit code 2; nothing already written is lost or corrupted.
"""

from __future__ import annotations

import argparse
import json
import sys

from ets.config import AGGREGATIONS, VOTES


def _run(args: argparse.Namespace) -> int:
    from ets.config import load_config
    from ets.runner import run

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
    from ets.evaluate import evaluate, load_results

    result = evaluate(load_results(args.file), args.agg, args.vote)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"accuracy {result['accuracy']:.4f} ({result['correct']}/{result['problems']}) agg={args.agg} vote={args.vote}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ets", description="Tree-search test-time compute (best-of-N, beam, DVTS, REBASE, ETS).")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="search every problem of a dataset; resumable JSONL output")
    p.add_argument("--config", required=True, help="YAML config (see configs/)")
    p.add_argument("--output", help="results JSONL (overrides the config's `output`)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. width=32 method=ets policy.backend=hf")
    p.set_defaults(func=_run)

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
    from ets.evaluate import EvalError
    from ets.models import ModelLoadError
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
