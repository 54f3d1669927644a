"""SIGTERM (a scheduler's, `timeout`'s, `kill`'s) stops a command as Ctrl-C does.

Python's default for SIGTERM ends the process at once: no `finally` runs, so an output
opened but not yet written stays behind as an empty file, and a run's lock and workers
are left to the operating system. With `stop_on_sigterm()`, SIGTERM raises `Terminated`
(a KeyboardInterrupt) where the main thread is, and the command unwinds as it does on
Ctrl-C: each open output closed (one holding nothing removed), workers ended, the
finished problems kept for a rerun to resume after.

The process still ends if the exception does not end it: code that catches every
exception (a library's, during an import) can swallow it, and unwinding can hang. So the
first SIGTERM also starts a timer that exits with 143 after `STOP_GRACE_SECONDS`, and a
second SIGTERM exits at once, except in a worker process (`stop_on_sigterm(worker=True)`):
a scheduler's SIGTERM to a process group reaches the workers and their driver at once,
and the driver's SIGTERM, or its process pool's, then comes second, while the worker is
still closing its output. A worker that is stopping lets them pass; its driver ends it
if it takes too long. A worker between jobs (`between_jobs`) ends at once.
"""

from __future__ import annotations

import os
import signal
import threading

STOP_GRACE_SECONDS = 60.0
EXIT_CODE = 143  # 128 + SIGTERM, as a shell reports a process it ended

_stopping = threading.Event()
_repeat_exits = True
# A worker waiting for its next job: SIGTERM ends it at once, as it has nothing to unwind
# (raised in its process pool's wait for work, the exception printed that wait's traceback)
_between_jobs = threading.Event()


class Terminated(KeyboardInterrupt):
    """Raised by SIGTERM once `stop_on_sigterm()` is installed."""


def _raise_terminated(signum, frame) -> None:
    if _between_jobs.is_set():
        os._exit(EXIT_CODE)
    if _stopping.is_set():
        if _repeat_exits:
            os._exit(EXIT_CODE)
        return
    _stopping.set()
    timer = threading.Timer(STOP_GRACE_SECONDS, os._exit, args=(EXIT_CODE,))
    timer.daemon = True
    timer.start()
    raise Terminated()


def between_jobs(waiting: bool) -> None:
    """Say that this worker process waits for its next job (True) or runs one (False)."""
    if waiting:
        _between_jobs.set()
    else:
        _between_jobs.clear()


def terminated() -> bool:
    """Whether SIGTERM has asked this process to stop: a library that catches the stop and
    raises a KeyboardInterrupt of its own (Ray's `ray.get` does) loses `Terminated`'s type."""
    return _stopping.is_set()


def stop_on_sigterm(worker: bool = False) -> None:
    """SIGTERM raises `Terminated` in this process's main thread (where signals go; from
    another thread this does nothing). `worker`: a second SIGTERM does not end it at once
    (the module doc)."""
    global _repeat_exits
    if threading.current_thread() is threading.main_thread():
        _repeat_exits = not worker
        signal.signal(signal.SIGTERM, _raise_terminated)
