"""Reward models by name: built-ins, `module:attr`, and the `ets.rewards` entry-point group.

`build_reward(reward_config, policy_config, engine)` resolves `reward_config.name`, in order:
1. a name given to `register_reward` in this process;
2. a built-in (imported lazily, so a built-in whose file is missing only fails when used);
3. `module:attr`: a function, a `ProcessRewardModel` subclass, or an instance;
4. an entry point of the group `ets.rewards` of an installed package:
       [project.entry-points."ets.rewards"]
       my_prm = "my_package.prm:MyPRM"
Anything else raises `ConfigError` listing the known names. A plug-in's module that fails
to import (a missing dependency, a syntax error, anything its top level raises) is a
one-line `PluginError` naming the module, what it raised and where (rewards/plugin_faults.py).

What the name resolves to decides how it is built:
- a class with `Options` (a dataclass) and `from_config(options, ctx)` is a built-in-style
  reward: its options are validated against `Options`, and it gets a `RewardContext`
  (model path, device, dtype, engine);
- anything else is a user plug-in (see rewards/plugin.py): options become keyword arguments.
"""

from __future__ import annotations

import inspect
import logging
from importlib import metadata
from typing import Any

from ets.config import ConfigError, PolicyConfig, RewardConfig
from ets.config.checks import did_you_mean
from ets.rewards.base import ProcessRewardModel
from ets.rewards.options import RewardContext, parse_options
from ets.rewards.plugin import WHEN_BUILT_ADVICE, check_plugin, guard_scoring, make_plugin
from ets.plugins import import_object
from ets.rewards.plugin_faults import REWARD, guarded, is_project_module, module_of

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "ets.rewards"

BUILTINS: dict[str, str] = {
    "step_tag": "ets.rewards.step_tag:StepTagPRM",
    "token_classification": "ets.rewards.token_classification:TokenClassificationPRM",
    "value_head": "ets.rewards.value_head:ValueHeadPRM",
    "chat_judgement": "ets.rewards.chat_judgement:ChatJudgementPRM",
    "verifier": "ets.rewards.verifier:Verifier",
}

_registered: dict[str, Any] = {}
_warned_unread_model: set[tuple[str, str]] = set()


def register_reward(name: str, obj: Any) -> None:
    """Make `name` resolve to `obj` (a class, a function, or a `module:attr` string). A
    built-in's name is refused: a config that says `step_tag` must run step_tag. Registering
    a name again replaces what it named."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"reward name {name!r}: give a non-empty string")
    if ":" in name:
        raise ValueError(f"reward name {name!r} must not contain ':' (that form means module:attr)")
    if name in BUILTINS:
        raise ValueError(f"reward name {name!r} is a built-in reward's; register yours under another name")
    if not (isinstance(obj, str) or callable(obj)):
        raise ValueError(f"register_reward({name!r}, ...): a {type(obj).__name__} is no reward; give a "
                         "ProcessRewardModel subclass or instance, a function, or a 'module:attr' string")
    _registered[name] = obj


def known_rewards() -> list[str]:
    """Every name `build_reward` accepts without `module:attr`."""
    names = dict.fromkeys([*_registered, *BUILTINS, *(ep.name for ep in _entry_points())])
    return list(names)


def resolve_reward(name: str) -> Any:
    """The object `name` stands for (not yet built)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"reward.name must be a non-empty string; known rewards: {', '.join(known_rewards())}")
    if name in _registered:
        obj = _registered[name]
        return import_attr(obj, name) if isinstance(obj, str) else obj
    if name in BUILTINS:
        return import_attr(BUILTINS[name], name)
    if ":" in name:
        return import_attr(name, name)
    for ep in _entry_points():
        if ep.name == name:
            return import_attr(ep.value, name)
    raise ConfigError(
        f"unknown reward {name!r}{did_you_mean(name, known_rewards())}; "
        f"known rewards: {', '.join(known_rewards())}; "
        "or give a Python object as module:attr (a function or a ProcessRewardModel subclass)"
    )


def check_reward(reward: RewardConfig, policy_model: str | None = None) -> Any:
    """What `reward.name` resolves to, its options checked (a built-in's against its
    Options, a plug-in's against its signature) before any model loads: a typo there would
    otherwise cost a policy's loading first (`ets run`, `ets.search`, `--check`). A reward
    that reads a trained head is refused a `tiny:` model (reward.model, else
    `policy_model`, which it would load)."""
    obj = resolve_reward(reward.name)
    if hasattr(obj, "Options") and hasattr(obj, "from_config"):
        check_trained_model(obj, parse_options(obj.Options, reward.options, reward.name), reward, policy_model)
    else:
        check_plugin(obj, plugin_options(obj, reward), reward.name)
    return obj


def plugin_options(obj: Any, reward: RewardConfig) -> dict[str, Any]:
    """A plug-in's keyword arguments: `reward.options`, and `reward.model` as `model` where
    the plug-in takes one (a plug-in that loads a model of its own); where it takes none, a
    warning says that reward.model goes unread."""
    options = dict(reward.options or {})
    if reward.model is None or "model" in options:
        return options
    if not isinstance(obj, ProcessRewardModel) and _takes_keyword(obj, "model"):
        return {**options, "model": reward.model}
    what = ("is an already-built instance" if isinstance(obj, ProcessRewardModel) else
            f"takes no `model` argument (give its {'constructor' if isinstance(obj, type) else 'function'} one to "
            "receive it)")
    if (reward.name, reward.model) not in _warned_unread_model:  # (checked, then built: said once)
        _warned_unread_model.add((reward.name, reward.model))
        log.warning("reward.model (%r) goes unread: reward %r %s", reward.model, reward.name, what)
    return options


