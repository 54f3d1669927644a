"""Configuration: one validated dataclass per layer, loadable from YAML, overridable.

    search:  SearchConfig   what the search does (method, width, scoring, ETS weights)
    policy:  PolicyConfig   which model proposes steps, and how it is run
    reward:  RewardConfig   which PRM scores them
    data:    DataConfig     which problems
    RunConfig               all four, plus where results go

A YAML file may hold the four sections, or put the search keys at the top level, as the
ETS public code's hyperparameter files do (their key names are accepted: `select_method`,
`lambdac`, `lambdas`, `fixedwidth`, ...). Command-line overrides are `key=value`, with a
dotted section for the other layers: `width=64 policy.model=tiny:qwen2 data.limit=10`.
Every unknown key or bad value raises `ConfigError` naming the key and what is allowed.

The rest of the ETS code's recipe keys are understood too (docs/FIDELITY.md):
`store_path` is the output folder (`output` = `<store_path>/results.jsonl` unless `output`
is given), `num_threads` is accepted and has no effect here (it sized the ETS code's SGLang
client threads; `ets run` says so in one logged line), and `policy_model_type` /
`reward_model_type` name rows of `PRESETS`: the prompt template and step delimiter, and
the PRM convention, that the ETS code uses for those models. A user's explicit keys
override a preset's. `search.compat: ets_code` reproduces the ETS code's selection and
accounting where they depart from ALGORITHMS.md (the default, `project`, keeps the
project's corrected behaviour).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml


class ConfigError(ValueError):
    """A configuration key or value is not valid; the message names it and the fix."""


# The ETS public code's names for the methods, mapped onto ours.
METHOD_ALIASES = {
    "beam_search": "beam",
    "softmax": "rebase",
    "softmax_costmodel": "ets",
    "bon": "best_of_n",
    "best-of-n": "best_of_n",
}
AGGREGATIONS = ("last", "min", "mean", "prod")
# search.compat: the project's corrected behaviour, or the ETS public code's (docs/FIDELITY.md).
PROJECT, ETS_CODE = "project", "ets_code"
COMPAT_MODES = (PROJECT, ETS_CODE)
# The ETS code's answer phrases: a step that writes one ends its trajectory (ALGORITHMS.md,
# "Terminal"). Case as written; the default of `search.answer_markers`.
REFERENCE_ANSWER_PHRASES = ("The answer is", "The final answer is:", "Therefore, the final answer is")
# What the ETS code counts a prompt as: `len(tokenizer(text))`, the keys of a Llama or
# Mistral tokenizer's output (input_ids, attention_mask), not its tokens.
REFERENCE_PROMPT_TOKENS = 2
VOTES = ("best", "majority", "weighted")
COSTS = ("uniform", "tokens")

# Keys of the ETS public code's hyperparameter files -> our field names.
ETS_KEY_ALIASES = {
    "select_method": "method",
    "lambdac": "lambda_c",
    "lambdas": "lambda_s",
    "fixedwidth": "fixed_width",
}


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: {value!r} is not allowed; choose one of: {', '.join(allowed)}")


def _positive(key: str, value: Any, zero_ok: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (value >= 0 if zero_ok else value > 0)
    if not ok:
        raise ConfigError(f"{key}: {value!r} must be a number {'>= 0' if zero_ok else '> 0'}")


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


def _integer(key: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{key}: {value!r} must be an integer >= {minimum}")


@dataclass
class SearchConfig:
    """Hyperparameters of one search (ALGORITHMS.md). Defaults follow the ETS public code."""

    method: str = "rebase"            # a registered strategy: best_of_n | beam | dvts | rebase | ets (ETS names accepted)
    width: int = 16                   # W: completed trajectories a search may produce
    temperature: float = 1.0          # policy sampling temperature
    top_p: float = 1.0
    top_k: int = 0                    # 0 = off
    max_step_tokens: int = 256        # tokens per step before it is cut
    max_tokens: int = 1024            # generated tokens per trajectory before it is completed
    max_depth: int = 25               # steps per trajectory
    softmax_temperature: float = 0.2  # REBASE / ETS outcome-weight temperature T
    fixed_width: int | None = None    # beam: beams kept; dvts: subtrees (default ceil(sqrt(W)))
    lambda_c: float = 1.0             # ETS: weight of the KV cost
    lambda_s: float = 1.5             # ETS: weight of semantic coverage
    cost: str = "uniform"             # ETS node cost: uniform (1/(M+N)) | tokens
    cluster_threshold: float = 0.05   # ETS: cosine-distance cut of the dendrogram
    embedder: str = "all-MiniLM-L6-v2"  # sentence-transformers model (default ships offline)
    kv_budget: int | None = None      # ETS: hard cap on tokens of kept nodes (beyond the paper)
    lp_relax: bool = False            # ETS: solve the LP relaxation and round
    lp_time_limit: float = 1.0        # ETS: seconds per solve before the REBASE fallback
    aggregation: str = "last"         # last | min | mean | prod
    vote: str = "weighted"            # best | majority | weighted
    seed: int = 0
    # A step that writes one of these (case as written, starting a sentence) ends its
    # trajectory, as do EOS and a \boxed{} answer. Default: the ETS code's phrases.
    answer_markers: list[str] = field(default_factory=lambda: list(REFERENCE_ANSWER_PHRASES))
    compat: str = PROJECT             # project | ets_code: the ETS public code's selection and accounting

    def __post_init__(self) -> None:
        self.method = METHOD_ALIASES.get(self.method, self.method)
        # Which names exist is the strategy registry's to say (search.available(), checked by
        # search.build): a strategy registered by a user needs no edit here.
        if not isinstance(self.method, str) or not self.method:
            raise ConfigError(f"method: {self.method!r} must be a strategy name, e.g. rebase")
        if self.fixed_width is not None and self.fixed_width <= 0:
            self.fixed_width = None   # the ETS code writes -1 for "not set"
        for key in ("width", "max_step_tokens", "max_tokens", "max_depth"):
            _integer(key, getattr(self, key), 1)
        _integer("top_k", self.top_k, 0)
        _integer("seed", self.seed, 0)
        if self.seed >= 2**63:  # torch and numpy generators take a signed 64-bit seed
            raise ConfigError(f"seed: {self.seed!r} must be below 2**63 ({2**63})")
        if self.fixed_width is not None:
            _integer("fixed_width", self.fixed_width, 1)
            if self.method == "dvts" and self.fixed_width > self.width:
                # each of the fixed_width subtrees gets width // fixed_width = 0 of the width
                raise ConfigError(f"fixed_width: {self.fixed_width} DVTS subtrees cannot share width {self.width} "
                                  f"(each would get 0); use fixed_width <= width")
        if self.kv_budget is not None:
            _integer("kv_budget", self.kv_budget, 1)
        _positive("temperature", self.temperature, zero_ok=True)
        _positive("softmax_temperature", self.softmax_temperature)
        _positive("lp_time_limit", self.lp_time_limit)
        _positive("lambda_c", self.lambda_c, zero_ok=True)
        _positive("lambda_s", self.lambda_s, zero_ok=True)
        _positive("cluster_threshold", self.cluster_threshold, zero_ok=True)
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p: {self.top_p!r} must be in (0, 1]")
        _choice("cost", self.cost, COSTS)
        _choice("aggregation", self.aggregation, AGGREGATIONS)
        _choice("vote", self.vote, VOTES)
        _choice("compat", self.compat, COMPAT_MODES)
        if isinstance(self.answer_markers, str):
            self.answer_markers = [self.answer_markers]
        if not isinstance(self.answer_markers, (list, tuple)) or not all(
                isinstance(m, str) and m.strip() for m in self.answer_markers):
            raise ConfigError(f"answer_markers: {self.answer_markers!r} must be a list of non-empty strings, "
                              f"e.g. {list(REFERENCE_ANSWER_PHRASES)!r} (the default), or [] for EOS and \\boxed{{}} only")
        self.answer_markers = list(self.answer_markers)

    @property
    def ets_code(self) -> bool:
        """Whether the ETS public code's rules apply (`compat: ets_code`)."""
        return self.compat == ETS_CODE


