"""Reading a config: YAML files, `key=value` overrides, the ETS and search-and-learn recipes' layouts.

A YAML file may hold the four sections, or put the search keys at the top level, as the
ETS public code's hyperparameter files do (their names are accepted: `select_method`,
`lambdac`, `lambdas`, `fixedwidth`, ...). Overrides are `key=value`, with a dotted section
for the other layers: `width=64 policy.model=tiny:qwen2 data.limit=10`. A file in
search-and-learn's layout (`approach`, `n`, `model_path`, ...) is read by
ets/config/sal_recipes.py.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from ets.config import sal_recipes
from ets.config.checks import ConfigError, did_you_mean, shown, surrogates
from ets.config.model_presets import apply_model_presets
from ets.config.presets import apply_presets
from ets.config.sections import (ETS_KEY_ALIASES, FOLDER_RESULTS_FILE, DataConfig, PolicyConfig, RewardConfig,
                                 RunConfig, SearchConfig)
from ets.config.yaml_input import RefusedYAML, problem, read_yaml


SECTIONS = {"search": SearchConfig, "policy": PolicyConfig, "reward": RewardConfig, "data": DataConfig}
TOP_LEVEL = ("output", "concurrency", "rounds", "save_trees", "torch_threads", "num_threads", "policy_model_type",
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
    return cls(**values)  # each section checks its values' types itself (check_fields)


def _split(raw: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Sort a flat-or-sectioned mapping into per-section dicts and top-level values."""
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    top: dict[str, Any] = {}
    search_keys = {f.name for f in fields(SearchConfig)}
    given: dict[str, str] = {}  # search key -> where it was given (top level, search:, an ETS name)

    def once(field: str | None, written: str) -> None:
        if field in given:
            raise ConfigError(f"{given[field]} and {written} both set the search key {field!r}; keep one")
        given[field] = written

    if isinstance(raw.get("search"), Mapping):
        for key in raw["search"]:
            once(_search_field(["search", key]) or key, f"search.{key}")
    for key, value in raw.items():
        if (field := _search_field([key])) is not None:
            once(field, key)
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
        raise ConfigError(f"override {shown(item)} must look like key=value (e.g. width=32 or policy.model=PATH)")
    key, _, text = item.partition("=")
    try:
        value = read_yaml(text) if text != "" else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {shown(item)}: the value is not valid YAML ({problem(exc, where=False)}); "
                          f"quote it, e.g. {key.strip()}='...'") from None
    return key.strip().split("."), value


# The mappings inside a section that `SECTION.NAME.key=value` sets a key of.
NESTED = {("reward", "options"), ("search", "options"), ("policy", "vllm"), ("policy", "chat_template_kwargs")}


def merge_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`raw` (left as it is) with each `key=value` override set in it."""
    raw = dict(raw)
    for item in overrides:
        path, value = parse_override(item)
        if not (len(path) == 1 or (len(path) == 2 and path[0] in SECTIONS) or (len(path) == 3 and tuple(path[:2]) in NESTED)):
            hint = ""
            if len(path) == 2 and path[1] in TOP_LEVEL:  # e.g. run.torch_threads: the run's keys have no section
                hint = f" ({path[1]} is a top-level key: {path[1]}={item.split('=', 1)[1]})"
            raise ConfigError(f"override {shown(item)}: use key=value or SECTION.key=value with SECTION in "
                              f"{', '.join(SECTIONS)}{hint}")
        for where, form in _other_forms(path):  # a search key set here wins wherever the source had it
            if (isinstance(raw.get(where), Mapping) and form in raw[where]) if where else form in raw:
                if where:
                    raw[where] = {k: v for k, v in raw[where].items() if k != form}
                else:
                    del raw[form]
        _mapping_at(raw, path[:-1], item)[path[-1]] = value
    return raw


def _search_field(path: list[str]) -> str | None:
    """The search key an override or a config's key path sets (`width`, `search.width`,
    the ETS name `lambdac`), as SearchConfig names it; None for any other key."""
    if len(path) == 2 and path[0] == "search":
        name = path[1]
    elif len(path) == 1 and path[0] not in SECTIONS and path[0] not in TOP_LEVEL:
        name = path[0]
    else:
        return None
    name = ETS_KEY_ALIASES.get(name, name)
    return name if name in {f.name for f in fields(SearchConfig)} else None


def _forms(field: str) -> list[tuple[str, str]]:
    """Every place a search key can be written: (section or "", name), aliases included."""
    names = [field, *(alias for alias, canonical in ETS_KEY_ALIASES.items() if canonical == field)]
    return [(where, name) for name in names for where in ("", "search")]


def _other_forms(path: list[str]) -> list[tuple[str, str]]:
    field = _search_field(path)
    if field is None:
        return []
    this = ("search" if len(path) == 2 else "", path[-1])
    return [form for form in _forms(field) if form != this]


def _mapping_at(tree: dict[str, Any], path: list[str], item: str) -> dict[str, Any]:
    """The mapping at `path` in `tree` that override `item` sets a key of: made where
    missing, copied where given (the source's own mappings are left as they are)."""
    for depth, key in enumerate(path):
        node = tree.get(key)
        if node is None:
            node = {}
        elif not isinstance(node, Mapping):
            where = ".".join(path[:depth + 1])
            raise ConfigError(f"override {shown(item)}: {where} is {shown(node)}, not a mapping to set a key in; "
                              f"{where} must be a mapping of keys to values")
        tree[key] = tree = dict(node)
    return tree


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML config (or none: the defaults) and apply `key=value` overrides over it."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        loaded = read_config_file(path)
        if loaded is not None and not isinstance(loaded, Mapping):
            raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys to values")
        raw = dict(loaded or {})
        # Relative data / model paths in a config file are relative to the file.
        _resolve_relative(raw, path.parent)
    return config_from_dict(raw, overrides or [])


def read_config_file(path: Path) -> Any:
    """The YAML value a config file holds; a ConfigError naming the file (and the line)
    for a file that is missing, a folder, unreadable, not UTF-8 or not YAML."""
    name = repr(str(path))
    if path.is_dir():
        raise ConfigError(f"config file {name} is a folder; give the path of a YAML file")
    if not path.is_file():
        raise ConfigError(f"config file {name} does not exist; give the path of a YAML file")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {name} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                          f"{exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"config file {name} cannot be read ({exc.strerror}); give the path of a YAML file "
                          f"you can read") from None
    try:
        return read_yaml(text)
    except RefusedYAML as exc:
        raise ConfigError(f"config file {name}, {problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {name} is not valid YAML: {problem(exc)}") from None


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
    """The config of a mapping (a config file's keys) with `key=value` overrides over it.
    A search key given twice in the mapping (at the top level and in `search:`, or under
    an ETS name as well) is refused; an override wins over the mapping wherever the key
    sits there, and of two overrides of one key the later wins, as on a command line."""
    layers = [dict(raw), merge_overrides({}, list(overrides))]
    sal_layers = sal_recipes.take_keys(layers)  # search-and-learn's keys, out of each source
    mine = [item for item in overrides if not _names_one_of(parse_override(item)[0], sal_layers[1])]
    merged = _normalise(merge_overrides(layers[0], mine))
    if found := surrogates(merged):
        key, bad = found
        raise ConfigError(f"{key}: holds {bad}, UTF-16 surrogates, which are not text (YAML does not join a pair of "
                          "\\u escapes into one character); write the character itself, or its escape of \\U and 8 "
                          "digits (\\U0001F600)")
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
