"""Test-session settings.

Tiny models run only small ops. With 2 OpenMP threads on a 2-core machine shared with
other work, an op can wait on a descheduled thread (measured 10x slower); one thread is
fast and steady, so the whole suite runs single-threaded.

Derived artefacts (static embedders distilled on first use, lp/clustering.py) go to one
folder per test session under pytest's temporary root, never to the user's ~/.cache/ets.
"""

import os

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def ets_cache_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ets-cache")
    before = os.environ.get("ETS_CACHE_DIR")
    os.environ["ETS_CACHE_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("ETS_CACHE_DIR", None)
    else:
        os.environ["ETS_CACHE_DIR"] = before