POLICY_BACKENDS = ("engine", "hf", "vllm")
# `policy.vllm` keys: `vllm.LLM` / `vllm.EngineArgs` options, passed through as given. The
# backend sets model and tokenizer itself; enable_prefix_caching defaults to true, dtype,
# seed and max_model_len to policy.dtype, the search seed and policy.max_context, and
# block_size on vLLM's CPU build to 32 (ets/policy/vllm.py).
VLLM_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "tensor_parallel_size": int, "pipeline_parallel_size": int, "data_parallel_size": int,
    "distributed_executor_backend": str, "gpu_memory_utilization": (int, float), "kv_cache_memory_bytes": int,
    "block_size": int, "max_num_seqs": int, "max_num_batched_tokens": int, "max_model_len": int,
    "enforce_eager": bool, "dtype": str, "seed": int, "quantization": str, "swap_space": (int, float),
    "cpu_offload_gb": (int, float), "num_gpu_blocks_override": int, "enable_chunked_prefill": bool,
    "trust_remote_code": bool, "revision": str, "tokenizer_revision": str, "kv_cache_dtype": str,
    "calculate_kv_scales": bool, "disable_custom_all_reduce": bool, "compilation_config": (int, dict),
    "enable_prefix_caching": bool, "prefix_caching_hash_algo": str, "max_logprobs": int,
    "disable_log_stats": bool, "load_format": str, "download_dir": str, "max_seq_len_to_capture": int,
    "attention_backend": str, "async_scheduling": bool,
}


