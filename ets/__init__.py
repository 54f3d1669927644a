"""ets: tree-search test-time compute over a prefix-sharing KV cache.

    import ets
    results = ets.search(problems, policy=policy, reward=reward, config=ets.SearchConfig(method="ets"))

Heavy parts (models, the controller) load on first use, so `import ets` stays cheap.
"""

from ets.config import ConfigError, RunConfig, SearchConfig, load_config

__all__ = ["ConfigError", "RunConfig", "SearchConfig", "load_config", "search", "Problem"]
__version__ = "0.1.0"


def search(problems, *, policy, reward, config: SearchConfig | None = None, concurrency: int = 8, on_result=None, progress=None):
    """Search every problem (an `ets.data.Problem`, a question string, or a dict with
    `question` and optionally `answer`); one result record per problem, in order.
    See `ets.loop.controller.search`; `ets.loop.SearchLoop(...).run()` also returns the
    run's statistics (`RunStats`). Problems in flight are limited by `concurrency` and by
    the policy's own KV capacity (`policy.memory()`)."""
    from ets.loop.controller import search as _search
    from ets.data import as_problem

    items = [as_problem(p, i) for i, p in enumerate(problems)]
    return _search(items, policy, reward, config or SearchConfig(), concurrency=concurrency, on_result=on_result, progress=progress)


def __getattr__(name: str):
    if name == "Problem":
        from ets.data import Problem

        return Problem
    raise AttributeError(f"module 'ets' has no attribute {name!r}")
