"""Append-only JSONL results that survive interruption.

Each record is written as one line and flushed to disk before the next problem finishes,
so a killed run loses at most the problems in flight. On resume, a last line cut short by
the interruption is dropped (the file is truncated back to its last complete line) and the
ids already written are skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Every complete record of a results file (a torn last line is ignored)."""
    return list(_iter_complete(Path(path)))


def _iter_complete(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.endswith(b"\n"):
                return  # torn write from an interrupted run
            if raw.strip():
                try:
                    yield json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: not a JSON line ({exc.msg}); remove that line or write to a new file") from exc


class ResultsWriter:
    """Opens `path` for appending after dropping a torn last line; `done_ids` lists the
    problem ids already written."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._drop_torn_tail()
        self.done_ids = {r["id"] for r in read_records(self.path)}
        self._fh = self.path.open("a", encoding="utf-8")

    def _drop_torn_tail(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with self.path.open("r+b") as fh:
                fh.truncate(cut)

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.done_ids.add(record["id"])

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
