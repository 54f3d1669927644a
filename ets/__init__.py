"""ets: tree-search test-time compute over a prefix-sharing KV cache.

    import ets
    records = ets.search("configs/tiny.yaml")                  # everything from the config
    records = ets.search("configs/tiny.yaml", ["What is 2 + 3?"], overrides=["method=ets"])
    records = ets.search_with(problems, policy, reward, ets.SearchConfig(method="ets"))

`ets.load_config`, `ets.build_policy`, `ets.build_reward` and `ets.load_problems` build the
parts one at a time from a config (ets/api.py). Besides `ets.ConfigError` and
`ets.DataError`, a search raises `ets.ModelLoadError` (a model that cannot be loaded),
`ets.PluginError` (a plug-in's fault) and `ets.RewardError` (scores that break the reward
interface). Heavy parts (models, the controller) load
on first use, so `import ets` stays cheap.
"""

from ets import namespace

namespace.install()  # before anything imports ets.strategies, ets.rewards or ets.lp

from ets.config import ConfigError, RunConfig, SearchConfig  # noqa: E402

__all__ = [
    "ConfigError", "DataError", "ModelLoadError", "PluginError", "Problem", "RewardError", "RunConfig", "SearchConfig",
    "apply_torch_threads", "build_policy", "build_reward", "load_config", "load_problems", "search", "search_with",
]
__version__ = "0.1.0"

# name -> the module that defines it, imported on first use
_LAZY = {
    "Problem": "ets.data", "DataError": "ets.data", "ModelLoadError": "ets.models.load",
    # what a search raises besides ConfigError and DataError: a plug-in's fault (a reward's
    # or a strategy's), a reward's scores that break the interface
    "PluginError": "ets.plugins", "RewardError": "ets.rewards.base",
    **dict.fromkeys(("apply_torch_threads", "build_policy", "build_reward", "load_config", "load_problems", "search",
                     "search_with"), "ets.api"),
}


def __getattr__(name: str):
    import importlib

    if name in namespace.MOVED:  # ets.strategies, ets.rewards, ets.lp: imported on first use
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