def _takes_keyword(fn: Any, key: str) -> bool:
    """Whether `fn` names the parameter `key` (a `**options` catch-all does not: a function
    written for its options alone is not handed a model it never asked for)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False  # no signature to read
    return any(p.name == key and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)


def check_reward_tokenizer(obj: Any, reward: RewardConfig, policy_model: str | None) -> str | None:
    """`ets run --check`: what a built-in (`obj`, as `check_reward` resolved it) checks of
    its tokenizer before its weights load (`check_tokenizer`: its tag, tokens or marker each
    one token, a chat template where it needs one), run on its model's tokenizer
    (reward.model, else the policy's) alone. A note, not an error, where that tokenizer
    cannot be loaded here (a hub name offline)."""
    from ets.models.load import ModelLoadError, load_tokenizer

    check, model = getattr(obj, "check_tokenizer", None), reward.model or policy_model
    if check is None or not model or not hasattr(obj, "Options"):
        return None
    options = parse_options(obj.Options, reward.options, reward.name)
    try:
        tokenizer = load_tokenizer(model)
    except (OSError, ValueError, ModelLoadError) as exc:
        return (f"reward {reward.name!r}: its tokens are checked when it loads (the tokenizer of {model!r} could not "
                f"be loaded here: {str(exc).splitlines()[0][:120]})")
    check(tokenizer, options, reward.name)
    return None


def check_trained_model(obj: Any, options: Any, reward: RewardConfig, policy_model: str | None) -> None:
    """A reward that reads a trained head (`reads_trained_head(options)`) given a random
    `tiny:` model (reward.model, else the policy's, which it would load) is refused in one line."""
    model = reward.model or policy_model
    reads = getattr(obj, "reads_trained_head", None)
    if reads is not None and reads(options) and model and model.startswith("tiny:"):
        where = "reward.model" if reward.model else "reward.model is unset, so the policy's model"
        raise ConfigError(f"reward {reward.name!r} reads a trained PRM's head, and {model!r} ({where}) is a "
                          f"random test model with none; set reward.model to a {reward.name} PRM's folder or "
                          "hub name, or use reward.name=step_tag, which runs on a tiny: model")


def plugin_module(name: str) -> str | None:
    """The module a reward that is not the project's own is defined in, found without
    importing it (for the run's provenance: its source is fingerprinted); None for a
    built-in or a name that names nothing."""
    obj = _registered.get(name)
    if obj is not None and not isinstance(obj, str):
        module = module_of(obj)
    else:
        spec = obj or BUILTINS.get(name) or (name if ":" in name else None)
        if spec is None:
            spec = next((ep.value for ep in _entry_points() if ep.name == name), None)
        module = spec.partition(":")[0] if spec else None
    return None if not module or is_project_module(module) else module


def build_reward(
    reward_config: RewardConfig,
    policy_config: PolicyConfig | None = None,
    engine: Any = None,
) -> ProcessRewardModel:
    """The reward model `reward_config` names, ready to score.

    `engine` is the policy's engine, if any. It reaches a reward's `RewardContext` only when
    the reward scores with the policy's own model; `step_tag` uses it only when asked
    (`share_policy_engine`), and otherwise builds its own engine with its own KV pool.
    """
    name = reward_config.name
    obj = resolve_reward(name)
    if hasattr(obj, "Options") and hasattr(obj, "from_config"):
        options = parse_options(obj.Options, reward_config.options, name)
        check_trained_model(obj, options, reward_config, policy_config.model if policy_config else None)
        context = _context(reward_config, policy_config, engine)
        module = module_of(obj)
        if is_project_module(module):
            built = obj.from_config(options, context)
        else:  # a built-in-style reward from another package: a plug-in, guarded as one
            built = guard_scoring(guarded(obj.from_config, name, module, "building it", WHEN_BUILT_ADVICE)(
                options, context), name, module)
        settle_memory(context.memory)
        return built
    built = make_plugin(obj, plugin_options(obj, reward_config), name)
    settle_memory(getattr(engine, "memory", None))
    return built


def settle_memory(plan) -> None:
    """Size the KV pools of the device's plan now that both models are loaded (a pool too
    small to hold a token is a config error here, not a failure in the first search)."""
    if plan is None:
        return
    from ets.engine.pool import PoolTooLarge

    try:
        plan.resolve()
    except PoolTooLarge as exc:
        raise ConfigError(f"policy.memory_fraction: {exc}") from None


def _context(reward_config: RewardConfig, policy_config: PolicyConfig | None, engine: Any) -> RewardContext:
    if policy_config is None:  # no policy: the reward's own model, default device and dtype
        return RewardContext(name=reward_config.name, model=reward_config.model)
    policy = policy_config
    shares_policy_model = reward_config.model in (None, policy.model)
    return RewardContext(
        name=reward_config.name,
        model=reward_config.model or policy.model,
        device=policy.device,
        dtype=policy.dtype,
        engine=engine if shares_policy_model else None,
        use_engine=policy.backend == "engine",
        memory=getattr(engine, "memory", None),
        memory_fraction=policy.memory_fraction,
        prepack=reward_prepack(policy.prepack),
    )


def reward_prepack(policy_prepack: str) -> str:
    """A PRM's own engine's `prepack`: off when the policy's is, else auto (where its own
    device and dtype allow: a PRM in float16 stays on torch's linears under `on`)."""
    return "off" if policy_prepack == "off" else "auto"


def import_attr(spec: str, name: str) -> Any:
    """`package.module:attr.sub` -> the object; errors name the reward and what failed."""
    return import_object(spec, REWARD, name, known_rewards)


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))
