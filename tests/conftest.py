"""Test-session settings.

Tiny models run only small ops. With 2 OpenMP threads on a 2-core machine shared with
other work, an op can wait on a descheduled thread (measured 10x slower); one thread is
fast and steady, so the whole suite runs single-threaded.
"""

import torch

torch.set_num_threads(1)
