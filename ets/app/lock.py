"""One writer per output: an exclusive `flock` on `<output>.lock`.

    with OutputLock(Path("runs/r.jsonl.lock"), "runs/r.jsonl"):
        ...   # no other ets process writes runs/r.jsonl meanwhile

The kernel drops a `flock` when its process dies, however it dies, so a lock left by a
killed run never blocks the next one. The file is removed on release; because another
process may have opened it just before, a lock taken on a file that is no longer at the
path (another inode) is dropped and taken again on the new one.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ets.config import ConfigError


class OutputInUse(ConfigError):
    """Another process holds the output's lock."""


class OutputLock:
    def __init__(self, path: Path, output: str | Path):
        self.path = Path(path)
        self.output = output
        self._fd: int | None = None

    def acquire(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip()
                os.close(fd)
                who = f"process {holder}" if holder.isdigit() else "another process"
                raise OutputInUse(
                    f"{self.output} is being written by {who} ({self.path} is locked); "
                    "wait for it to finish, or write to another output"
                ) from None
            try:
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                break
            os.close(fd)  # the previous holder removed this file after we opened it
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink()  # while still holding it: see the module docstring
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "OutputLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
