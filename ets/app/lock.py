"""One writer per output: an exclusive `flock` on the results file itself.

    fd = lock_results(Path("runs/r.jsonl"))  # open read-write (made if missing), locked
    ...                                       # no other ets process writes runs/r.jsonl meanwhile

The lock is on the file the results go to, not on a file beside it: there is no lock file
to delete, so a second run cannot be let in beside a live one by removing one. The kernel
drops a `flock` when its process dies, however it dies, so a killed run never blocks the
next one. An output left empty is removed when its writer closes it (ets/app/writer.py);
a process that opened the file just before that locks a file no longer at the path, so
after locking, the file at the path is checked to be the one locked, and if not, opened
again.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

from ets.config import ConfigError


class OutputInUse(ConfigError):
    """Another process holds the output's lock."""


def lock_results(path: Path, *, new: bool = False) -> int:
    """A file descriptor of `path`, opened for reading and appending (the file made if
    missing; with `new`, made or FileExistsError) and exclusively locked; raises
    OutputInUse naming the holder if another process has it. O_NONBLOCK: a FIFO put at
    the path is refused, never waited on."""
    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_EXCL if new else 0)
    while True:
        fd = os.open(path, flags, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ConfigError(f"output {str(path)!r} is not a regular file; give a file path ending in .jsonl")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                holder = holder_pid(fd)
                who = f"process {holder}" if holder else "another process"
                raise OutputInUse(f"{path} is being written by {who}; wait for it to finish, "
                                  "or write to another output") from None
            if same_file(path, fd):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder removed it after this process opened it: open the path again


def same_file(path: Path, fd: int) -> bool:
    """Whether `path` names the file open as `fd` (not removed, moved or replaced since)."""
    try:
        here = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    there = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def holder_pid(fd: int) -> int | None:
    """The process holding a `flock` on the file of `fd`, from Linux's /proc/locks (None
    where there is no such file or it does not say)."""
    st = os.fstat(fd)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 24986 fe:00:2180091 0 EOF"; waiters have "->" after the number
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4].isdigit():
            return int(fields[4]) or None
    return None
