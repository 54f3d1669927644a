"""The Python API: a whole search from a config in one call, and each part it builds.

    import ets

    records = ets.search("configs/tiny.yaml")                          # the config's own problems
    records = ets.search("configs/tiny.yaml", ["What is 2 + 3?"], overrides=["method=beam", "width=8"])
    records = ets.search({"method": "ets", "policy": {"model": "tiny:llama"}}, problems)

    config = ets.load_config("configs/tiny.yaml", ["width=8"])          # a RunConfig
    policy = ets.build_policy(config)                                  # load the models once,
    reward = ets.build_reward(config, policy)
    records = ets.search(config, problems, policy=policy, reward=reward)   # ... search often

    records = ets.search_with(problems, policy, reward, ets.SearchConfig(method="ets"))

A config is what `ets run --config` reads: a YAML file's path, the same keys as a dict, or
a `RunConfig`; `overrides` are `ets run`'s `key=value` arguments. `ets run` builds its
policy, reward and problems with these same functions (ets/app/run.py), and sets torch's
threads from the config's `torch_threads` as `search` does: on small models one thread
can be ten times faster than the default of one per core.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ets.config import ConfigError, RunConfig, SearchConfig, config_from_dict
from ets.config import load_config as _load_yaml
from ets.data import Problem, as_problems
from ets.policy.base import Policy

log = logging.getLogger(__name__)

ProblemLike = Problem | str | Mapping[str, Any]
ConfigLike = str | Path | Mapping[str, Any] | RunConfig


def load_config(config: ConfigLike | None = None, overrides: Sequence[str] = ()) -> RunConfig:
    """The `RunConfig` of a YAML file's path (its `data.path`, `policy.model` and
    `reward.model` written from `./` or `../` are relative to the file, every other path
    to the working folder), of a dict with the same keys (every path relative to the
    working folder), or a `RunConfig` itself; `overrides` are `key=value` strings set over it, as
    `ets run` takes them (`width=8`, `policy.model=tiny:qwen2`, `search.options.k=2`).
    None: the defaults."""
    overrides = _override_list(overrides)
    if isinstance(config, RunConfig):
        return config_from_dict(config.to_dict(), list(overrides)) if overrides else config
    if isinstance(config, SearchConfig):
        raise ConfigError("a SearchConfig holds the search alone; give a whole config (a YAML path, a dict or a "
                          "RunConfig), or search a policy and reward you built with "
                          "ets.search_with(problems, policy, reward, search_config)")
    if isinstance(config, Mapping):
        return config_from_dict(config, list(overrides))
    if config is None or isinstance(config, (str, Path)):
        return _load_yaml(config, list(overrides))
    raise ConfigError(f"config: expected a YAML file's path, a dict or a RunConfig, got {type(config).__name__}; "
                      "the problems come second (ets.search(config, problems)), and problems searched with a "
                      "policy and reward you built go to ets.search_with(problems, policy, reward, search_config)")


def _override_list(overrides: Sequence[str]) -> list[str]:
    """`overrides` as the list of `key=value` strings it must be (one string alone would be
    read character by character)."""
    if isinstance(overrides, str):
        raise ConfigError(f"overrides: give a list of key=value strings, e.g. [{overrides!r}], not one string")
    items = list(overrides)
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"overrides: {item!r} is not a key=value string (e.g. 'width=8')")
    return items


def _as_reward(reward: Any) -> Any:
    """A reward given as an object, made what a reward named in a config is: a user's
    `ProcessRewardModel` instance or function f(questions, trajectories) -> scores is
    checked now (a function's signature) and scores guarded, so that what it raises is the
    one-line `PluginError` naming it, and its errors name it by its class or function. A
    built-in (as `build_reward` made it) is used as it is; None stays None (the config's
    reward is built). What is no reward is refused here, not at its first call, deep in
    the search."""
    from ets.plugins import is_project_module, module_of
    from ets.rewards.base import ProcessRewardModel
    from ets.rewards.plugin import make_plugin

    if reward is None:
        return None
    if isinstance(reward, type):
        raise ConfigError(f"reward: {reward.__name__} is a class; pass an instance ({reward.__name__}(...)) or a "
                          "function, or name it in a config (reward.name: module:Class) to have it built")
    if isinstance(reward, str):
        raise ConfigError(f"reward: {reward!r} is a name; names go in the config (reward.name, or "
                          f"overrides=['reward.name={reward}']), the reward argument takes a reward object")
    if isinstance(reward, ProcessRewardModel):
        if is_project_module(module_of(reward)):
            return reward
        named = reward.name if reward.name != ProcessRewardModel.name else type(reward).__name__
        return make_plugin(reward, None, named)
    if callable(getattr(reward, "score", None)):
        raise ConfigError(f"reward: {type(reward).__name__} has a score method but is not a ProcessRewardModel; "
                          f"subclass it (class {type(reward).__name__}(ets.rewards.ProcessRewardModel))")
    if callable(reward):
        return make_plugin(reward, None, getattr(reward, "__name__", type(reward).__name__))
    raise ConfigError(f"reward: a {type(reward).__name__} is not a reward; pass a ProcessRewardModel instance or a "
                      "function f(questions, trajectories) -> scores[q][t][s]")


def _warn_unread_overrides(overrides: Sequence[str], policy: Any, reward: Any) -> None:
    """Overrides of the policy's or the reward's keys reach only what the config builds: a
    policy or reward passed in is used as it was built."""
    for given, section in ((policy, "policy"), (reward, "reward")):
        unread = [o.partition("=")[0] for o in overrides if o.startswith(f"{section}.")]
        if given is not None and unread:
            log.warning("%s: the %s passed in is used as it was built; to apply them, build it from the config "
                        "with these overrides (ets.build_%s)", ", ".join(unread), section, section)


def apply_torch_threads(config: RunConfig) -> None:
    """torch's intra-op threads as the config's `torch_threads` says (None: torch's own
    default, one per core). Process-wide, as torch has it."""
    if config.torch_threads is not None:
        import torch

        torch.set_num_threads(config.torch_threads)


def build_policy(config: ConfigLike) -> Policy:
    """The policy the config's `policy` section names (engine, hf or vllm backend), its
    sampling defaults from the `search` section."""
    from ets.policy.build import build_policy as build_backend

    config = load_config(config)
    return build_backend(config.policy, config.search)


def build_reward(config: ConfigLike, policy: Policy | None = None):
    """The reward model the config's `reward` section names (a built-in, `module:attr`, or
    an entry point; rewards/registry.py). `policy`'s engine is offered to a PRM that shares
    the policy's weights when asked to (step_tag's `share_policy_engine`); by default a PRM
    keeps its own KV pool, so the policy's KV figures count the policy alone."""
    from ets.rewards import build_reward as build_named

    config = load_config(config)
    return build_named(config.reward, config.policy, engine=getattr(policy, "engine", None))


