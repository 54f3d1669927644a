"""ets: tree-search test-time compute over a prefix-sharing KV cache.

    import ets
    results = ets.search(problems, policy=policy, reward=reward, config=ets.SearchConfig(method="ets"))

Heavy parts (models, the controller) load on first use, so `import ets` stays cheap.
"""

from ets import namespace

namespace.install()  # before anything imports ets.strategies, ets.rewards or ets.lp

from ets.config import ConfigError, RunConfig, SearchConfig, load_config  # noqa: E402

__all__ = ["ConfigError", "RunConfig", "SearchConfig", "load_config", "search", "Problem"]
__version__ = "0.1.0"


def search(problems, *, policy, reward, config: SearchConfig | None = None, concurrency: int = 8, on_result=None, progress=None):
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
    from ets.loop.controller import search as _search
    from ets.data import as_problem

    if config is None:
        built = getattr(policy, "search", None)
        config = built if isinstance(built, SearchConfig) else SearchConfig()
    items = [as_problem(p, i) for i, p in enumerate(problems)]
    return _search(items, policy, reward, config, concurrency=concurrency, on_result=on_result, progress=progress)


def __getattr__(name: str):
    if name in namespace.MOVED:  # ets.strategies, ets.rewards, ets.lp: imported on first use
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name == "Problem":
        from ets.data import Problem

        return Problem
    raise AttributeError(f"module 'ets' has no attribute {name!r}")