def _vllm_options(options: Any, backend: str) -> dict[str, Any]:
    """`policy.vllm` checked: a mapping of known vLLM option names to values of their type."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"policy.vllm must be a mapping of vLLM option names to values, got {options!r}")
    if options and backend != "vllm":
        raise ConfigError(f"policy.vllm is read only by policy.backend=vllm (backend is {backend!r}); "
                          f"set policy.backend=vllm or remove policy.vllm")
    for key, value in options.items():
        if key not in VLLM_OPTIONS:
            raise ConfigError(f"unknown key policy.vllm.{key!s}; known vLLM options: {', '.join(sorted(VLLM_OPTIONS))}")
        kind = VLLM_OPTIONS[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            names = " or ".join(t.__name__ for t in (kind if isinstance(kind, tuple) else (kind,)))
            raise ConfigError(f"policy.vllm.{key}: {value!r} must be {names}")
    return dict(options)


@dataclass
class PolicyConfig:
    """The policy model and how it runs."""

    model: str = "tiny:llama"         # HF path or hub name, or tiny:<arch> (random init, tests)
    backend: str = "engine"           # engine (prefix-sharing KV cache) | hf (plain generate baseline) | vllm
    device: str = "cpu"
    dtype: str = "float32"
    prompt_template: str = "{question}\n"
    step_delimiter: str = "\n\n"      # a step ends here (kept in the step's tokens)
    kv_budget_tokens: int | None = None  # engine: KV pool size in tokens (None: the engine's default)
    max_batch_tokens: int = 8192      # engine: tokens per forward
    max_context: int | None = None    # tokens a path may hold (None: the model's max_position_embeddings)
    prompt_overflow: str = "error"    # a prompt that fills the context: error | truncate (keep its last tokens)
    # vllm: vLLM's own engine options, passed to `vllm.LLM` (names in VLLM_OPTIONS), e.g.
    # {tensor_parallel_size: 2, gpu_memory_utilization: 0.8, block_size: 32}
    vllm: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _choice("policy.backend", self.backend, POLICY_BACKENDS)
        self.vllm = _vllm_options(self.vllm, self.backend)
        _choice("policy.prompt_overflow", self.prompt_overflow, ("error", "truncate"))
        if self.max_context is not None:
            _integer("policy.max_context", self.max_context, 2)
        _choice("policy.dtype", self.dtype, ("float32", "float16", "bfloat16"))
        if "{question}" not in self.prompt_template:
            raise ConfigError("policy.prompt_template must contain the placeholder {question} "
                              "(the only placeholder; other braces are kept as written)")
        if not self.step_delimiter:
            raise ConfigError("policy.step_delimiter must be a non-empty string, e.g. '\\n\\n'")
        if self.kv_budget_tokens is not None:
            _integer("policy.kv_budget_tokens", self.kv_budget_tokens, 1)
        _integer("policy.max_batch_tokens", self.max_batch_tokens, 1)


@dataclass
class RewardConfig:
    """The process reward model: a built-in name or `module:attr`, with its own options."""

    name: str = "step_tag"
    model: str | None = None          # path for model-based PRMs (None: the policy's model)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataConfig:
    """Where the problems come from."""

    path: str | None = None           # JSONL file
    format: str = "auto"              # auto | gsm8k | math500 | fields
    question_field: str | None = None  # with format=fields
    answer_field: str | None = None
    hf_name: str | None = None        # a `datasets` name, for machines with a hub
    hf_split: str = "test"
    limit: int | None = None          # first N problems

    def __post_init__(self) -> None:
        _choice("data.format", self.format, ("auto", "gsm8k", "math500", "fields"))
        if self.format == "fields" and not (self.question_field and self.answer_field):
            raise ConfigError("data.format=fields needs data.question_field and data.answer_field")
        if self.limit is not None:
            _integer("data.limit", self.limit, 1)


# The system prompt the ETS code gives its instruction-tuned Llama policy (rebase.py).
LLAMA_SYSTEM_PROMPT = (
    "Cutting Knowledge Date: December 2023\nToday Date: 05 Jan 2025\n\n"
    "Solve the following math problem efficiently and clearly:\n\n"
    "- For simple problems (2 steps or fewer):\nProvide a concise solution with minimal explanation.\n\n"
    "- For complex problems (3 steps or more):\nUse this step-by-step format:\n\n"
    "## Step 1: [Concise description]\n[Brief explanation and calculations]\n\n"
    "## Step 2: [Concise description]\n[Brief explanation and calculations]\n\n"
    "...\n\n"
    "Regardless of the approach, always conclude with:\n\n"
    "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct.\n\n"
    "Where [answer] is just the final number or expression that solves the problem."
)

# The model conventions of the ETS (and REBASE) code, by the names its recipes give as
# `policy_model_type` and `reward_model_type`: `policy_model_type` applies a row's
# `policy` keys, `reward_model_type` its `reward` keys (the ETS code itself switches both
# on policy_model_type; its recipes always name the same type twice). A user's explicit
# keys win over a preset's; a preset's reward options apply only while reward.name is the
# preset's. `ets presets` prints this table; docs/FIDELITY.md has how each row was read.
PRESETS: dict[str, dict[str, Any]] = {
    "llemma": {
        "about": "Llemma policy and the REBASE / ETS Llemma PRM: question + newline, steps end at "
                 "'ки'; the PRM's one logit (id 8094 in Llemma's vocabulary, ' ки') read at each step tag",
        "policy": {"prompt_template": "{question}\n", "step_delimiter": "ки"},
        "reward": {"name": "value_head", "options": {
            "marker": " ки", "template": "{question}\n{steps}", "step_separator": "\n",
            "tokenize": "whole", "head": "lm_logit"}},
    },
    "mistral": {
        "about": "Math-Shepherd (math-shepherd-mistral-7b-prm and its policy): question + newline, steps end "
                 "at 'ки'; P('+') against '-' at each ' ки' tag (ids 648, 387, 12902 in Mistral's vocabulary)",
        "policy": {"prompt_template": "{question}\n", "step_delimiter": "ки"},
        "reward": {"name": "step_tag", "options": {
            "tag": " ки", "good_token": "+", "bad_token": "-", "template": "{question}\n{steps}",
            "step_separator": "\n"}},
    },
    "llama": {
        "about": "Llama-3.1-Instruct policy with the ETS code's system prompt (Llama-3 chat turns), steps "
                 "end at a blank line; an RLHFlow-style PRM judges each step '+' / '-' (ids 10, 12)",
        "policy": {
            "prompt_template": (
                "<|start_header_id|>system<|end_header_id|>\n\n" + LLAMA_SYSTEM_PROMPT + "<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\n{question}<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n"),
            "step_delimiter": "\n\n"},
        "reward": {"name": "chat_judgement", "options": {"good_token": "+", "bad_token": "-"}},
    },
}


def _preset(key: str, name: Any) -> dict[str, Any]:
    if name not in PRESETS:
        raise ConfigError(f"{key}: {name!r} is not a preset; known: {', '.join(PRESETS)} (`ets presets` lists them)")
    return PRESETS[name]


def preset_lines() -> list[str]:
    """`PRESETS` as text, one block per name: what `ets presets` prints."""
    lines = []
    for name, row in PRESETS.items():
        lines.append(f"{name}: {row['about']}")
        for key, value in row["policy"].items():
            lines.append(f"  policy_model_type: {name} -> policy.{key} = {value!r}")
        lines.append(f"  reward_model_type: {name} -> reward.name = {row['reward']['name']!r}")
        for key, value in row["reward"]["options"].items():
            lines.append(f"  reward_model_type: {name} -> reward.options.{key} = {value!r}")
    return lines


@dataclass
class RunConfig:
    search: SearchConfig = field(default_factory=SearchConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    data: DataConfig = field(default_factory=DataConfig)
    output: str = "runs/results.jsonl"
    concurrency: int = 8              # problems searched at once (one batched call per round)
    save_trees: bool = False          # add each whole search tree to its result line
    # The ETS code's recipe keys (`store_path` sets `output`; see the module doc):
    num_threads: int | None = None    # accepted, no effect here (the ETS code's SGLang client threads)
    policy_model_type: str | None = None   # a PRESETS row applied to the policy section
    reward_model_type: str | None = None   # a PRESETS row applied to the reward section

    def __post_init__(self) -> None:
        _integer("concurrency", self.concurrency, 1)
        if self.num_threads is not None:
            _integer("num_threads", self.num_threads, 1)
        for key in ("policy_model_type", "reward_model_type"):
            if getattr(self, key) is not None:
                _preset(key, getattr(self, key))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SECTIONS = {"search": SearchConfig, "policy": PolicyConfig, "reward": RewardConfig, "data": DataConfig}
TOP_LEVEL = ("output", "concurrency", "save_trees", "num_threads", "policy_model_type", "reward_model_type")
# The output file a recipe's `store_path` (a folder) gets.
STORE_PATH_FILE = "results.jsonl"


def _build(cls, values: Mapping[str, Any], section: str | None):
    known = {f.name for f in fields(cls)}
    for key in values:
        if key not in known:
            where = f"{section}." if section else ""
            extra = f"; or the ETS names: {', '.join(ETS_KEY_ALIASES)}" if cls is SearchConfig else ""
            raise ConfigError(f"unknown key {where}{key!r}; known keys: {', '.join(sorted(known))}{extra}")
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
            raise ConfigError(
                f"unknown key {key!r}; use a section ({', '.join(SECTIONS)}), a search key "
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
        elif len(path) == 3 and path[0] == "policy" and path[1] == "vllm":
            raw.setdefault("policy", {}).setdefault("vllm", {})[path[2]] = value
        else:
            raise ConfigError(f"override {item!r}: use key=value or SECTION.key=value with SECTION in {', '.join(SECTIONS)}")
    return raw


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML config (or none: the defaults) and apply `key=value` overrides."""
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
    return config_from_dict(merge_overrides(raw, overrides or []))


