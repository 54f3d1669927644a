"""ets: tree-search test-time compute over a prefix-sharing KV cache.

    import ets
    results = ets.search(problems, policy=policy, reward=reward, config=ets.SearchConfig(method="ets"))

Heavy parts (models, the controller) load on first use, so `import ets` stays cheap.

`ets.search` is also the package of the selection strategies (`ets.search.build`,
`ets.search.beam`, ...), beside the reward models `ets.rewards` and the ETS program `ets.lp`:
calling the package runs searches.
"""

import sys
import types

from ets import namespace

namespace.install()  # before anything imports ets.search, ets.rewards or ets.lp

from ets.config import ConfigError, RunConfig, SearchConfig, load_config  # noqa: E402

__all__ = ["ConfigError", "RunConfig", "SearchConfig", "load_config", "search", "Problem"]
__version__ = "0.1.0"


def _search(problems, *, policy, reward, config: SearchConfig | None = None, concurrency: int = 8, on_result=None, progress=None):
    """Search every problem (an `ets.data.Problem`, a question string, or a dict with
    `question` and optionally `answer`); one result record per problem, in order.
    See `ets.loop.controller.search`; `ets.loop.SearchLoop(...).run()` also returns the
    run's statistics (`RunStats`). Problems in flight are limited by `concurrency` and by
    the policy's own KV capacity (`policy.memory()`).

    `config` decides the search *and* its sampling: its temperature, top_p, top_k,
    max_step_tokens and seed go with every request to the policy, whatever config the
    policy was built with (a policy that cannot honour them raises). Without `config`, the
    search config the policy was built with (`policy.search`, as `build_policy` and the
    built-in backends keep it), else `SearchConfig()`. A problem's result depends only on
    the config, its seed and the problem, not on the other problems or `concurrency`."""
    from ets.loop.controller import search as search_problems
    from ets.data import as_problem

    if config is None:
        built = getattr(policy, "search", None)
        config = built if isinstance(built, SearchConfig) else SearchConfig()
    items = [as_problem(p, i) for i, p in enumerate(problems)]
    return search_problems(items, policy, reward, config, concurrency=concurrency, on_result=on_result, progress=progress)


class _SearchPackage(types.ModuleType):
    """The strategies package `ets.search`, callable as `ets.search(problems, ...)`: the
    function and the package share the name, so calling the package runs searches."""

    def __call__(self, problems, *, policy, reward, config: SearchConfig | None = None, concurrency: int = 8,
                 on_result=None, progress=None):
        return _search(problems, policy=policy, reward=reward, config=config, concurrency=concurrency,
                       on_result=on_result, progress=progress)

    __call__.__doc__ = _search.__doc__


class _Ets(types.ModuleType):
    """The module `ets`. The import system sets `ets.search` to the strategies package when
    that is imported, by whichever import: the package becomes callable right then."""

    def __setattr__(self, name, value):
        if name == "search" and type(value) is types.ModuleType:
            value.__class__ = _SearchPackage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Ets


def __getattr__(name: str):
    if name in namespace.MOVED:  # ets.search, ets.rewards, ets.lp, imported on first use
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name == "Problem":
        from ets.data import Problem

        return Problem
    raise AttributeError(f"module 'ets' has no attribute {name!r}")
