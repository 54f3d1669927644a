"""Reading JSONL results files, as `ets run` writes them (ets/app/writer.py) and a resume
or a reader reads them back.

Every line is written, flushed and synced before the next one starts, so only the last
line can be torn by an interruption: a last line without its newline is not a record (a
resume cuts it off). Anything else wrong is corruption and raises `ResultsFileError`
naming the line: a complete line that is not JSON, a line that is not an object, and, for
a file to resume, a record without an `id` or two records with one id.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator

FIX = "delete that line (its problem is searched again on the next run) or pass --overwrite to start afresh"
# what a reader of results (ets eval, compare, diagnose, rescore's source) says instead: it
# takes no --overwrite, and may have been given some other file
READ_FIX = ("is it the results of an `ets run`? If so it is corrupt: delete that line and rerun that run to search "
            "its problem again")

log = logging.getLogger(__name__)


class ResultsFileError(ValueError):
    """A results file is corrupt; the message names the file, the line and the fix."""


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Every complete record of a results file (a torn last line is ignored)."""
    return [record for _, record in numbered_records(path)]


def numbered_records(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) for each complete record of a results file; none if it is missing."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    # (a file holding only a torn line holds no results: its reader's error says so)
    if b"\n" in data and data.rsplit(b"\n", 1)[-1].strip():
        log.warning("%s: its last line is incomplete (a run still writing it, or one stopped mid-line); read "
                    "without it", path)
    return list(parse_lines(data, path, reader=True))


def parse_lines(data: bytes, name: str | Path, reader: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each complete line of `data`, the contents of file `name`
    (`reader`: read by a command that only reads results, whose errors say READ_FIX)."""
    fix = READ_FIX if reader else f"the file is corrupt: {FIX}"
    start = lineno = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            return  # torn write from an interrupted run
        raw, start, lineno = data[start:end + 1], end + 1, lineno + 1
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "msg", "not UTF-8")
            raise ResultsFileError(f"{name}:{lineno}: not a JSON line ({reason}); {fix}") from None
        if not isinstance(record, dict):
            raise ResultsFileError(f"{name}:{lineno}: a {type(record).__name__}, not a result object; "
                                   f"{fix}")
        yield lineno, record


def resumable(numbered: Iterator[tuple[int, dict[str, Any]]], name: str | Path,
              reader: bool = False) -> list[dict[str, Any]]:
    """The records to resume, each with a distinct `id`; raises ResultsFileError naming the
    line (`reader`: as parse_lines)."""
    records, lines = [], {}
    for lineno, record in numbered:
        pid = record.get("id")
        if pid is None:
            fix = READ_FIX if reader else f"is this an `ets run` output? {FIX}"
            raise ResultsFileError(f"{name}:{lineno}: the record has no 'id'; {fix}")
        if pid in lines:
            also = "" if reader else ", or pass --overwrite to start afresh"
            raise ResultsFileError(f"{name}: lines {lines[pid]} and {lineno} both hold problem {pid!r}; "
                                   f"delete one of them{also}")
        lines[pid] = lineno
        records.append(record)
    return records


def read_resumable(path: str | Path) -> list[dict[str, Any]]:
    """The records of a results file to resume, each with a distinct `id`."""
    return resumable(iter(numbered_records(path)), path, reader=True)
