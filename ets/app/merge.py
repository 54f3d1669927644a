"""Several results files evaluated as one run: the slices of one dataset searched apart
(a Slurm array, each job writing its own output), `ets eval a.jsonl b.jsonl ...`.

Records are merged in the order the files are given. Merging is refused, in one line
naming what is wrong:

  - a problem in two files (slices that overlap, or one file given twice);
  - a problem twice in one file (two outputs concatenated into one): it would be counted
    twice;
  - files made by different configs: each output's `<name>.config.json`
    (ets/app/provenance.py) is compared with the first file's, and every compared key must
    agree. The data may differ in where it was read from and which slice was searched
    (`data.path` and that file's SHA-256, as a slice may be a file of its own;
    `data.limit`, `data.start`, `data.end`), not in how it is read (its format, fields,
    hub name and split), nor in anything else;
  - one file with a config record and another without: what made the latter is unknown.

Files with no config record at all (hand-made, or the ETS code's answers.json) are merged
on their ids alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ets.app.evaluate import EvalError, load_results

# Recorded data keys that may differ between the slices of one run: where the data was
# read from (a slice may be a file of its own) and which of its problems a job searched.
SLICE_KEYS = frozenset({"data.path", "data.sha256", "data.limit", "data.start", "data.end"})


@dataclass
class MergedRun:
    """The records of one or more results files, and what made them (the first file's
    config record, or None where the files have none)."""

    files: list[str]
    records: list[dict[str, Any]]
    made: dict[str, Any] | None


def load_merged(paths: Sequence[str | Path]) -> MergedRun:
    """The records of `paths` as one run, after the checks of the module's doc."""
    files = [str(p) for p in paths]
    if len(set(files)) < len(files):
        twice = next(f for f in files if files.count(f) > 1)
        raise EvalError(f"{twice} is named twice; list each results file once")
    where: dict[Any, str] = {}   # problem id -> the file it is in
    records: list[dict[str, Any]] = []
    for file in files:
        loaded = load_results(file)  # each problem once in it
        for record in loaded:
            pid = record.get("id")
            if pid is None:
                continue
            if pid in where:
                raise EvalError(f"problem {pid!r} is in both {where[pid]} and {file}; pass slices that do not "
                                "overlap, each problem in one file")
            where[pid] = file
        records.extend(loaded)
    return MergedRun(files, records, _same_config(files))


def _same_config(files: Sequence[str]) -> dict[str, Any] | None:
    """The config record shared by `files` (None if none has one); refuses a difference."""
    from ets.app.output import config_path, read_json
    from ets.app.provenance import differences

    made = {file: read_json(config_path(file)) for file in files}
    known = {file: m for file, m in made.items() if m is not None and isinstance(m.get("compared"), dict)}
    if not known:
        return None
    first, first_made = next(iter(known.items()))
    for file in files:
        if file not in known:
            raise EvalError(f"{file} has no readable {config_path(file).name} beside it, so whether {first}'s config "
                            "made it is unknown; evaluate it alone, or put its config record back")
        changed = differences(first_made["compared"], known[file]["compared"]) + _data_differences(
            first_made.get("recorded", {}), known[file].get("recorded", {}))
        if changed:
            raise EvalError(f"{first} and {file} were made by different configs ({'; '.join(changed)}); "
                            "evaluate them apart (only slices of one run merge)")
    return first_made


def _data_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`data.key: old -> new` for the recorded data keys that say what the data is."""
    from ets.app.provenance import short

    keys = [k for k in dict.fromkeys([*old, *new]) if k.startswith("data.") and k not in SLICE_KEYS]
    return [f"{k}: {short(old.get(k))} -> {short(new.get(k))}" for k in keys if old.get(k) != new.get(k)]
