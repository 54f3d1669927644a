"""What loading a model prints: nothing, unless asked for.

transformers draws a "Loading weights" bar for every model it loads and warns about what
it found in the folder; the hub draws bars as it fetches files. Under a run's progress bar
(or a sweep's, while its worker processes load their models) each of those cuts the bar
apart, and none of it is news once the models load: errors still show, and a model that
cannot be loaded is an error of its own (ets/models/load.py). This module imports
neither torch nor a model.
"""

from __future__ import annotations

import logging


def quiet_model_loading(quiet: bool = True) -> None:
    """With `quiet`, transformers logs errors alone and draws no bars, and the hub draws
    none; without it (`--log-level DEBUG`), both say everything."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        hf_logging = None
    if hf_logging is not None:
        hf_logging.set_verbosity(logging.ERROR if quiet else logging.DEBUG)
        hf_logging.disable_progress_bar() if quiet else hf_logging.enable_progress_bar()
    try:
        from huggingface_hub.utils import disable_progress_bars, enable_progress_bars
    except ImportError:
        return
    disable_progress_bars() if quiet else enable_progress_bars()
    # The hub's logger has a stderr handler of its own and passes its records on to the
    # root's too: each retry of an unreachable hub would print twice. The root's handler
    # (the command's) is the one kept.
    hub = logging.getLogger("huggingface_hub")
    for handler in list(hub.handlers):
        if isinstance(handler, logging.StreamHandler) and hub.propagate and logging.getLogger().handlers:
            hub.removeHandler(handler)
