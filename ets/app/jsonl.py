"""Append-only JSONL results that survive interruption.

Each record is written as one line and flushed to disk before the next problem finishes,
so a killed run loses at most the problems in flight. On resume, a last line cut short by
the interruption is dropped (the file is truncated back to its last complete line) and the
ids already written are skipped.

Only the last line can be torn by an interruption (every line is written, flushed and
synced before the next one starts). Anything else wrong is corruption and raises
`ResultsFileError` naming the line: a complete line that is not JSON, a line that is not
an object, a record without an `id`, or two records with one id.

The file is created by the first `write`, not by opening the writer: a run that fails
before its first result (a model that does not load) leaves no empty file behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

FIX = "delete that line (its problem is searched again on the next run) or pass --overwrite to start afresh"


class ResultsFileError(ValueError):
    """A results file is corrupt; the message names the file, the line and the fix."""


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Every complete record of a results file (a torn last line is ignored)."""
    return [record for _, record in _iter_complete(Path(path))]


def _iter_complete(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each complete line."""
    if not path.exists():
        return
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.endswith(b"\n"):
                return  # torn write from an interrupted run
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                reason = getattr(exc, "msg", "not UTF-8")
                raise ResultsFileError(f"{path}:{lineno}: not a JSON line ({reason}); the file is corrupt: {FIX}") from None
            if not isinstance(record, dict):
                raise ResultsFileError(f"{path}:{lineno}: a {type(record).__name__}, not a result object; "
                                       f"the file is corrupt: {FIX}")
            yield lineno, record


def read_resumable(path: str | Path) -> list[dict[str, Any]]:
    """The records of a results file to resume, each with a distinct `id`."""
    path = Path(path)
    records, lines = [], {}
    for lineno, record in _iter_complete(path):
        pid = record.get("id")
        if pid is None:
            raise ResultsFileError(f"{path}:{lineno}: the record has no 'id'; is this an `ets run` output? {FIX}")
        if pid in lines:
            raise ResultsFileError(f"{path}: lines {lines[pid]} and {lineno} both hold problem {pid!r}; "
                                   "delete one of them, or pass --overwrite to start afresh")
        lines[pid] = lineno
        records.append(record)
    return records


class ResultsWriter:
    """Appends records to `path` after dropping a torn last line; `records` are those
    already written and `done_ids` their ids. Call under the output's lock."""

    def __init__(self, path: str | Path, on_create=None):
        self.path = Path(path)
        self._drop_torn_tail()
        self.records = read_resumable(self.path)
        self.done_ids = {r["id"] for r in self.records}
        self._on_create = on_create     # called once, just before the first line is written
        self._fh = None

    def _drop_torn_tail(self) -> None:
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # nothing but the torn line: no file rather than an empty one
                self.path.unlink()
                return
            with self.path.open("r+b") as fh:
                fh.truncate(cut)

    def write(self, record: dict[str, Any]) -> None:
        if self._fh is None:
            if self._on_create is not None:
                self._on_create()
            self._fh = self.path.open("a", encoding="utf-8")
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.done_ids.add(record["id"])

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
