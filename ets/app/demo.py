"""`ets demo`: every method on the embedded default, in a few minutes on a laptop CPU.

The bundled policy and step-tag PRM (trained by scripts/train_demo_models.py) search the
first problems of the demo test set with best-of-N, beam search, DVTS, REBASE and ETS at
one width, on the engine. It prints one table (accuracy, the paper's KV-size metric, the
engine's measured peak KV, wall time, throughput) and writes, into its output folder, each
method's results (JSONL, resumable), the table (Markdown and CSV) and a PNG plot.

Rerun with the same options to resume. Other options into the same folder (another
`--problems`, `--width` or `--backend`) are refused before any model loads, naming what
differs: a folder holds the results of one configuration. Pass another `--out`, or
`--overwrite` to start the folder afresh. More problems than before resume (only the new
ones are searched); fewer are refused, since the folder's results would not be theirs.

`--seeds 0,1,2` runs each method once per seed (`<method>_w<width>_s<seed>.jsonl`, each
resumable; the demo config's seed alone keeps `<method>_w<width>.jsonl`): the table then
shows the mean ± sd over the seeds, and the line above it says how many problems, the
width and the seeds.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Sequence

from ets.config import RunConfig, load_config
from ets.demo import BAD_TOKEN, GOOD_TOKEN, STEP_TAG

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "demo" / "demo.yaml"


def demo_config(width: int = 8, problems: int = 10, out: str | Path = "ets-demo", backend: str = "engine") -> RunConfig:
    """The embedded default (ets/demo/demo.yaml) at this width and number of problems."""
    config = load_config(DEMO_CONFIG, [
        f"width={width}", f"data.limit={problems}", f"policy.backend={backend}", f"concurrency={problems}",
    ])
    return dataclasses.replace(config, output=str(Path(out) / "results.jsonl"))


def run_demo(
    width: int = 8,
    problems: int = 10,
    out: str | Path = "ets-demo",
    methods: Sequence[str] | None = None,
    backend: str = "engine",
    show_progress: bool = True,
    overwrite: bool = False,
    workers: int = 1,
    ray_address: str | None = None,
    seeds: Sequence[int] | None = None,
    jobs: int = 1,
) -> list[dict[str, Any]]:
    """Run each method (a one-width sweep) once per seed (default: the demo config's);
    returns one table row per method (means over the seeds, ets/app/sweep.py
    `aggregate_seeds`) and writes results, table and plot into `out`. With `overwrite`,
    the old results in `out` go first. `workers` / `ray_address`: each method's problems
    sharded over Ray workers (ets/app/distributed.py). `jobs`: runs at a time, one
    process each (ets/app/sweep.py `run_in_jobs`)."""
    from ets.app.output import check_outputs
    from ets.app.sweep import run_sweep, sweep_configs
    from ets.data import load_problems

    import search

    config = demo_config(width, problems, out, backend)
    methods = list(methods) if methods is not None else search.available()
    check_outputs(sweep_configs(config, methods, [width], Path(out), seeds), load_problems(config.data),
                  overwrite=overwrite, way_out=f"pass another --out folder, or --overwrite to start {str(out)!r} afresh")
    return run_sweep(config, methods, [width], out, show_progress=show_progress, title=f"ets demo, W={width}",
                     workers=workers, ray_address=ray_address, seeds=seeds, jobs=jobs)


# Runs at a time by default (the CLI's --jobs help says 4): each holds its own models and
# two KV pools (~2.5 GB).
DEMO_MAX_JOBS = 4


def demo_jobs() -> int:
    """`ets demo`'s default runs at a time: one per core (each on one torch thread, the
    demo config's `torch_threads`), at most DEMO_MAX_JOBS."""
    return max(1, min(os.cpu_count() or 1, DEMO_MAX_JOBS))


def demo_title(rows: Sequence[dict[str, Any]], width: int, seeds: Sequence[int] | None = None, jobs: int = 1) -> str:
    """The line above the demo's table: problems, width, seeds, and how many runs shared
    the CPU, e.g. `ets demo: 50 problems, width 16, 3 seeds (0, 1, 2): mean ± sd over
    seeds; 2 runs at a time (wall times are of runs sharing the CPU; --jobs 1 for runs alone)`."""
    counts = sorted({r["problems"] for r in rows if r.get("problems") is not None})
    problems = "?" if not counts else str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    seeds = list(seeds) if seeds is not None else [demo_config().search.seed]
    spread = ": mean ± sd over seeds" if len(seeds) > 1 else ""
    shared = f"; {jobs} runs at a time (wall times are of runs sharing the CPU; --jobs 1 for runs alone)" \
        if jobs > 1 else ""
    return (f"ets demo: {problems} problems, width {width}, {len(seeds)} seed{'s' if len(seeds) != 1 else ''} "
            f"({', '.join(map(str, seeds))}){spread}{shared}")


def prm_scores(model, tok, questions: Sequence[str], trajectories: Sequence[Sequence[Sequence[str]]],
               ) -> list[list[list[float]]]:
    """scores[q][t][s] = P(step s of trajectory t of question q is good), computed by the
    same `step_tag` built-in the search uses (plain forward), so the quality bars measure
    exactly what a search sees."""
    # imported here: the rest of this module runs in `ets demo`'s driver, which needs no torch
    # (its runs go to worker processes), and importing it there held up their start by ~2.5 s
    from rewards.step_tag import StepTagOptions, StepTagPRM

    options = StepTagOptions(tag=STEP_TAG, good_token=GOOD_TOKEN, bad_token=BAD_TOKEN, backend="forward")
    return StepTagPRM.from_model(model, tok, options).score(questions, trajectories)
