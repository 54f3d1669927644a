"""One run of `ets run`: problems from the config, searched, written as they finish.

    summary = run(load_config("configs/tiny.yaml", ["width=8"]))

The output JSONL is resumable (ets/app/writer.py): problems already in it are skipped, and the
summary (accuracy, throughput, KV figures) is written next to it as `<name>.summary.json`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from ets.answers.accuracy import accuracy
from ets.api import apply_torch_threads, build_reward
from ets.app.forward_notes import check_forward_notes
from ets.app.memory_notes import check_memory_notes, run_plans, unshared_engine_note
from ets.config import DataConfig, RunConfig, model_preset_notes
from ets.config.method_keys import unread_keys_note
from ets.config.sal_recipes import no_effect_note
from ets.loop.controller import RunStats, SearchLoop
from ets.data import load_problems
from ets.app.paired import correct_by_problem
from ets.app.prompt_fit import check_reward_fits, fit_prompts
from ets.app.output import (OutputError, check_can_write, check_not_the_data, check_output_path, open_output,
                            read_json, resume_note, summary_path, treeless_note, write_json_atomic)
from ets.app.terminal import plural
from ets.app.writer import FULL
from ets.policy.base import Policy
from ets.policy.build import build_policy, check_backend
from ets.rewards.registry import check_reward, check_reward_tokenizer
from ets.strategies import build as build_strategy

log = logging.getLogger(__name__)


def run(config: RunConfig, *, show_progress: bool = True, policy: Policy | None = None, reward=None,
        overwrite: bool = False, workers: int = 1, ray_address: str | None = None,
        runs_at_a_time: int = 1) -> dict[str, Any]:
    """Search the problems not yet in `config.output`. An output made by another config is
    refused (ets/app/output.py) unless `overwrite`, which starts it afresh. With
    `workers` > 1 or a `ray_address`, the problems are sharded over Ray actors, each
    loading its own models (ets/app/distributed.py); this process still writes the output.
    `runs_at_a_time`: the runs sharing the machine with this one (`ets sweep --jobs`), said
    in its summary: its wall time and throughput are then those of a shared machine."""
    if policy is None:  # a backend that cannot run here fails before anything is read or started
        check_backend(config.policy, local=ray_address is None)
    if reward is None:  # as do the reward's options
        check_reward(config.reward, config.policy.model)
    if ray_address is None:  # and a device this machine lacks (a cluster's workers may have it)
        check_devices(config)
    if workers > 1 or ray_address is not None:
        if policy is not None or reward is not None:
            raise ValueError("run(workers=...): each worker builds its own policy and reward; pass neither")
        from ets.app.distributed import run_distributed

        return run_distributed(config, workers=workers, address=ray_address, show_progress=show_progress,
                               overwrite=overwrite)
    strategy = build_strategy(config.search)  # an unknown method fails before anything is read or loaded
    for note in inert_keys_notes(config):
        log.warning(note)
    apply_torch_threads(config)
    problems = load_problems(config.data)
    with open_output(config, problems, overwrite=overwrite) as writer:
        todo = [p for p in problems if p.id not in writer.done_ids]
        if note := treeless_note(Path(config.output), writer.records, config.save_trees):
            log.warning(note)
        new_records: list[dict[str, Any]] = []
        run_stats: RunStats | None = None
        elapsed = 0.0
        if todo:
            # Models load before the clock starts: throughput measures the search alone.
            policy = policy or build_policy(config.policy, config.search)
            if reward is None and (tokenizer := getattr(policy, "tokenizer", None)) is not None:
                for note in check_reward_fits(config, todo, tokenizer):  # before the PRM loads
                    log.warning(note)
            reward = reward or build_reward(config, policy)
            strategy.warm_up()

            bar = _progress(len(problems), len(problems) - len(todo), config.search.method, show_progress)
            # closed on the way out of an error too, so its line ends before the error's
            with bar if bar is not None else contextlib.nullcontext():
                run_stats, elapsed = _search(config, todo, policy, reward, strategy, writer, new_records, bar)
            if note := constant_scores_note(new_records):
                log.warning(note)
    return finish_summary(config.output, writer.records, bool(new_records), lambda records: with_embedding_cost({
        **summarize(records, new_records, elapsed, policy, reward), **(run_stats._asdict() if run_stats else {}),
        **({"runs_at_a_time": runs_at_a_time} if runs_at_a_time > 1 else {})},
        config.search, new_records))


def _search(config: RunConfig, todo, policy, reward, strategy, writer, new_records: list[dict[str, Any]],
            bar) -> tuple[RunStats, float]:
    """Search `todo`, each record written as its problem finishes: the run's stats and
    its wall time, models loaded."""
    from ets.engine.heap import frozen_loaded  # here: the ets.engine package loads torch

    def on_result(record: dict[str, Any]) -> None:
        writer.write(record)
        new_records.append(record)

    # Admission reads the KV capacity from the policy itself (policy.memory()).
    loop = SearchLoop(
        todo, policy, reward, config.search, strategy=strategy,
        concurrency=config.concurrency, on_result=on_result, progress=bar, save_trees=config.save_trees,
        in_flight=None if config.rounds == "in_flight" else False,
    )
    # The models and modules out of the cycle collector's way while searching, and back
    # under it after, so that a process running one search after another frees each one's
    # models and pools (ets/engine/heap.py).
    with frozen_loaded():
        start = time.perf_counter()
        run_stats = loop.run().stats
        return run_stats, time.perf_counter() - start

def constant_scores_note(records: list[dict[str, Any]], least: int = 20) -> str | None:
    """A warning when every step score of a run's records is the same number (a PRM reading
    a saturated logit scores 1.0 everywhere): the scores then weigh every trajectory alike,
    and REBASE, ETS and the weighted vote do what an unscored search would. None when the
    scores differ, or there are fewer than `least` of them."""
    scores = {s for r in records for t in r["trajectories"] for s in t["step_scores"]}
    count = sum(len(t["step_scores"]) for r in records for t in r["trajectories"])
    if len(scores) != 1 or count < least:
        return None
    return (f"every one of the {count:,} step scores was {scores.pop():g}: the reward told no step from another, "
            "so the search and the vote weighed every trajectory alike; check reward.name and reward.options")


def with_embedding_cost(summary: dict[str, Any], search, new_records: list[dict[str, Any]]) -> dict[str, Any]:
    """`summary` with what ETS's step embeddings cost (`embedding`, ets/app/embedding_cost.py),
    when the run clustered any."""
    from ets.app.embedding_cost import embedding_cost

    cost = embedding_cost(summary, search, new_records)
    return {**summary, "embedding": cost} if cost is not None else summary


def finish_summary(output, records: list[dict[str, Any]], worked: bool, build) -> dict[str, Any]:
    """The summary a run returns and writes beside `output`, whose `records` are those the
    writer holds (all of the file's): after work (`worked`), `build(records)`; when nothing
    was done, the stored one, which keeps the throughput measured when the work was done
    (an empty or truncated one is rebuilt, its throughput unknown)."""
    stored = summary_path(output)
    kept = None if worked else read_json(stored)
    if kept is not None:
        return kept_summary(kept, records)
    summary = build(records)
    try:
        write_json_atomic(stored, summary)
    except OSError as exc:
        raise OutputError(f"cannot write {exc.filename} ({exc.strerror}); the {len(records)} results in {output} "
                          "are complete, and rerunning the same command writes the summary"
                          + (" once there is free space" if exc.errno in FULL else "")) from None
    return summary


def kept_summary(kept: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """A stored summary as a run returns it when it searched nothing: no new problems (the
    throughput stays the one measured when the work was done), and one written before
    summaries held the outcome of every problem gets them from the records."""
    return {**kept, "new_problems": 0, "correct_by_problem": correct_by_problem(records)}


def inert_keys_notes(config: RunConfig) -> list[str]:
    """A line for each key set in the config that does nothing here (said when a run starts,
    and by --check)."""
    notes = []
    if config.num_threads is not None:
        notes.append(f"num_threads: {config.num_threads} has no effect here (in the ETS code it sized SGLang's "
                     f"client threads); problems searched at once: concurrency = {config.concurrency}")
    notes.extend(config.policy.inert_keys_notes())
    if config.data.path is not None and config.data.hf_split != DataConfig.hf_split:
        notes.append(f"data.hf_split: {config.data.hf_split} has no effect: the problems come from data.path "
                     f"({config.data.path}), and the split is read with data.hf_name")
    notes.extend(no_effect_note(key, value, config.search.method, config.policy.backend)
                 for key, value in config.no_effect.items())
    return notes


def check_config(config: RunConfig, overwrite: bool = False) -> str:
    """`ets run --check`: validate what can be validated without loading a model or
    searching (the strategy, the output's path, the reward's name and options, the model
    paths, the data, every prompt against the model's context and an explicit KV pool),
    and return the resolved settings as YAML, notes as `#` lines. Raises the error a run
    would raise."""
    import yaml

    from ets.models.folder import check_model_folder
    from ets.models.load import check_model_exists, check_tiny_name
    from ets.rewards.plugin_faults import is_project_module, module_of

    build_strategy(config.search)
    check_output_path(Path(config.output))
    check_not_the_data(config)
    check_can_write(Path(config.output))
    obj = check_reward(config.reward, config.policy.model)
    check_devices(config)
    check_backend(config.policy)
    for key, model in (("policy.model", config.policy.model), ("reward.model", config.reward.model)):
        if model and model.startswith("tiny:"):
            check_tiny_name(model)
        elif model:
            check_model_exists(model, key)
    # What a folder must hold (a tokenizer, whole safetensors files): the policy's, and a
    # built-in reward's (a plug-in's own model folder is its business).
    check_model_folder(config.policy.model)
    if config.reward.model and is_project_module(module_of(obj)):
        check_model_folder(config.reward.model)
    notes = [note] if (note := check_reward_tokenizer(obj, config.reward, config.policy.model)) else []
    problems = load_problems(config.data) if config.data.path or config.data.hf_name is None else None
    if problems is None:
        from ets.data import hub_datasets

        hub_datasets(config.data)  # the dataset is not read here, but the package to read it must be there
    else:
        notes.append(f"data: {plural(len(problems), 'problem')}")
        notes.append(resume_note(config, problems, overwrite))  # or the refusal a run would meet
    notes.extend(model_preset_notes(config))
    for key in ("policy_model_type", "reward_model_type"):
        if getattr(config, key) is not None:
            section = "policy" if key == "policy_model_type" else "reward"
            notes.append(f"{key}: {getattr(config, key)} set the {section} keys not given explicitly (`ets presets`)")
    notes.extend(inert_keys_notes(config))
    notes.extend(filter(None, [unread_keys_note(config.search), unshared_engine_note(config)]))
    notes.extend(check_memory_notes(config))
    notes.extend(check_forward_notes(config))
    if config.search.method == "ets" and config.search.lambda_s > 0:
        from ets.lp.clustering import embedder_note

        notes.extend(filter(None, [embedder_note(config.search.embedder)]))
    if config.search.ets_code:
        notes.append("search.compat: ets_code: the ETS public code's selection and accounting (docs/FIDELITY.md)")
    shown = ["# first prompt: not shown (the problems come from a hub dataset, not read by --check)"]
    if problems:
        tokenizer, why_not = check_tokenizer(config)
        if tokenizer is None:
            shown = [f"# first prompt: not shown ({why_not})"]
        else:
            fit_notes, first = fit_prompts(config, problems, tokenizer)
            notes.extend(fit_notes)
            shown = first_prompt_lines(config, problems[0], tokenizer, first)
    body = yaml.dump(config.to_dict(), Dumper=_dumper(), sort_keys=False, allow_unicode=True, width=100)
    return (body + "".join(f"# {n}\n" for n in notes) + "".join(line + "\n" for line in shown)
            + "# config OK: no model was loaded, nothing was run\n")


def check_devices(config: RunConfig) -> None:
    """A device this machine does not have (device: cuda without CUDA) is refused before
    anything loads: the policy's, and a reward's own `device` option."""
    from ets.models.load import check_device

    check_device(config.policy.device, "policy.device")
    device = config.reward.options.get("device") if isinstance(config.reward.options, dict) else None
    if isinstance(device, str):
        check_device(device, "reward.options.device")


def check_tokenizer(config: RunConfig):
    """The policy's tokenizer for `--check` (the one model file it loads), or a note saying
    why it is not here: a hub name that cannot be reached here is a note, not an error."""
    from ets.models.load import ModelLoadError, load_tokenizer

    try:
        return load_tokenizer(config.policy.model), None
    except (OSError, ValueError, ModelLoadError) as exc:
        if Path(config.policy.model).expanduser().exists():
            raise ModelLoadError(f"the tokenizer of {config.policy.model!r} could not be loaded: "
                                 f"{str(exc).splitlines()[0]}; the folder needs its tokenizer files") from None
        why = str(exc).splitlines()[0]
        return None, (f"the tokenizer of {config.policy.model!r} could not be loaded here: "
                      f"{why if len(why) <= 160 else why[:157] + '...'}")


def first_prompt_lines(config: RunConfig, problem, tokenizer, prompt) -> list[str]:
    """The exact root prompt of the first problem (`prompt`, as `fit_prompts` wrote it), as
    `#`-comment lines (each line of the text after `# | `, so trailing blank lines show),
    with how it was written and any warning (an instruct model given raw text)."""
    from ets.policy.chat import format_notes, prompt_format

    fmt = prompt_format(tokenizer, config.policy)
    cut = f", cut from {prompt.truncated_from}" if prompt.truncated_from is not None else ""
    lines = [f"# first prompt ({problem.id!r}, {len(prompt.token_ids)} tokens{cut}, {fmt.source}):"]
    lines += [f"# | {line}".rstrip() for line in prompt.text.split("\n")]
    lines += [f"# WARNING: {note}" for note in format_notes(tokenizer, config.policy, fmt)]
    return lines


def _quoted_multiline(dumper, value: str):
    """Strings with line breaks (templates, delimiters) as one double-quoted line: "\\n\\n"."""
    style = '"' if "\n" in value or value != value.strip() else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _dumper():
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(str, _quoted_multiline)
    return Dumper


def summarize(records: list[dict[str, Any]], new_records: list[dict[str, Any]], elapsed: float, policy,
              reward=None) -> dict[str, Any]:
    """Accuracy over every record in the file; throughput over the records made now. With
    new records: the policy's counters (`policy_stats`) and KV memory (`policy_memory`, its
    `ets.policy.base.KVMemory`), and the reward model's counters (`reward_stats`; for a PRM
    on its own engine, that second cache's pool and peak)."""
    n = len(records)
    graded = accuracy(r["correct"] for r in records)
    new_tokens = sum(r["generated_tokens"] for r in new_records)
    measured = elapsed > 0 and bool(new_records)
    # The ETS code's KV metric (prompt as 2 tokens); unknown for records written before it was kept.
    ref = [r.get("kv_size_ref") for r in records]
    ref_sum = sum(ref) if n and None not in ref else None
    out = {
        "problems": n,
        "accuracy": graded.value,  # over the problems with a ground truth (ets/answers/accuracy.py)
        **({"ungraded": graded.ungraded} if graded.ungraded else {}),
        # per problem, for paired comparisons of methods on the same problems (ets/app/paired.py)
        "correct_by_problem": correct_by_problem(records),
        "kv_size_sum": sum(r["kv_size"] for r in records),
        "kv_size_per_problem": sum(r["kv_size"] for r in records) / n if n else 0.0,
        "kv_size_ref_sum": ref_sum,
        "kv_size_ref_per_problem": ref_sum / n if ref_sum is not None else None,
        "generated_tokens": sum(r["generated_tokens"] for r in records),
        "new_problems": len(new_records),
        # what the wall time, throughput, live KV and searches in flight were measured over:
        # a resumed run's, the problems it searched after resuming (`partly_measured`)
        "measured_problems": len(new_records),
        # Unknown (None, printed n/a) when nothing was timed, e.g. a lost summary rebuilt.
        "wall_time": round(elapsed, 3) if measured else None,
        "problems_per_s": len(new_records) / elapsed if measured else None,
        "tokens_per_s": new_tokens / elapsed if measured else None,
    }
    totals: dict[str, float] = {}
    for r in records:
        for key, value in r.get("strategy_metrics", {}).items():
            totals[key] = totals.get(key, 0) + value
    if totals:  # e.g. ETS solver fallbacks: counted, never silent
        out["strategy_metrics"] = totals
    if policy is not None and new_records:
        out["policy_stats"] = policy.stats()
        out["policy_memory"] = policy.memory()._asdict()
    if reward is not None and new_records and hasattr(reward, "stats"):
        out["reward_stats"] = reward.stats()
    if plans := run_plans(policy, reward):  # KV pools sized from a device's free memory
        out["kv_memory"] = plans
    return out


def _progress(total: int, done: int, label: str, show: bool):
    if not show:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc=label, unit="problem")