def _resolve_relative(raw: dict[str, Any], base: Path) -> None:
    for section, key in (("data", "path"), ("policy", "model"), ("reward", "model")):
        value = raw.get(section, {}).get(key) if isinstance(raw.get(section), Mapping) else None
        if isinstance(value, str) and value.startswith(("./", "../")):
            raw[section] = dict(raw[section])
            raw[section][key] = str((base / value).resolve())


def config_from_dict(raw: Mapping[str, Any]) -> RunConfig:
    raw = dict(raw)
    store_path = raw.pop("store_path", None)
    sections, top = _split(raw)
    if store_path is not None:
        if not isinstance(store_path, str) or not store_path.strip():
            raise ConfigError(f"store_path: {store_path!r} must be a folder path (the ETS code's results folder)")
        top.setdefault("output", str(Path(store_path) / STORE_PATH_FILE))  # an explicit `output` wins
    _apply_presets(sections, top)
    built = {name: _build(cls, sections[name], name) for name, cls in SECTIONS.items()}
    return RunConfig(**built, **top)


def _apply_presets(sections: dict[str, dict[str, Any]], top: dict[str, Any]) -> None:
    """Fill the policy and reward sections from the named presets, under the user's keys."""
    if top.get("policy_model_type") is not None:
        row = _preset("policy_model_type", top["policy_model_type"])
        sections["policy"] = {**row["policy"], **sections["policy"]}
    if top.get("reward_model_type") is not None:
        row = _preset("reward_model_type", top["reward_model_type"])["reward"]
        mine = sections["reward"]
        if mine.get("name", row["name"]) == row["name"]:
            options = mine.get("options") or {}
            if not isinstance(options, Mapping):
                raise ConfigError(f"reward.options must be a mapping of option names to values, got {options!r}")
            sections["reward"] = {**mine, "name": row["name"], "options": {**row["options"], **options}}
