"""SIGTERM (a scheduler's, `timeout`'s, `kill`'s) stops a command as Ctrl-C does.

Python's default for SIGTERM ends the process at once: no `finally` runs, so an output
opened but not yet written stays behind as an empty file, and a run's lock and workers
are left to the operating system. With `stop_on_sigterm()`, SIGTERM raises `Terminated`
(a KeyboardInterrupt) where the main thread is, and the command unwinds as it does on
Ctrl-C: each open output closed (one holding nothing removed), workers ended, the
finished problems kept for a rerun to resume after.
"""

from __future__ import annotations

import signal
import threading


class Terminated(KeyboardInterrupt):
    """Raised by SIGTERM once `stop_on_sigterm()` is installed."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def stop_on_sigterm() -> None:
    """SIGTERM raises `Terminated` in this process's main thread (where signals go; from
    another thread this does nothing)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
