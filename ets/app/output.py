"""An output and the files beside it, opened for one run that may resume it.

    with open_output(config, problems, overwrite=False) as writer:
        todo = [p for p in problems if p.id not in writer.done_ids]
        ...   writer.write(record)

For an output `runs/r.jsonl`:

    runs/r.jsonl           the results, one line per problem (ets/app/jsonl.py)
    runs/r.config.json     what made them (ets/app/provenance.py), written with the first result
    runs/r.summary.json    accuracy and throughput (ets/app/run.py), rebuilt if unreadable
    runs/r.jsonl.lock      held while a process writes the results (ets/app/lock.py)

Opening, in order: the path is checked (not a folder, its parent a writable folder), the
provenance is computed (a missing model path fails here), the lock is taken, the results
are read (a corrupt line fails here), and a non-empty output made by another config, or
holding problems this run does not select, is refused naming what differs. Nothing is
created before all that passes but the lock file, which goes with the lock; folders made
for the output are removed again if no result was written.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from ets.app.jsonl import ResultsWriter, read_resumable
from ets.app.lock import OutputLock
from ets.app.provenance import check_records, describe, differences
from ets.config import ConfigError, RunConfig
from ets.data import Problem

WAY_OUT = "write to a new output (--output PATH) or pass --overwrite to start it afresh"


class OutputError(ConfigError):
    """An output cannot be used as asked; the message names it and the way out."""


def summary_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(output.stem + ".summary.json")


def config_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(output.stem + ".config.json")


def lock_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(output.name + ".lock")


@contextmanager
def open_output(config: RunConfig, problems: Sequence[Problem], *, overwrite: bool = False,
                way_out: str = WAY_OUT, recorded: dict[str, Any] | None = None) -> Iterator[ResultsWriter]:
    """The results writer of `config.output`, locked, checked against `config`; with
    `overwrite`, the old results, summary and provenance are removed first. `recorded`
    adds keys to the provenance's `recorded` part (kept for the reader, never compared)."""
    output = Path(config.output)
    check_output_path(output)
    made = describe(config)
    made["recorded"].update(recorded or {})
    created = _make_parents(output.parent)
    try:
        with _locked(output):
            if overwrite:
                clear(output)
            writer = ResultsWriter(output, on_create=lambda: write_json_atomic(config_path(output), made))
            if writer.records:
                check_compatible(output, writer.records, problems, made, way_out)
            with writer:
                yield writer
    finally:
        if not output.exists():
            for folder in reversed(created):
                try:
                    folder.rmdir()
                except OSError:
                    break


def check_outputs(configs: Sequence[RunConfig], problems: Sequence[Problem], *, overwrite: bool,
                  way_out: str) -> None:
    """Before a sweep starts: every pair's output is usable (or, with `overwrite`, cleared),
    so a refusal comes before any model loads rather than half-way through."""
    for config in configs:
        check_output_path(Path(config.output))
    for config in configs:
        output = Path(config.output)
        made = describe(config)
        if not output.parent.is_dir():
            continue  # nothing there yet
        with _locked(output):
            if overwrite:
                clear(output)
                continue
            records = read_resumable(output)
            if records:
                check_compatible(output, records, problems, made, way_out)


def check_compatible(output: Path, records: Sequence[dict[str, Any]], problems: Sequence[Problem],
                     made: dict[str, Any], way_out: str) -> None:
    old = read_json(config_path(output))
    if old is None or not isinstance(old.get("compared"), dict):
        raise OutputError(f"{output} holds {len(records)} results but no readable record of the config that "
                          f"made them ({config_path(output).name}); {way_out}")
    changed = differences(old["compared"], made["compared"])
    if changed:
        raise OutputError(f"{output} holds results of another config ({'; '.join(changed)}); {way_out}")
    why = check_records(records, problems)
    if why:
        raise OutputError(f"{output}: {why}; {way_out}")


def check_output_path(output: Path) -> None:
    """A results path must be a file in a writable folder; checked before anything is made."""
    if output.is_dir():
        raise OutputError(f"output {str(output)!r} is a folder; give a file, e.g. {str(output / 'results.jsonl')!r}")
    folder = output.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"output {str(output)!r}: {str(folder)!r} is a file, not a folder; choose another output path")
    if not os.access(folder, os.W_OK | os.X_OK) or (output.exists() and not os.access(output, os.W_OK)):
        where = output if output.exists() else folder
        raise OutputError(f"output {str(output)!r}: {str(where)!r} is read-only; choose another output path")


def clear(output: Path) -> None:
    for path in (output, summary_path(output), config_path(output)):
        path.unlink(missing_ok=True)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None if it is missing, empty, truncated or not an object."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def write_json_atomic(path: Path, value: Any) -> None:
    """`value` as indented JSON, written as `write_text_atomic` writes."""
    write_text_atomic(path, json.dumps(value, indent=2))


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file and rename it over `path`: a reader sees the old file or
    the new one, never a truncated one."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@contextmanager
def _locked(output: Path) -> Iterator[None]:
    try:
        lock = OutputLock(lock_path(output), output)
        lock.acquire()
    except OSError as exc:  # e.g. read-only for root-less checks that os.access missed
        raise OutputError(f"output {str(output)!r}: cannot write there ({exc.strerror}); choose another output path") from None
    try:
        yield
    finally:
        lock.release()


def _make_parents(folder: Path) -> list[Path]:
    """Create `folder` and its missing parents; returns those created, outermost first."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    missing.reverse()
    try:
        for f in missing:
            f.mkdir()
    except OSError as exc:
        raise OutputError(f"cannot create folder {str(f)!r} ({exc.strerror}); choose another output path") from None
    return missing
