"""search-and-learn's recipes read as they are: its keys, its defaults, its fixed choices.

huggingface/search-and-learn runs best-of-N, beam search and DVTS from YAML files whose
top-level keys are the fields of its `Config` (src/sal/config.py): `approach`, `n`,
`model_path`, `prm_path`, ... A config with one of the keys only search-and-learn has
(`SAL_ONLY`) at its top level is read in that layout:

- each top-level key of search-and-learn's `Config` means what it means there: `SAL_KEYS`
  gives ours for it (per method where its code reads it per approach), or why it has no
  effect here (the run logs one line for each such key given, `ets run --check` prints
  them; they are kept in `RunConfig.no_effect`);
- the keys a recipe leaves out take search-and-learn's defaults (`SAL_DEFAULTS`), and its
  code's fixed choices apply (`SAL_FIXED`): the bare problem as the user turn of a chat
  template, a step ending at a blank line, a trajectory ending at EOS or a boxed answer;
- ets's own keys may stand beside them (in their sections, or a top-level key of ours
  that search-and-learn does not have). Which wins, for keys that set the same thing:
  the later source (the command line's `key=value` over the file); within one source the
  two must agree, or it is a ConfigError naming both. Defaults and fixed choices give way
  to any key given.

docs/search_and_learn.md is the user's table of the same mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ets.config.checks import ConfigError, check_value, did_you_mean, field_types
from ets.config.model_presets import SAL_SYSTEM_PROMPT
from ets.config.sections import (FOLDER_RESULTS_FILE, METHOD_ALIASES, VLLM_OPTIONS, DataConfig, PolicyConfig,
                                 RewardConfig, RunConfig, SearchConfig)

# search-and-learn's approaches -> our methods
APPROACHES = {"best_of_n": "best_of_n", "beam_search": "beam", "dvts": "dvts"}
OTHER = "*"  # in a per-method target: any method but the named ones (an ets `method` key may name rebase or ets)
# What search-and-learn's DVTS gives each step, whatever `max_tokens` says (its SamplingParams).
DVTS_STEP_TOKENS = 2048


@dataclass(frozen=True)
class SalKey:
    """One key of search-and-learn's Config: ours (a dotted key; `None`: no effect here; a
    dict: per method, `OTHER` for the rest) and, where it has none, why (may name
    {method} and {backend})."""

    to: str | None | Mapping[str, str | None]
    idle: str = ""

    def target(self, method: str) -> str | None:
        if isinstance(self.to, Mapping):
            return self.to.get(method, self.to.get(OTHER))
        return self.to


# Every key of search-and-learn's Config (src/sal/config.py), in its order.
SAL_KEYS: dict[str, SalKey] = {
    "approach": SalKey("search.method"),  # best_of_n, beam_search -> beam, dvts
    "model_path": SalKey("policy.model"),
    "gpu_memory_utilization": SalKey(
        "policy.vllm.gpu_memory_utilization",
        "it sizes vLLM's share of the GPU; policy.backend is {backend}, which reads no such setting"),
    "prm_path": SalKey("reward.model"),
    "output_dir": SalKey("output"),  # a folder: output = <output_dir>/results.jsonl
    "num_proc": SalKey(None, "it set the processes of search-and-learn's scoring pass; answers are graded as each "
                             "problem finishes"),
    "push_to_hub": SalKey(None, "nothing is pushed: results are written to the output file"),
    "hub_dataset_id": SalKey(None, "nothing is pushed: results are written to the output file"),
    "hub_dataset_private": SalKey(None, "nothing is pushed: results are written to the output file"),
    "overwrite_hub_revision": SalKey(None, "nothing is pushed; an output made by another config is refused "
                                           "unless --overwrite"),
    "apply_voting": SalKey(None, "search-and-learn declares it and reads it nowhere; search.vote chooses the answer"),
    "dataset_name": SalKey("data.hf_name"),
    "dataset_config": SalKey(None, "search-and-learn declares it and reads it nowhere (its dataset is loaded by "
                                   "name and split)"),
    "dataset_split": SalKey("data.hf_split"),
    "dataset_start": SalKey("data.start", "search-and-learn slices the dataset only when dataset_end is set too"),
    "dataset_end": SalKey("data.end", "search-and-learn slices the dataset only when dataset_start is set too"),
    "num_samples": SalKey("data.limit"),
    "system_prompt": SalKey("policy.system_prompt"),
    "custom_chat_template": SalKey("policy.chat_template"),  # null: the model's own (true)
    "n": SalKey("search.width"),
    "temperature": SalKey("search.temperature"),
    "top_p": SalKey("search.top_p"),
    "prm_batch_size": SalKey(None, "it batched search-and-learn's PRM calls; each round's steps go to the PRM "
                                   "in one call"),
    "search_batch_size": SalKey(None, "it set the problems of one search-and-learn batch; `concurrency` sets "
                                      "the problems searched at once"),
    "seed": SalKey("search.seed"),
    # best_of_n: one generation per solution; beam search: each step's generation;
    # search-and-learn's DVTS does not read it (DVTS_STEP_TOKENS)
    "max_tokens": SalKey({"best_of_n": "search.max_tokens", "dvts": None, OTHER: "search.max_step_tokens"},
                         "search-and-learn's dvts caps each step at 2048 tokens whatever max_tokens says"),
    "agg_strategy": SalKey("search.aggregation"),
    # beam: n // beam_width beams kept, each with beam_width children; dvts: n // beam_width
    # subtrees of beam_width: both our fixed_width
    "beam_width": SalKey({"beam": "search.fixed_width", "dvts": "search.fixed_width", OTHER: None},
                         "search-and-learn reads it in beam_search and dvts only; method is {method}"),
    "num_iterations": SalKey({"best_of_n": None, OTHER: "search.max_depth"},
                             "search-and-learn's best_of_n generates each solution in one call, without steps"),
    # its beam search generates the rollouts but scores each candidate's own step, so there
    # lookahead changes no selection; its DVTS scores the rollouts, as search.lookahead does
    "lookahead": SalKey({"dvts": "search.lookahead", OTHER: None},
                        "search-and-learn's {method} does not rank candidates by a rollout (its beam search "
                        "generates them and scores each candidate's own step; search.lookahead would rank by them)"),
    "filter_duplicates": SalKey({"beam": "search.filter_duplicates", OTHER: None},
                                "search-and-learn reads it in beam_search only; method is {method}"),
    "sort_completed": SalKey({"beam": "search.sort_completed", OTHER: None},
                             "search-and-learn reads it in beam_search only; method is {method}"),
}

# search-and-learn's defaults for the keys that change a result (src/sal/config.py).
SAL_DEFAULTS: dict[str, Any] = {
    "approach": "best_of_n",
    "model_path": "meta-llama/Llama-3.2-1B-Instruct",
    "gpu_memory_utilization": 0.5,  # vLLM's share; search-and-learn's PRM takes the rest
    "prm_path": "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data",
    "dataset_name": "HuggingFaceH4/MATH-500",
    "dataset_split": "test",
    "system_prompt": SAL_SYSTEM_PROMPT,
    "n": 4,
    "temperature": 0.8,
    "top_p": 1.0,
    "seed": 42,
    "max_tokens": 2048,
    "agg_strategy": "last",
    "beam_width": 4,
    "num_iterations": 40,
    "lookahead": 1,
    "filter_duplicates": False,
    "sort_completed": False,
}

# What search-and-learn's code does that no key of it sets. Its chat template, when a
# recipe gives none, is Llama 3's own less the leading BOS text and the trimming of the
# messages: the model's own template (chat_template: true) writes the same prompt for the
# Llama 3 models it is meant for. It ends a trajectory at EOS (its DVTS also at a boxed
# answer); here at EOS or a step with a \boxed{} answer, no answer phrases.
SAL_FIXED: dict[str, Any] = {
    "policy.prompt_template": "{question}",
    "policy.chat_template": True,
    "policy.step_delimiter": "\n\n",
    "search.answer_markers": [],
}

# Its keys that are top-level keys of ours too (temperature, max_tokens, lookahead, ...):
# in a search-and-learn recipe they are its keys, and they do not make a config one.
SHARED = frozenset(SAL_KEYS) & {f.name for f in fields(SearchConfig)}
SAL_ONLY = frozenset(SAL_KEYS) - SHARED
DEFAULT_LAYER = -1  # a default or fixed choice: any key given wins over it


def is_sal_layout(layers: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the config is a search-and-learn recipe: the first source with keys (the
    file, or the command line without one) has a key only search-and-learn has."""
    for layer in layers:
        if layer:
            return any(key in SAL_ONLY for key in layer)
    return False


