"""The results file of a run: locked, appended one synced line per problem, kept in place.

    with ResultsWriter(Path("runs/r.jsonl"), on_create=write_provenance) as writer:
        todo = [p for p in problems if p.id not in writer.done_ids]
        ...   writer.write(record)

Opening locks the file (ets/app/lock.py: made empty if missing), cuts off a last line torn
by an interrupted run, and reads the records already there (ets/app/jsonl.py). Each
`write` appends one line, flushed and synced before the next problem finishes, so a
killed run loses at most the problems in flight. Closing removes the file if it holds
nothing, so a run that fails before its first result (a model that does not load) leaves
no empty file behind.

Finished records are never lost to what happens to the file while the run writes it.
Before each line, and on closing, the file at the path is checked to be the one this run
locked, holding what this run left there:

  - deleted (the file, or its whole folder) or emptied: written again, folder included,
    from the records this run holds (those it read when it started and those it wrote),
    with a warning, and the run goes on. A user who deletes the results of a live run has
    more often made a mistake than meant to throw away hours of search; one who does mean
    it stops the run first.
  - moved elsewhere, replaced by another file, or changed by another program: the run
    stops with an error naming where its results are (the file where it was moved, or a
    copy saved beside the path), and leaves the file now at the path as it is.

A write that fails (a full disk) leaves no part of its line behind and stops the run with
an error saying that the finished problems are kept and a rerun resumes after them.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

from ets.app.jsonl import parse_lines, resumable
from ets.app.lock import OutputInUse, lock_results, same_file
from ets.config import ConfigError

log = logging.getLogger(__name__)

FULL = (errno.ENOSPC, errno.EDQUOT)


class OutputError(ConfigError):
    """An output cannot be used or written as asked; the message names it and the way out."""


def encode(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


class ResultsWriter:
    """`records`: every record of the file, those read on opening then those written;
    `done_ids`: their ids. `on_create()` is called before this process writes its first
    line, and again when the file is written anew (it writes the files that go with it).
    With `overwrite`, the old records are not read, and the file is emptied (and
    `on_clear()` called) only when the first new line is written, and once there is room
    for it: a run that fails before its first result (a model that does not load, a full
    disk) leaves the old results as they were."""

    def __init__(self, path: str | Path, on_create: Callable[[], None] | None = None, *, overwrite: bool = False,
                 on_clear: Callable[[], None] | None = None):
        self.path = Path(path)
        self._on_create = on_create
        self._on_clear = on_clear
        self._started = False     # this process has written a line
        self._clear = overwrite   # the old contents go at the first write
        self.records: list[dict[str, Any]] = []
        self._fd: int | None = lock_results(self.path)
        try:
            data = self._contents()
            if not overwrite:
                if data and not data.endswith(b"\n"):   # a line torn by an interrupted run
                    os.ftruncate(self._fd, data.rfind(b"\n") + 1)
                    data = data[:data.rfind(b"\n") + 1]
                self.records = resumable(parse_lines(data, self.path), self.path)
        except BaseException:
            self.close()
            raise
        self._size = len(data)    # what the file holds as this process left it
        self.done_ids = {r["id"] for r in self.records}

    def write(self, record: dict[str, Any]) -> None:
        line = encode(record)
        self._keep_in_place()
        try:
            if self._clear:
                self._reserve(len(line))  # a full disk refuses the new run before the old results go
                os.ftruncate(self._fd, 0)
                self._size = 0
                self._clear = False
                if self._on_clear is not None:
                    self._on_clear()
            if not self._started and self._on_create is not None:
                self._on_create()
            self._started = True
            self._append(line)
        except OSError as exc:
            raise OutputError(self._cannot_write(exc)) from None
        self.records.append(record)
        self.done_ids.add(record["id"])

    def close(self, check: bool = True) -> None:
        """Release the file; one holding nothing is removed. With `check`, one deleted
        since the last write is written again first (the summary is read from it)."""
        if self._fd is None:
            return
        try:
            if check and self.records:
                self._keep_in_place()
            if os.fstat(self._fd).st_size == 0 and same_file(self.path, self._fd):
                self.path.unlink()
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, kind, *exc) -> None:
        self.close(check=kind is None)

    # ---- writing

    def _contents(self) -> bytes:
        size, parts, at = os.fstat(self._fd).st_size, [], 0
        while at < size:  # one read returns at most ~2 GiB
            part = os.pread(self._fd, size - at, at)
            if not part:
                break
            parts.append(part)
            at += len(part)
        return b"".join(parts)

    def _append(self, data: bytes) -> None:
        """`data` at the end of the file, synced; on failure the file is cut back to what
        it held, so no part of a line stays."""
        try:
            _write_all(self._fd, data)
            os.fsync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            raise
        self._size += len(data)

    def _reserve(self, n: int) -> None:
        """Room for `n` more bytes after what the file holds, or the OSError saying why not
        (the file as it was); a file system that cannot reserve space is not asked."""
        try:
            os.posix_fallocate(self._fd, self._size, n)
        except OSError as exc:
            if exc.errno not in FULL:
                return  # (EOPNOTSUPP, EINVAL: some network file systems)
            raise
        except AttributeError:  # no posix_fallocate on this platform
            return
        finally:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass

    def _cannot_write(self, exc: OSError) -> str:
        where = exc.filename or self.path
        n = len(self.records)
        kept = (f"the {n} finished problem{'s are' if n != 1 else ' is'} kept in {self.path}, and rerunning the "
                "same command resumes after them") if n else "nothing was written; rerun the same command"
        when = " once there is free space" if exc.errno in FULL else ""
        return f"cannot write {where} ({exc.strerror}); {kept}{when}"

    # ---- the file kept in place

    def _keep_in_place(self) -> None:
        here = same_file(self.path, self._fd)
        st = os.fstat(self._fd)
        if here and st.st_size == self._size:
            return
        if (here and st.st_size == 0) or (st.st_nlink == 0 and not _exists(self.path)):
            self._write_again("emptied" if here else "deleted")
            return
        raise OutputError(self._displaced(here))

    def _write_again(self, what: str) -> None:
        """The file deleted or emptied by someone else: every record this run holds, written again."""
        try:
            if what == "deleted":
                self.path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    fd = lock_results(self.path, new=True)
                except (FileExistsError, OutputInUse):  # another file came in its place meanwhile
                    raise OutputError(self._displaced(False)) from None
                os.close(self._fd)
                self._fd = fd
            os.ftruncate(self._fd, 0)
            self._size = 0
            self._append(b"".join(encode(r) for r in self.records))
        except OSError as exc:
            raise OutputError(f"{self.path} was {what} while this run wrote it, and writing it again failed "
                              f"({exc.strerror}): its {len(self.records)} results are lost; rerun the same "
                              "command to search them again") from None
        if self._started and self._on_create is not None:
            try:
                self._on_create()  # the provenance may have gone with it
            except OSError as exc:
                raise OutputError(self._cannot_write(exc)) from None
        if self.records:
            log.warning("%s was %s while this run wrote it; written again from the %d results this run holds",
                        self.path, what, len(self.records))

    def _displaced(self, here: bool) -> str:
        """The error for a file moved, replaced or changed by someone else: where this run's
        results are now (where the file went, or a copy saved beside the path)."""
        n = len(self.records)
        if here:
            what = "changed by another program"
        elif _exists(self.path):
            what = "replaced by another file"
        else:
            what = "moved"
            now = _current_name(self._fd)
            there = f"there: move it back to {self.path}" if now is None else f"in {now}: move it to {self.path}"
            return (f"{self.path} was moved while this run wrote it; its {n} results are {there} "
                    "and rerun the same command to resume")
        saved = self.path.with_name(f"{self.path.name.removesuffix('.jsonl')}.saved-{os.getpid()}.jsonl")
        try:
            fd = os.open(saved, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                _write_all(fd, b"".join(encode(r) for r in self.records))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            return (f"{self.path} was {what} while this run wrote it, and saving this run's {n} results to {saved} "
                    f"failed ({exc.strerror}); they are lost, and the file at {self.path} was left as it is")
        return (f"{self.path} was {what} while this run wrote it; this run's {n} results are saved in {saved} "
                f"(the file at {self.path} was left as it is): put them back as {self.path} and rerun the same "
                "command to resume")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _exists(path: Path) -> bool:
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def _current_name(fd: int) -> str | None:
    """Where the file open as `fd` is now (Linux's /proc/self/fd); None if deleted or unknown."""
    try:
        name = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if name.endswith(" (deleted)") or not os.path.exists(name):
        return None
    try:
        if os.path.samefile(name, f"/proc/self/fd/{fd}"):
            return name
    except OSError:
        pass
    return None