def load_problems(config: ConfigLike) -> list[Problem]:
    """The problems the config's `data` section selects (a JSONL file or a hub dataset,
    sliced by data.start / data.end / data.limit; ets/data.py)."""
    from ets.data import load_problems as load_data

    return load_data(load_config(config).data)


def search(config: ConfigLike, problems: Iterable[ProblemLike] | None = None, *, overrides: Sequence[str] = (),
           policy: Policy | None = None, reward: Any = None, concurrency: int | None = None,
           on_result: Callable[[dict[str, Any]], None] | None = None, progress: Any = None) -> list[dict[str, Any]]:
    """Search with everything the config says; one result record per problem, in order
    (the fields of `ets run`'s output lines: ets/loop/record.py).

    `problems`: None for the config's `data` section, else a list of `ets.Problem`s,
    question strings or dicts with `question` (and `answer` or `ground_truth`, `id`:
    ets.data.as_problem). A problem without an answer is searched
    and graded as unknown (`correct: None`). `policy` and `reward`, when given, are used
    instead of building the config's (build them once with `build_policy` / `build_reward`
    to search many times). `concurrency` defaults to the config's. Nothing is written: `ets
    run` (ets.app.run.run) writes a resumable results file."""
    from ets.strategies import build as build_strategy

    config = load_config(config, overrides)
    _check_arguments("search", concurrency, on_result, progress)
    reward = _as_reward(reward)
    _check_policy("search", policy)
    _warn_unread_overrides(_override_list(overrides), policy, reward)
    strategy = build_strategy(config.search)  # an unknown method or option fails before anything loads
    if reward is None:
        from ets.rewards.registry import check_reward

        check_reward(config.reward, config.policy.model)  # as do the reward's
    apply_torch_threads(config)
    items = load_problems(config) if problems is None else as_problems(problems)
    policy = build_policy(config) if policy is None else policy
    reward = build_reward(config, policy) if reward is None else reward
    return _search(items, policy, reward, config.search, strategy=strategy, save_trees=config.save_trees,
                   in_flight=None if config.rounds == "in_flight" else False,
                   concurrency=config.concurrency if concurrency is None else concurrency,
                   on_result=on_result, progress=progress)


