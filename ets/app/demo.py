"""`ets demo`: every method on the embedded default, in a few minutes on a laptop CPU.

The bundled policy and step-tag PRM (trained by scripts/train_demo_models.py) search the
first problems of the demo test set with best-of-N, beam search, DVTS, REBASE and ETS at
one width, on the engine. It prints the key figures (accuracy, the paper's KV-size metric,
throughput, the engine's measured peak KV) within 100 columns, every column with `--wide`,
and writes, into its output folder, each method's results (JSONL, resumable), the full
table (Markdown and CSV) and a plot (PNG and PDF).

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
import logging
import os
from pathlib import Path
from typing import Any, Sequence

from ets.config import PolicyConfig, RunConfig, load_config
from ets.demo import BAD_TOKEN, GOOD_TOKEN, STEP_TAG

log = logging.getLogger(__name__)

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "demo" / "demo.yaml"


def demo_config(width: int = 8, problems: int = 10, out: str | Path = "ets-demo", backend: str = "engine") -> RunConfig:
    """The embedded default (ets/demo/demo.yaml) at this width and number of problems."""
    config = load_config(DEMO_CONFIG, [
        f"width={width}", f"data.limit={problems}", f"policy.backend={backend}", f"concurrency={problems}",
    ])
    # demo.yaml's engine settings, which the user did not set, are not said to do nothing on
    # another backend: the engine's batch size, and on hf (which keeps no KV pool) its pool
    if backend != "engine":
        unset = {"max_batch_tokens": PolicyConfig.max_batch_tokens}
        if backend == "hf":
            unset["kv_budget_tokens"] = None
        config = dataclasses.replace(config, policy=dataclasses.replace(config.policy, **unset))
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
    each run's old results in `out` go when it writes its first new one. `workers` /
    `ray_address`: each method's problems sharded over Ray workers
    (ets/app/distributed.py). `jobs`: runs at a time, one process each
    (ets/app/sweep.py `run_in_jobs`)."""
    from ets.app.output import check_outputs
    from ets.app.sweep import run_sweep, sweep_configs
    from ets.data import load_problems

    import ets.strategies as search

    config = demo_config(width, problems, out, backend)
    methods = list(methods) if methods is not None else search.available()
    found = load_problems(config.data)
    if len(found) < problems:
        log.warning("the demo task has %d test problems: --problems %d searches all %d", len(found), problems,
                    len(found))
    check_outputs(sweep_configs(config, methods, [width], Path(out), seeds), found,
                  overwrite=overwrite, way_out=f"pass another --out folder, or --overwrite to start {str(out)!r} afresh")
    return run_sweep(config, methods, [width], out, show_progress=show_progress, title=f"ets demo, W={width}",
                     workers=workers, ray_address=ray_address, seeds=seeds, jobs=jobs, overwrite=overwrite)


# Runs at a time by default (the CLI's --jobs help says 4): each holds its own models and
# two KV pools (~2.5 GB).
DEMO_MAX_JOBS = 4


def demo_jobs() -> int:
    """`ets demo`'s default runs at a time: one per core (each on one torch thread, the
    demo config's `torch_threads`), at most DEMO_MAX_JOBS."""
    return max(1, min(os.cpu_count() or 1, DEMO_MAX_JOBS))


def demo_title(rows: Sequence[dict[str, Any]], width: int, seeds: Sequence[int] | None = None, jobs: int = 1) -> str:
    """The line above the demo's table: problems, width, seeds, and how many runs at a time
    (the table marks what they shared), e.g. `ets demo: 50 problems, width 16, 3 seeds (0, 1,
    2): mean ± sd over seeds; 2 runs at a time`."""
    from ets.app.terminal import plural

    counts = sorted({r["problems"] for r in rows if r.get("problems") is not None})
    problems = "? problems" if not counts else plural(counts[0], "problem") if len(counts) == 1 \
        else f"{counts[0]}-{counts[-1]} problems"
    seeds = list(seeds) if seeds is not None else [demo_config().search.seed]
    spread = ": mean ± sd over seeds" if len(seeds) > 1 else ""
    shared = f"; {jobs} runs at a time" if jobs > 1 else ""
    return (f"ets demo: {problems}, width {width}, {plural(len(seeds), 'seed')} "
            f"({', '.join(map(str, seeds))}){spread}{shared}")


def demo_surprise() -> dict[str, float] | None:
    """The readout weights the demo config gives its PRM (`reward.options.surprise`)."""
    return demo_config().reward.options.get("surprise")


def prm_model(model, tok, surprise: dict[str, float] | None = None):
    """The demo PRM as the `step_tag` built-in the search uses (plain forward); with
    `surprise`, read with its LM's surprise (rewards/surprise.py)."""
    # imported here: the rest of this module runs in `ets demo`'s driver, which needs no torch
    # (its runs go to worker processes), and importing it there held up their start by ~2.5 s
    from ets.rewards.step_tag import StepTagOptions, StepTagPRM

    options = StepTagOptions(tag=STEP_TAG, good_token=GOOD_TOKEN, bad_token=BAD_TOKEN, backend="forward",
                             surprise=surprise)
    return StepTagPRM.from_model(model, tok, options)


def prm_scores(model, tok, questions: Sequence[str], trajectories: Sequence[Sequence[Sequence[str]]],
               surprise: dict[str, float] | None = None) -> list[list[list[float]]]:
    """scores[q][t][s] = P(step s of trajectory t of question q is good), computed by the
    same `step_tag` built-in the search uses, so the quality bars measure exactly what a
    search sees (pass `demo_surprise()` for the demo config's readout; None: the tag alone)."""
    return prm_model(model, tok, surprise).score(questions, trajectories)


def fit_demo_surprise(policy, policy_tok, prm, prm_tok, problems: int = 100, samples: int = 16, seed: int = 7):
    """Fit the demo PRM's surprise readout (rewards/surprise.py) on the policy's samples of
    `problems` validation-split problems (T=1.0, streams seeded by `seed`), every step
    labelled by the exact checker. Returns (readout, figures): the step count and the
    in-sample step AUC of the tag alone and of the readout."""
    from ets.app.samples import sample_solutions
    from ets.demo import generate_split, judge_steps
    from ets.demo.metrics import roc_auc
    from ets.rewards.surprise import WEIGHTS, fit_readout, readout_features

    chosen = generate_split("validation", problems, 0)
    questions = [p.question for p in chosen]
    drawn = sample_solutions(policy, policy_tok, questions, n=samples, temperature=1.0, seed=seed)
    # Any weights: only the rows the readout reads matter here.
    reader = prm_model(prm, prm_tok, surprise=dict.fromkeys(WEIGHTS, 0.0))
    reads, good = [], []
    for p, trajs, per_traj in zip(chosen, drawn, reader.surprise_features(questions, drawn)):
        for steps, read in zip(trajs, per_traj):
            if steps:
                reads.append(read)
                good += [v == "ok" for v in judge_steps(p, steps)]
    readout = fit_readout([f for read in reads for f in readout_features(*read)], good)
    figures = {
        "steps": len(good), "wrong_steps": good.count(False),
        "auc_tag": roc_auc(good, [x for logits, _ in reads for x in logits]),
        "auc_readout": roc_auc(good, [x for read in reads for x in readout.scores(*read)]),
    }
    return readout, figures
