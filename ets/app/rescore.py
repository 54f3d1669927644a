"""`ets rescore`: a best-of-N run's samples scored by another reward, without sampling again.

    ets rescore --from runs/bon.jsonl --config new_prm.yaml --output runs/bon_new_prm.jsonl

Best-of-N prunes nothing: every node gets one child whatever its score, so the reward only
votes at the end and the samples do not depend on it. Its trajectories scored by reward B
and voted are therefore the records `ets run` with reward B would write, at the cost of the
PRM alone (a W=64 best-of-N search of the demo task is ~95% sampling). The same is not true
of beam, DVTS, REBASE or ETS, whose scores decide which nodes grow: they are refused.

The config must be the source run's in every compared key (ets/app/provenance.py) but the
reward's (name, model, options), the vote (`aggregation`, `vote`) and the rules that read
each trajectory's answer (`answer_extraction`: the answers are read again from the stored
steps, as the search loop reads them); anything else would have drawn other samples, and
is refused naming the keys. The output is a run's output like
any other: resumable, its `config.json` that of the new config (so `ets run` and `ets sweep`
with that config resume it as done), with the source under `recorded.rescored_from`. Each
record says where it came from (`rescored_from`: a file may mix searched and rescored
records when a rescore resumes a live run's output) and keeps the search's figures (tokens, KV sizes, tree size, `wall_time`: the sampling
run's); the summary's throughput is unknown (null), as nothing was searched.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Sequence

from ets.answers.aggregate import choose_answer
from ets.api import apply_torch_threads, build_reward
from ets.answers.extract import NOT_FOUND, extract
from ets.answers.accuracy import grade
from ets.app.evaluate import load_results
from ets.app.output import OutputError, config_path, open_output, read_json
from ets.app.provenance import describe, differences
from ets.app.records import RESCORE
from ets.app.run import finish_summary, summarize
from ets.config import ConfigError, RunConfig
from ets.data import Problem, load_problems
from ets.loop.rules import finished_votes

# Keys a rescore may change: they decide the scores, the answers read and the vote, never
# the samples.
RESCORABLE = ("reward.", "search.aggregation", "search.vote", "search.answer_extraction")
# Problems per reward call: small enough that an interruption loses little, large enough
# that the PRM's batches stay full (64 trajectories of a W=64 problem are one batch alone).
PROBLEMS_PER_CALL = 8


def rescore(source: str | Path, config: RunConfig, *, show_progress: bool = True, overwrite: bool = False,
            reward=None) -> dict[str, Any]:
    """Score `source`'s trajectories with `config`'s reward, re-vote, and write the records
    to `config.output`; returns the summary written beside them."""
    source = Path(source)
    records = _source_records(source, config)
    problems = [Problem(r["question"], r["ground_truth"], id=r["id"]) for r in records]
    apply_torch_threads(config)
    new_records: list[dict[str, Any]] = []
    seconds = None
    with open_output(config, problems, overwrite=overwrite,
                     recorded={"rescored_from": str(source.resolve())}) as writer:
        todo = [r for r in records if r["id"] not in writer.done_ids]
        if todo:
            reward = reward or build_reward(config)  # no policy: the PRM on its own model
            start = time.perf_counter()  # the scoring alone, the PRM loaded
            bar = _progress(len(records), len(records) - len(todo), show_progress)
            # closed on the way out of an error too, so its line ends before the error's
            with bar if bar is not None else contextlib.nullcontext():
                for i in range(0, len(todo), PROBLEMS_PER_CALL):
                    chunk = todo[i:i + PROBLEMS_PER_CALL]
                    for record in rescored(chunk, reward, config):
                        record["rescored_from"] = str(source.resolve())
                        writer.write(record)
                        new_records.append(record)
                    if bar is not None:
                        bar.update(len(chunk))
            seconds = time.perf_counter() - start
    return finish_summary(config.output, writer.records, bool(new_records), lambda records: {
        **summarize(records, new_records, 0.0, None, reward), "rescored_from": str(source.resolve()),
        "rescore_seconds": None if seconds is None else round(seconds, 3)})


def rescored(records: Sequence[dict[str, Any]], reward, config: RunConfig) -> list[dict[str, Any]]:
    """`records` with every trajectory's step scores from `reward` (one call), its answer
    read again by `config`'s answer rules, and the answer chosen again by its aggregation
    and vote, as the search loop reads and chooses them (ets/loop/controller.py `_record`)."""
    from ets.rewards.base import empty_steps_inherit, scored

    search = config.search
    questions = [r["question"] for r in records]
    steps = [[t["steps"] for t in r["trajectories"]] for r in records]
    score_fn = getattr(reward, "score", reward)
    scores = scored(score_fn, questions, steps, config.reward.name, [r["id"] for r in records])
    if not search.ets_code:  # as the search loop scores them
        empty_steps_inherit(steps, scores)
    out = []
    for record, per_problem in zip(records, scores):
        found = [extract("".join(t["steps"]), search.answer_extraction, search.answer_markers)
                 if finished_votes(t["finish"], search) else NOT_FOUND for t in record["trajectories"]]
        trajectories = [{**t, "step_scores": s, "answer": f.answer, "answer_rule": f.rule}
                        for t, s, f in zip(record["trajectories"], per_problem, found)]
        answers = [t["answer"] for t in trajectories]
        chosen = choose_answer(answers, per_problem, search.aggregation, search.vote)
        truth = record["ground_truth"]
        correct = grade(chosen, truth)
        out.append({**record, "aggregation": search.aggregation, "vote": search.vote, "answer": chosen,
                    "correct": correct, "trajectories": trajectories})
    return out


def _source_records(source: Path, config: RunConfig) -> list[dict[str, Any]]:
    """The source's records (of the problems `config.data`'s start, end and limit select
    from the data, when set), after checking that `config` would have drawn the same
    samples."""
    if source.is_dir():
        raise ConfigError(f"rescore: {str(source)!r} is a folder; pass the results file of a best-of-N `ets run` "
                          "(a .jsonl file)")
    if not source.is_file():
        raise ConfigError(f"rescore: results file {str(source)!r} does not exist; pass the output of a best-of-N `ets run`")
    if config.search.method != "best_of_n":
        raise ConfigError(f"rescore: the config's method is {config.search.method!r}; only best-of-N's samples do not "
                          "depend on the reward (set method=best_of_n, or rerun the search with `ets run`)")
    if config.output and Path(config.output).resolve() == source.resolve():
        raise OutputError(f"rescore: the output is the source {str(source)!r}; give another with --output PATH")
    made = read_json(config_path(source))
    if made is None or not isinstance(made.get("compared"), dict):
        raise ConfigError(f"rescore: {str(source)!r} has no readable {config_path(source).name}, so what drew its samples "
                          "is unknown; rescore the output of an `ets run`")
    method = made["compared"].get("search.method")
    if method != "best_of_n":
        raise ConfigError(f"rescore: {str(source)!r} was searched by {method!r}, whose samples depend on its reward; "
                          "only best-of-N's can be rescored (rerun the search with `ets run`)")
    changed = [d for d in differences(made["compared"], describe(config)["compared"]) if not d.startswith(RESCORABLE)]
    if changed:
        raise ConfigError(f"rescore: the config differs from the one that drew {str(source)!r}'s samples "
                          f"({'; '.join(changed)}); only the reward and the vote may change")
    records = load_results(source, RESCORE)
    data = config.data
    if data.start is not None or data.end is not None or data.limit is not None:
        # a slice of the data, as `ets run` takes it (the source's lines are in the order
        # its problems finished)
        wanted = {p.id for p in load_problems(data)}
        records = [r for r in records if r["id"] in wanted]
    return records


def _progress(total: int, done: int, show: bool):
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="rescore", unit="problem")