def take_keys(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Search-and-learn's keys taken out of each source (in place), one dict per source;
    all empty when the config is not in its layout."""
    if not is_sal_layout(layers):
        return [{} for _ in layers]
    return [{key: layer.pop(key) for key in list(layer) if key in SAL_KEYS} for layer in layers]


def layout_hint(key: str) -> str:
    """For a search-and-learn key in a config of ets's layout: where it would be read."""
    if key not in SAL_KEYS:
        return ""
    to = SAL_KEYS[key].to
    ours = f"; here write {to}" if isinstance(to, str) else ""
    return (f" ({key!r} is a search-and-learn key, read in a file in its layout, one with its `approach`, "
            f"`n` or `model_path`{ours})")


# ---------------------------------------------------------------------------- applying
@dataclass
class _Value:
    value: Any
    layer: int        # the source it came from; DEFAULT_LAYER for a default or fixed choice
    keys: tuple[str, ...]  # the search-and-learn keys it comes from ("" for a fixed choice)
    strict: bool = True   # a key's own value: a different one in the same source is a conflict


def _get(tree: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[last] = value


def _drop(tree: dict[str, Any], path: str) -> None:
    *parents, last = path.split(".")
    for part in parents:
        tree = tree.get(part, {})
    tree.pop(last, None)


def _given(ets_layers: Sequence[Mapping[str, Any]], path: str) -> tuple[int | None, Any]:
    """The last source that gives `path` itself, and its value there."""
    for i in range(len(ets_layers) - 1, -1, -1):
        found, value = _get(ets_layers[i], path)
        if found:
            return i, value
    return None, None


def _same(path: str, a: Any, b: Any) -> bool:
    if path == "search.method":
        return METHOD_ALIASES.get(a, a) == METHOD_ALIASES.get(b, b)
    return a == b


def _wins(path: str, v: _Value, ets_layers: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the search-and-learn value sets `path` over what ets's keys give."""
    layer, given = _given(ets_layers, path)
    if layer is None or layer < v.layer:
        return True
    if layer == v.layer and v.strict and not _same(path, v.value, given):
        where = "on the command line" if layer > 0 else "in the config"
        raise ConfigError(f"{' and '.join(v.keys)} (search-and-learn's) and {path} both set {path} {where}, to "
                          f"{v.value!r} and {given!r}; give one of them")
    return False


def apply(sal_layers: Sequence[Mapping[str, Any]], ets_layers: Sequence[Mapping[str, Any]],
          merged: dict[str, Any]) -> None:
    """Set in `merged` (the config in ets's layout: sections and top-level keys, every
    source merged) what the search-and-learn keys of each source, its defaults and its
    fixed choices mean, under ets's keys as the module doc says; the keys with no effect
    go to `merged["no_effect"]`."""
    given = {key: _Value(value, i, (key,)) for i, layer in enumerate(sal_layers) for key, value in layer.items()}
    values = {key: _Value(value, DEFAULT_LAYER, (key,)) for key, value in SAL_DEFAULTS.items()}
    values.update(given)

    def put(path: str, v: _Value) -> None:
        if _wins(path, v, ets_layers):
            _set(merged, path, v.value)

    # The method first: which keys mean what depends on it.
    approach = values["approach"]
    if not isinstance(approach.value, str) or approach.value not in APPROACHES:
        raise ConfigError(f"approach: {approach.value!r} is not one of search-and-learn's"
                          f"{did_you_mean(approach.value, APPROACHES)}; choose one of: {', '.join(APPROACHES)}")
    put("search.method", _Value(APPROACHES[approach.value], approach.layer, approach.keys))
    method = METHOD_ALIASES.get(merged["search"].get("method"), merged["search"].get("method"))
    backend = merged.get("policy", {}).get("backend", "engine")

    # What the code decides without a key first: a key of its (custom_chat_template) may
    # set the same after.
    for path, value in SAL_FIXED.items():
        put(path, _Value(value, DEFAULT_LAYER, ("",), strict=False))
    for path, value, keys in _derived(values, method):
        layer = max((values[k].layer for k in keys), default=DEFAULT_LAYER)
        put(path, _Value(value, layer, keys, strict=False))
    no_effect: dict[str, Any] = {}
    for key, v in values.items():
        if key == "approach":
            continue
        target = SAL_KEYS[key].target(method)
        if key == "gpu_memory_utilization" and backend != "vllm":
            target = None
        if key in ("dataset_start", "dataset_end") and ("dataset_start" in given) != ("dataset_end" in given):
            target = None  # search-and-learn slices only with both
        if target is None:
            if key in given:
                no_effect[key] = v.value
            continue
        converted = _CONVERT.get(key, lambda v, merged, method: v.value)(v, merged, method)
        check_value(key, converted, _target_type(target))  # a bad value named by the recipe's key
        if key == "dataset_name" and not _data_source(v, ets_layers, merged):
            continue
        put(target, _Value(converted, v.layer, v.keys))
    if no_effect:
        in_order = {key: no_effect[key] for key in given if key in no_effect}  # as the recipe lists them
        merged["no_effect"] = {**in_order, **merged.get("no_effect", {})}


def _target_type(path: str) -> Any:
    """The type of the value at a dotted path of ours (`search.width`, `policy.vllm.seed`, `output`)."""
    section, _, name = path.partition(".")
    if path.startswith("policy.vllm."):
        return VLLM_OPTIONS[path.split(".")[2]]
    cls = {"search": SearchConfig, "policy": PolicyConfig, "reward": RewardConfig, "data": DataConfig}.get(section)
    return field_types(cls)[name] if cls else field_types(RunConfig)[path]


def _data_source(v: _Value, ets_layers: Sequence[Mapping[str, Any]], merged: dict[str, Any]) -> bool:
    """Whether `dataset_name` names the problems: a data.path given in a later source, or
    beside the default, reads a file instead; given in the same source as data.path, both
    stand (and loading the problems names the clash)."""
    layer, _ = _given(ets_layers, "data.path")
    if layer is None:
        return True
    if layer > v.layer:
        return False
    if layer < v.layer:
        _drop(merged, "data.path")  # a later dataset_name replaces the file
    return True


def _width_per(v: _Value, merged: Mapping[str, Any], method: str) -> int:
    """beam_width -> fixed_width: search-and-learn keeps n // beam_width beams (dvts: grows
    n // beam_width subtrees), each with beam_width children. n is the width as resolved
    (`n`, or an ets `width` over it)."""
    n, m = merged["search"].get("width"), v.value
    for key, value in (("n", n), ("beam_width", m)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{key}: {value!r} must be an integer >= 1")
    if m > n:
        raise ConfigError(f"beam_width: {m} is more than n ({n}); search-and-learn keeps n // beam_width beams, "
                          f"so beam_width must be at most n")
    if method == "dvts" and n % m:
        raise ConfigError(f"n: {n} is not a multiple of beam_width ({m}); search-and-learn's DVTS grows "
                          f"n / beam_width subtrees of beam_width each")
    return n // m


def _output_file(v: _Value, merged: Mapping[str, Any], method: str) -> str:
    if not isinstance(v.value, str) or not v.value.strip():
        raise ConfigError(f"output_dir: {v.value!r} must be a folder path (search-and-learn's results folder)")
    return str(Path(v.value) / FOLDER_RESULTS_FILE)


# Values that are not given as they are: (the key's value, the config so far, the method) -> ours.
_CONVERT: dict[str, Callable[[_Value, Mapping[str, Any], str], Any]] = {
    "beam_width": _width_per,
    "output_dir": _output_file,
    # null: the tokenizer's own template, which search-and-learn then requires
    "custom_chat_template": lambda v, merged, method: True if v.value is None else v.value,
}


def _derived(values: Mapping[str, _Value], method: str) -> list[tuple[str, Any, tuple[str, ...]]]:
    """Our limits that search-and-learn has no key for, from the keys that bound the same.
    best_of_n: a solution is one generation of up to max_tokens, so only max_tokens ends it
    (max_depth = max_tokens: a step holds a token at least). Beam and DVTS: a trajectory
    is bounded by its steps alone (num_iterations x the step's tokens)."""
    if method == "best_of_n":
        return [("search.max_depth", values["max_tokens"].value, ("max_tokens",))]
    iterations = values["num_iterations"].value
    if method == "dvts":
        out = [("search.max_step_tokens", DVTS_STEP_TOKENS, ())]
        step, keys = DVTS_STEP_TOKENS, ("num_iterations",)
    else:
        out, step, keys = [], values["max_tokens"].value, ("num_iterations", "max_tokens")
    if isinstance(iterations, int) and isinstance(step, int):  # else the search section names the bad value
        out.append(("search.max_tokens", iterations * step, keys))
    return out


def no_effect_note(key: str, value: Any, method: str, backend: str) -> str:
    """The line `ets run` logs for a recipe key that does nothing here."""
    entry = SAL_KEYS.get(key)
    why = entry.idle.format(method=method, backend=backend) if entry else "not a key of ets"
    shown = str(value).lower() if isinstance(value, bool) else repr(value)  # as YAML writes a bool
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{key}: {shown} has no effect here ({why})"
