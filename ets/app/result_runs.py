"""The results `ets compare`, `ets diagnose` and `ets eval` read: files of `ets run`, or a sweep's run
named without its seed (`runs/s/rebase_w64`), which stands for its seed files
(`runs/s/rebase_w64_s<seed>.jsonl`)."""

from __future__ import annotations

import glob
import os
import re
from typing import Sequence

from ets.app.evaluate import EvalError, load_results
from ets.app.records import COMPARE, DIAGNOSE

# What each command reads of every record (ets/app/records.py).
NEEDS = {"compare": COMPARE, "diagnose": DIAGNOSE}


def _jsonl_only(command: str, paths: Sequence[str], why: str) -> None:
    """Refuse an ETS answers.json: `command` reads `ets run` results only (`why` says what it needs)."""
    for path in paths:
        if path.endswith(".json"):
            raise EvalError(f"{path}: ets {command} reads the results of `ets run` (JSONL), {why}; "
                            "grade an ETS answers.json with `ets eval`")


def load_runs(command: str, given: Sequence[str], why: str) -> list[tuple[str, str, list[list[dict]]]]:
    """Each results file, or sweep run named without its seed, given to `command`, as (the
    path given, what its name adds to say its seeds, its records per seed). The seeds' text
    names each seed's problem count when they differ (a seed still running has searched
    fewer); a single file adds nothing."""
    _jsonl_only(command, given, why)
    runs = []
    for path in given:
        seeds = seed_files(path)
        path = path if seeds else named_file(path)
        records = [load_results(file, NEEDS[command]) for file in (seeds.values() if seeds else [path])]
        seeds_text = ""
        if seeds:
            counts = [len(r) for r in records]
            seeds_text = f" (seeds {','.join(seeds)}" + (f": {'/'.join(map(str, counts))} problems)"
                                                         if len(set(counts)) > 1 else ")")
        runs.append((path, seeds_text, records))
    return runs


def named_file(given: str) -> str:
    """The results file `given` names (`run_file`); an EvalError where it names neither a
    file nor a sweep's run (a `.jsonl` name that is not there is left to the reader to
    refuse, as a results file that does not exist)."""
    path = run_file(given)
    if not os.path.exists(path) and not path.endswith(".jsonl"):
        raise EvalError(f"{path!r} is neither a results file nor a sweep's run with seed files "
                        f"{path}_s<seed>.jsonl; pass the output of `ets run` or `ets sweep --seeds`")
    return path


def run_file(given: str) -> str:
    """A sweep's run of one seed named as its runs of several are (`runs/s/rebase_w64`): its
    one file, `runs/s/rebase_w64.jsonl`, where `given` is no file and that one is; else
    `given` as it is."""
    if os.path.exists(given) or given.endswith(".jsonl") or not os.path.isfile(given + ".jsonl"):
        return given
    return given + ".jsonl"


def seed_files(given: str) -> dict[str, str]:
    """A sweep's run named without its seed (`runs/s/rebase_w64`) -> its seed files there
    (`runs/s/rebase_w64_s<seed>.jsonl`) by seed, in numeric order; {} for anything else."""
    if os.path.exists(given) or given.endswith(".jsonl"):
        return {}
    found = {}
    for path in glob.glob(glob.escape(given) + "_s*.jsonl"):
        seed = re.fullmatch(r"_s(\d+)\.jsonl", path[len(given):])
        if seed:
            found[seed.group(1)] = path
    return {s: found[s] for s in sorted(found, key=int)}