def search_with(problems: Iterable[ProblemLike], policy: Policy, reward: Any, config: SearchConfig | None = None, *,
                concurrency: int = 8, on_result: Callable[[dict[str, Any]], None] | None = None,
                progress: Any = None) -> list[dict[str, Any]]:
    """Search `problems` (as `search` takes them) with a policy and reward already built;
    one result record per problem, in order. Problems in flight are limited by
    `concurrency` and by the policy's own KV capacity (`policy.memory()`).

    `config` decides the search *and* its sampling: its temperature, top_p, top_k,
    max_step_tokens and seed go with every request to the policy, whatever config the
    policy was built with (a policy that cannot honour them raises). Without `config`, the
    search config the policy was built with (`policy.search`, as `build_policy` and the
    built-in backends keep it), else `SearchConfig()`. A problem's result depends only on
    the config, its seed and the problem, not on the other problems or `concurrency`.
    `ets.loop.SearchLoop(...).run()` also returns the run's statistics (`RunStats`)."""
    if isinstance(config, RunConfig):
        raise ConfigError("search_with takes the search's SearchConfig: pass run_config.search (the policy and "
                          "reward are the ones you built), or search with everything a config says: "
                          "ets.search(run_config, problems)")
    if config is not None and not isinstance(config, SearchConfig):
        raise ConfigError(f"search_with's config: expected a SearchConfig, got {type(config).__name__}; "
                          "build one with ets.SearchConfig(method=..., width=...)")
    _check_arguments("search_with", concurrency, on_result, progress)
    reward = _as_reward(reward)
    _check_policy("search_with", policy)
    if config is None:
        built = getattr(policy, "search", None)
        config = built if isinstance(built, SearchConfig) else SearchConfig()
    return _search(as_problems(problems), policy, reward, config, concurrency=concurrency, on_result=on_result,
                   progress=progress)


def _check_arguments(function: str, concurrency: Any, on_result: Any, progress: Any) -> None:
    """A `ConfigError` naming the first argument of `function` that cannot work, before
    anything loads or any problem is searched (else a concurrency of 0 searches nothing
    and returns no records, and a callback that is not one fails after the first problem)."""
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise ConfigError(f"{function}: concurrency={concurrency!r} must be an int >= 1 (searches in flight)")
    if on_result is not None and not callable(on_result):
        raise ConfigError(f"{function}: on_result={on_result!r} must be a function taking each record, or None")
    if progress is not None and not callable(getattr(progress, "update", None)):
        raise ConfigError(f"{function}: progress={progress!r} must have an update(n) method (a tqdm bar), or be None")


def _check_policy(function: str, policy: Any) -> None:
    """A policy given that is none (a path where the built policy belongs, say)."""
    if policy is not None and not isinstance(policy, Policy):
        raise ConfigError(f"{function}: policy={policy!r} is not an ets Policy; build one with "
                          "ets.build_policy(config), or leave it out to build the config's")


def _search(problems: list[Problem], policy: Policy, reward: Any, config: SearchConfig, **loop: Any) -> list[dict[str, Any]]:
    from ets.engine.heap import frozen_loaded
    from ets.loop.controller import SearchLoop

    searcher = SearchLoop(problems, policy, reward, config, **loop)
    # The loaded models out of the cycle collector's way while searching (ets/engine/heap.py).
    with frozen_loaded():
        return searcher.run().records
