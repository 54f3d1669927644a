"""Plug-in rewards (`reward.name=tests.fault_rewards:<name>`, `reward.model=null`) for the
tests of a run's results file: one does to the file what a user or another program might
while the run writes it, one is slow, so that a second process can be started beside a
live run, one breaks the reward interface mid-run. They score every step 0.5."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

_done: set[str] = set()   # files already acted on in this process


def _scores(trajectories):
    return [[[0.5] * len(steps) for steps in trajs] for trajs in trajectories]


def vandal(questions, trajectories, path: str, after: int = 3, how: str = "delete"):
    """Once the results file `path` holds `after` lines, and only once: delete it (`delete`),
    its folder (`folder`), empty it (`empty`), move it to `<path>.moved` (`move`), or put
    another file in its place (`replace`)."""
    p = Path(path)
    if str(p) not in _done and p.exists() and p.read_bytes().count(b"\n") >= after:
        _done.add(str(p))
        if how == "delete":
            p.unlink()
        elif how == "folder":
            shutil.rmtree(p.parent)
        elif how == "empty":
            p.write_bytes(b"")
        elif how == "move":
            os.rename(p, f"{p}.moved")
        elif how == "replace":
            p.with_name("other").write_text('{"id": "someone else\'s"}\n')
            os.rename(p.with_name("other"), p)
        else:
            raise ValueError(how)
    return _scores(trajectories)


def slow(questions, trajectories, seconds: float = 0.3):
    time.sleep(seconds)
    return _scores(trajectories)


def short(questions, trajectories):
    """One score too few for the first trajectory: a `RewardError` in the first round."""
    scores = _scores(trajectories)
    scores[0][0] = scores[0][0][:-1]
    return scores
