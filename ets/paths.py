"""What a path names when it is not a regular file, said without opening it.

A results file or a data file must be a regular file: `ets run` reads its output back to
resume it and `ets.data` reads its data whole. A folder, a FIFO or a device given instead
is named as what it is (opening a FIFO to find out would block until a writer comes).
"""

from __future__ import annotations

import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_kind(path: str | Path) -> str | None:
    """'a folder', 'a FIFO (named pipe)', 'a character device', ... for a path that exists
    and is not a regular file (links followed); None for a regular file or nothing there."""
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")
