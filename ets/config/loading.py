"""Reading a config: YAML files, `key=value` overrides, the ETS and search-and-learn recipes' layouts.

A YAML file may hold the four sections, or put the search keys at the top level, as the
ETS public code's hyperparameter files do (their names are accepted: `select_method`,
`lambdac`, `lambdas`, `fixedwidth`, ...). Overrides are `key=value`, with a dotted section
for the other layers: `width=64 policy.model=tiny:qwen2 data.limit=10`. A file in
search-and-learn's layout (`approach`, `n`, `model_path`, ...) is read by
ets/config/sal_recipes.py.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from ets.config import sal_recipes
from ets.config.checks import ConfigError, did_you_mean
from ets.config.model_presets import apply_model_presets
from ets.config.presets import apply_presets
from ets.config.sections import (ETS_KEY_ALIASES, FOLDER_RESULTS_FILE, DataConfig, PolicyConfig, RewardConfig,
                                 RunConfig, SearchConfig)

class _YAMLLoader(yaml.SafeLoader):
    """YAML as a user writes it: `1e-6` is a float, as in YAML 1.2 and Python (PyYAML's
    YAML 1.1 rules read a float without a dot as text)."""


_YAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def read_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YAMLLoader)


SECTIONS = {"search": SearchConfig, "policy": PolicyConfig, "reward": RewardConfig, "data": DataConfig}
TOP_LEVEL = ("output", "concurrency", "save_trees", "torch_threads", "num_threads", "policy_model_type",
             "reward_model_type", "no_effect")
# The output file a recipe's `store_path` (a folder) gets.
STORE_PATH_FILE = FOLDER_RESULTS_FILE


def _build(cls, values: Mapping[str, Any], section: str | None):
    known = {f.name for f in fields(cls)}
    for key in values:
        if key not in known:
            where = f"{section}." if section else ""
            extra = f"; or the ETS names: {', '.join(ETS_KEY_ALIASES)}" if cls is SearchConfig else ""
            hint = did_you_mean(key, known, {k: [where + k] for k in known})
            raise ConfigError(f"unknown key {where + str(key)!r}{hint}; "
                              f"known keys: {', '.join(sorted(known))}{extra}")
    try:
        return cls(**values)
    except TypeError as exc:  # e.g. a list where a number was expected
        raise ConfigError(f"{section or 'config'}: {exc}") from exc


def _split(raw: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Sort a flat-or-sectioned mapping into per-section dicts and top-level values."""
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    top: dict[str, Any] = {}
    search_keys = {f.name for f in fields(SearchConfig)}
    for key, value in raw.items():
        if key in SECTIONS:
            if not isinstance(value, Mapping):
                raise ConfigError(f"section {key!r} must be a mapping of keys to values")
            sections[key].update(value)
        elif key in TOP_LEVEL:
            top[key] = value
        elif key in ETS_KEY_ALIASES:
            sections["search"][ETS_KEY_ALIASES[key]] = value
        elif key in search_keys:
            sections["search"][key] = value
        else:
            # another section's key given without its section (model=...) is suggested with it
            names: dict[str, list[str]] = {}
            for section, cls in SECTIONS.items():
                for f in fields(cls):
                    names.setdefault(f.name, []).append(f"{section}.{f.name}")
            names.update((n, [n]) for n in (*SECTIONS, *TOP_LEVEL, *ETS_KEY_ALIASES, *search_keys,
                                            *sal_recipes.SAL_KEYS))
            hint = sal_recipes.layout_hint(key) or did_you_mean(key, names, names)
            raise ConfigError(
                f"unknown key {key!r}{hint}; use a section ({', '.join(SECTIONS)}), a search key "
                f"({', '.join(sorted(search_keys))}), an ETS key ({', '.join(ETS_KEY_ALIASES)}) "
                f"or {', '.join(TOP_LEVEL)}"
            )
    # ETS aliases are accepted inside the search section too.
    sections["search"] = {ETS_KEY_ALIASES.get(k, k): v for k, v in sections["search"].items()}
    return sections, top


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b=value` -> (['a', 'b'], parsed value); values are parsed as YAML scalars."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key=value (e.g. width=32 or policy.model=PATH)")
    key, _, text = item.partition("=")
    try:
        value = read_yaml(text) if text != "" else ""
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"override {item!r}: the value is not valid YAML ({problem}); "
                          f"quote it, e.g. {key.strip()}='...'") from None
    return key.strip().split("."), value


def merge_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    raw = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    for item in overrides:
        path, value = parse_override(item)
        if len(path) == 1:
            raw[path[0]] = value
        elif len(path) == 2 and path[0] in SECTIONS:
            raw.setdefault(path[0], {})[path[1]] = value
        elif len(path) == 3 and path[0] == "reward" and path[1] == "options":
            raw.setdefault("reward", {}).setdefault("options", {})[path[2]] = value
        elif len(path) == 3 and path[0] == "policy" and path[1] in ("vllm", "chat_template_kwargs"):
            raw.setdefault("policy", {}).setdefault(path[1], {})[path[2]] = value
        else:
            raise ConfigError(f"override {item!r}: use key=value or SECTION.key=value with SECTION in {', '.join(SECTIONS)}")
    return raw


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML config (or none: the defaults) and apply `key=value` overrides over it."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist; pass --config with a YAML file")
        try:
            loaded = read_yaml(path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, Mapping):
            raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys to values")
        raw = dict(loaded or {})
        # Relative data / model paths in a config file are relative to the file.
        _resolve_relative(raw, path.parent)
    return config_from_dict(raw, overrides or [])


def _resolve_relative(raw: dict[str, Any], base: Path) -> None:
    def resolved(value: Any) -> Any:
        if isinstance(value, str) and value.startswith(("./", "../")):
            return str((base / value).resolve())
        return value

    for section, key in (("data", "path"), ("policy", "model"), ("reward", "model")):
        if isinstance(raw.get(section), Mapping) and key in raw[section]:
            raw[section] = {**raw[section], key: resolved(raw[section][key])}
    for key in ("model_path", "prm_path"):  # search-and-learn's names for the two models
        if key in raw:
            raw[key] = resolved(raw[key])


def config_from_dict(raw: Mapping[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """The config of a mapping (a config file's keys) with `key=value` overrides over it."""
    layers = [dict(raw), merge_overrides({}, list(overrides))]
    sal_layers = sal_recipes.take_keys(layers)  # search-and-learn's keys, out of each source
    mine = [item for item in overrides if not _names_one_of(parse_override(item)[0], sal_layers[1])]
    merged = _normalise(merge_overrides(layers[0], mine))
    if any(sal_layers):
        sal_recipes.apply(sal_layers, [_normalise(layer) for layer in layers], merged)
    sections = {name: merged.pop(name) for name in SECTIONS}
    apply_presets(sections, merged)
    apply_model_presets(sections)
    built = {name: _build(cls, sections[name], name) for name, cls in SECTIONS.items()}
    return RunConfig(**built, **merged)


def _names_one_of(path: list[str], keys: Mapping[str, Any]) -> bool:
    return len(path) == 1 and path[0] in keys


def _normalise(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A flat-or-sectioned mapping as its four sections (every one present) and top-level
    keys, in one dict; `store_path` as the `output` it means."""
    raw = dict(raw)
    store_path = raw.pop("store_path", None)
    sections, top = _split(raw)
    if store_path is not None:
        if not isinstance(store_path, str) or not store_path.strip():
            raise ConfigError(f"store_path: {store_path!r} must be a folder path (the ETS code's results folder)")
        top.setdefault("output", str(Path(store_path) / STORE_PATH_FILE))  # an explicit `output` wins
    return {**top, **sections}
