"""The validated sections of a config: one dataclass per layer, checked on construction.

    SearchConfig   what the search does (method, width, scoring, ETS weights)
    PolicyConfig   which model proposes steps, and how it is run (vLLM options included)
    RewardConfig   which PRM scores them
    DataConfig     which problems
    RunConfig      all four, plus where results go and the ETS recipe keys

Each checks every field against its annotation first (`check_fields`: the type, integers
within 64 bits, finite numbers, no empty text), then the ranges and choices of its keys.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ets.config.checks import (EMPTY_OK, ConfigError, check_fields, check_value, choice, did_you_mean, integer,
                               positive, switch)
from ets.config.embedders import cluster_cut
from ets.config.presets import preset

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
# The default of `search.answer_markers`, phrases that end a trajectory (docs/algorithms.md, "The
# loop"), case as written: the ETS code's answer phrases, without the colon it asks after "The
# final answer is" (a chat model that writes "The final answer is 18." has given its answer,
# and would otherwise write on to `max_tokens`).
DEFAULT_ANSWER_MARKERS = ("The answer is", "The final answer is", "Therefore, the final answer is")
# What the ETS code counts a prompt as: `len(tokenizer(text))`, the keys of a Llama or
# Mistral tokenizer's output (input_ids, attention_mask), not its tokens.
REFERENCE_PROMPT_TOKENS = 2
VOTES = ("best", "majority", "weighted")
# search.answer_extraction: the rules that read a trajectory's final answer from its text
# (ets/answers/extract.py), in precedence order: a `\boxed{}`; an answer phrase ("The
# answer is") or GSM8K's `####`, the later in the text winning; the last number written
# (lm-eval-harness's GSM8K "flexible-extract"), for policies that end in prose.
ANSWER_RULES = ("boxed", "marker", "hashes", "last_number")
# The rules without the last number: what `compat: ets_code` reads (the ETS code takes its
# answer after its answer phrase, never a bare number), and what every output written
# before the key existed was read with.
MARKED_ANSWER_RULES = ("boxed", "marker", "hashes")
COSTS = ("uniform", "tokens")
# ETS: how the width is spent after the solve (search/ets.py): REBASE again over the kept
# leaves (the paper's), or each kept leaf keeps its REBASE count and only the pruned
# leaves' children are handed out again (a study of what the renormalisation costs)
FINAL_PASSES = ("renormalise", "keep_counts")

# search-and-learn's beam-search options and the methods that read them (a set value on
# another method is an error: it would change nothing there).
SEARCH_AND_LEARN_KEYS = {
    "lookahead": ("beam", "dvts"),
    "filter_duplicates": ("beam",),
    "sort_completed": ("beam",),
}

# The results file a recipe's output folder gets (the ETS code's store_path,
# search-and-learn's output_dir).
FOLDER_RESULTS_FILE = "results.jsonl"

# Keys of the ETS public code's hyperparameter files -> our field names.
ETS_KEY_ALIASES = {
    "select_method": "method",
    "lambdac": "lambda_c",
    "lambdas": "lambda_s",
    "fixedwidth": "fixed_width",
}


@dataclass
class SearchConfig:
    """Hyperparameters of one search (docs/algorithms.md). Defaults follow the ETS public code."""

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
    final_pass: str = "renormalise"   # ETS: renormalise (the paper's) | keep_counts (see FINAL_PASSES)
    # ETS: cosine-distance cut of the dendrogram, or a mapping {embedder: cut}; None: the
    # embedder's default (0.05 for a sentence model; policy and prm need theirs given):
    # ets/config/embedders.py
    cluster_threshold: float | dict[str, float] | None = None
    # ETS: what embeds a step: a sentence-transformers model (default ships offline),
    # static:<model>, or a model's own hidden states over the step: policy | prm
    embedder: str = "all-MiniLM-L6-v2"
    kv_budget: int | None = None      # ETS: hard cap on tokens of kept nodes (beyond the paper)
    lp_relax: bool = False            # ETS: solve the LP relaxation and round
    lp_time_limit: float = 10.0       # ETS: seconds per solve before the REBASE fallback (= lp.DEFAULT_TIME_LIMIT, tested; not imported: keeps scipy out of the CLI's start)
    aggregation: str = "last"         # last | min | mean | prod
    vote: str = "weighted"            # best | majority | weighted
    seed: int = 0
    # A step that writes one of these (case as written, starting a sentence) ends its
    # trajectory, as do EOS and a \boxed{} answer. Default: the ETS code's phrases.
    answer_markers: list[str] = field(default_factory=lambda: list(DEFAULT_ANSWER_MARKERS))
    compat: str = PROJECT             # project | ets_code: the ETS public code's selection and accounting
    # How a trajectory's final answer is read (ANSWER_RULES, any order: precedence is fixed).
    # Default: all four; under compat: ets_code, all but last_number (MARKED_ANSWER_RULES).
    answer_extraction: list[str] | None = None
    # search-and-learn's beam search (docs/search_and_learn.md):
    lookahead: int = 0                # beam, dvts: each candidate is scored after this many more greedy steps
    filter_duplicates: bool = False   # beam: a candidate whose trajectory text an earlier one has is not kept
    sort_completed: bool = False      # beam: past W completed, the W best (by aggregation) vote, not all
    # The strategy's own options: a `module:Class` strategy's constructor keyword arguments
    # (search/base.py checks them against its signature); the built-in strategies take none.
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.options is None:  # `options:` with nothing under it
            self.options = {}
        check_fields(self)
        self.options = dict(self.options)
        # Which names exist is the strategy registry's to say (search.available(), checked by
        # search.build): a strategy registered by a user needs no edit here.
        self.method = METHOD_ALIASES.get(self.method, self.method)
        if self.fixed_width == -1:
            self.fixed_width = None   # the ETS code writes -1 for "not set"; 0 or -2 is a mistake, refused below
        for key in ("width", "max_step_tokens", "max_tokens", "max_depth"):
            integer(key, getattr(self, key), 1)
        integer("top_k", self.top_k, 0)
        integer("seed", self.seed, 0)  # below 2**63 (check_fields): torch and numpy take a 64-bit seed
        if self.fixed_width is not None:
            if isinstance(self.fixed_width, int) and not isinstance(self.fixed_width, bool) and self.fixed_width < 1:
                raise ConfigError(f"fixed_width: {self.fixed_width} is not a count of beams or subtrees; set it >= 1, "
                                  "or leave it unset (null, or the ETS code's -1) for ceil(sqrt(width))")
            integer("fixed_width", self.fixed_width, 1)
            if self.method == "dvts" and self.fixed_width > self.width:
                # each of the fixed_width subtrees gets width // fixed_width = 0 of the width
                raise ConfigError(f"fixed_width: {self.fixed_width} DVTS subtrees cannot share width {self.width} "
                                  f"(each would get 0); use fixed_width <= width")
        if self.kv_budget is not None:
            integer("kv_budget", self.kv_budget, 1)
        positive("temperature", self.temperature, zero_ok=True)
        positive("softmax_temperature", self.softmax_temperature)
        positive("lp_time_limit", self.lp_time_limit)
        positive("lambda_c", self.lambda_c, zero_ok=True)
        positive("lambda_s", self.lambda_s, zero_ok=True)
        self.cluster_threshold = cluster_cut(self.cluster_threshold, self.embedder,
                                             needed=self.method == "ets" and self.lambda_s > 0)
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p: {self.top_p!r} must be in (0, 1]")
        choice("cost", self.cost, COSTS)
        choice("final_pass", self.final_pass, FINAL_PASSES)
        choice("aggregation", self.aggregation, AGGREGATIONS)
        choice("vote", self.vote, VOTES)
        choice("compat", self.compat, COMPAT_MODES)
        integer("lookahead", self.lookahead, 0)
        for key, readers in SEARCH_AND_LEARN_KEYS.items():
            if getattr(self, key) and self.method not in readers:
                raise ConfigError(f"{key}: {getattr(self, key)!r} is read by {' and '.join(readers)} only, not by "
                                  f"method {self.method!r}; remove it or use method={readers[0]}")
        if isinstance(self.answer_markers, str):
            self.answer_markers = [self.answer_markers]
        if not isinstance(self.answer_markers, (list, tuple)) or not all(
                isinstance(m, str) and m.strip() for m in self.answer_markers):
            raise ConfigError(f"answer_markers: {self.answer_markers!r} must be a list of non-empty strings, "
                              f"e.g. {list(DEFAULT_ANSWER_MARKERS)!r} (the default), or [] for EOS and \\boxed{{}} only")
        self.answer_markers = list(self.answer_markers)
        self.answer_extraction = _answer_rules(self.answer_extraction, self.compat)

    @property
    def ets_code(self) -> bool:
        """Whether the ETS public code's rules apply (`compat: ets_code`)."""
        return self.compat == ETS_CODE


def _answer_rules(rules: Any, compat: str) -> list[str]:
    """`search.answer_extraction` checked, in precedence order, each rule once; None is the
    default of `compat`."""
    if rules is None:
        return list(MARKED_ANSWER_RULES if compat == ETS_CODE else ANSWER_RULES)
    if isinstance(rules, str):
        rules = [rules]
    if not isinstance(rules, (list, tuple)) or not rules:
        raise ConfigError(f"answer_extraction: {rules!r} must be a list of one or more of: {', '.join(ANSWER_RULES)} "
                          f"(default: all of them)")
    for rule in rules:
        choice("answer_extraction", rule, ANSWER_RULES)
    return [rule for rule in ANSWER_RULES if rule in rules]


POLICY_BACKENDS = ("engine", "hf", "vllm")
# `policy.vllm` keys: `vllm.LLM` / `vllm.EngineArgs` options, passed through as given. The
# backend sets model and tokenizer itself; enable_prefix_caching defaults to true, dtype,
# seed and max_model_len to policy.dtype, the search seed and policy.max_context, and
# block_size on vLLM's CPU build to 32 (ets/policy/vllm.py).
# Each option's type, as check_fields reads an annotation (float: any number).
VLLM_OPTIONS: dict[str, Any] = {
    "tensor_parallel_size": int, "pipeline_parallel_size": int, "data_parallel_size": int,
    "distributed_executor_backend": str, "gpu_memory_utilization": float, "kv_cache_memory_bytes": int,
    "block_size": int, "max_num_seqs": int, "max_num_batched_tokens": int, "max_model_len": int,
    "enforce_eager": bool, "dtype": str, "seed": int, "quantization": str, "swap_space": float,
    "cpu_offload_gb": float, "num_gpu_blocks_override": int, "enable_chunked_prefill": bool,
    "trust_remote_code": bool, "revision": str, "tokenizer_revision": str, "kv_cache_dtype": str,
    "calculate_kv_scales": bool, "disable_custom_all_reduce": bool, "compilation_config": int | dict[str, Any],
    "enable_prefix_caching": bool, "prefix_caching_hash_algo": str, "max_logprobs": int,
    "disable_log_stats": bool, "load_format": str, "download_dir": str, "max_seq_len_to_capture": int,
    "attention_backend": str, "async_scheduling": bool,
}


def _vllm_options(options: Any, backend: str) -> dict[str, Any]:
    """`policy.vllm` checked: known vLLM option names, each with a value of its type
    (`check_value`'s rules: 64-bit integers, finite numbers)."""
    if options and backend != "vllm":
        raise ConfigError(f"policy.vllm is read only by policy.backend=vllm (backend is {backend!r}); "
                          f"set policy.backend=vllm or remove policy.vllm")
    for key, value in options.items():
        if key not in VLLM_OPTIONS:
            raise ConfigError(f"unknown key policy.vllm.{key!s}{did_you_mean(key, VLLM_OPTIONS)}; "
                              f"known vLLM options: {', '.join(sorted(VLLM_OPTIONS))}")
        check_value(f"policy.vllm.{key}", value, VLLM_OPTIONS[key])
    return dict(options)


DTYPES = ("float32", "float16", "bfloat16")  # policy.dtype, policy.kv_dtype
# policy.dtype: auto is what a model runs in on that kind of device: bfloat16 on a GPU
# (what hub checkpoints are trained and published in), float32 on the CPU (where bfloat16
# matmuls are slower and less exact).
AUTO_DTYPES = {"cuda": "bfloat16", "cpu": "float32", "mps": "float16"}
# policy.chat_template: auto uses the tokenizer's chat template when it has one.
CHAT_TEMPLATE_MODES = ("auto", True, False)
# policy.compile (ets/engine/compiled.py: what auto picks and why)
COMPILE_MODES = ("auto", "on", "off")
# policy.prepack (ets/engine/linears.py)
PREPACK_MODES = ("auto", "on", "off")
# policy.device: what the models are put on (ets/models/load.py checks this machine has it).
DEVICE = re.compile(r"(cpu|cuda|mps)(:[0-9]+)?")


def auto_dtype(device: str) -> str:
    """The dtype `policy.dtype: auto` means on `device` ("cuda:1" counts as cuda)."""
    return AUTO_DTYPES.get(str(device).split(":", 1)[0], "float32")


@dataclass
class PolicyConfig:
    """The policy model and how it runs."""

    model: str = "tiny:llama"         # HF path or hub name, or tiny:<arch> (random init, tests)
    backend: str = "engine"           # engine (prefix-sharing KV cache) | hf (plain generate baseline) | vllm
    device: str = "cpu"
    dtype: str = "auto"               # auto: bfloat16 on cuda, float32 on cpu (AUTO_DTYPES) | float32 | float16 | bfloat16
    prompt_template: str = "{question}\n"  # the question's text; inside the user turn when a chat template is used
    # auto: the tokenizer's chat template when it has one | true (required) | false (raw
    # prompt_template) | a Jinja template, inline or a file path (search-and-learn's custom_chat_template)
    chat_template: bool | str = "auto"
    system_prompt: str | None = field(default=None, metadata=EMPTY_OK)  # a system turn before the question (with a chat template)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the template, e.g. {date_string: 26 Jul 2024}
    step_delimiter: str = "\n\n"      # a step ends here (kept in the step's tokens)
    kv_budget_tokens: int | None = None  # engine: KV pool size in tokens (None: from memory_fraction)
    # engine: the share of the device's free memory, once the models are loaded, that the KV
    # pools take (the policy's and a PRM's own engine on the same device, their buffers
    # included: ets/engine/memory.py); None: 0.9 on cuda, a fixed pool per engine on the cpu
    memory_fraction: float | None = None
    reward_memory_share: float | None = None  # the PRM's part of it (None: both pools the same tokens)
    kv_dtype: str | None = None       # engine: how K/V are stored (None: as `dtype`); bfloat16 under a
                                      # float32 model halves KV bytes (faster large batches, logits ~1e-3 off)
    max_batch_tokens: int = 8192      # engine: tokens per forward
    # engine: the model's forward under torch.compile (on), eager (off), or auto: compiled on
    # cuda, eager on cpu (COMPILE_MODES; YAML's bare on/off read as true/false count too)
    compile: bool | str = "auto"
    # engine: the linear layers on oneDNN prepacked weights (on; the cpu, a copy of them), torch's
    # own (off), or auto: on on the cpu for float32/bfloat16 unless compiled (PREPACK_MODES)
    prepack: bool | str = "auto"
    max_context: int | None = None    # tokens a path may hold (None: the model's max_position_embeddings)
    prompt_overflow: str = "error"    # a prompt that fills the context: error | truncate (keep the end of its question, inside its template)
    # vllm: vLLM's own engine options, passed to `vllm.LLM` (names in VLLM_OPTIONS), e.g.
    # {tensor_parallel_size: 2, gpu_memory_utilization: 0.8, block_size: 32}
    vllm: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.vllm is None:  # `vllm:` with nothing under it
            self.vllm = {}
        check_fields(self, "policy.")
        choice("policy.backend", self.backend, POLICY_BACKENDS)
        self.vllm = _vllm_options(self.vllm, self.backend)
        choice("policy.prompt_overflow", self.prompt_overflow, ("error", "truncate"))
        if self.max_context is not None:
            integer("policy.max_context", self.max_context, 2)
        if not DEVICE.fullmatch(self.device):
            raise ConfigError(f"policy.device: {self.device!r} is not a device{did_you_mean(self.device, AUTO_DTYPES)}; "
                              f"use cpu, cuda, cuda:N (the GPU numbered N) or mps")
        if self.dtype == "auto":
            self.dtype = auto_dtype(self.device)
        choice("policy.dtype", self.dtype, DTYPES + ("auto",))
        if isinstance(self.chat_template, str) and not self.chat_template.strip():
            raise ConfigError(f"policy.chat_template: {self.chat_template!r} must be auto, true, false, or a Jinja "
                              f"chat template (inline text or a file path)")
        self.chat_template_kwargs = dict(self.chat_template_kwargs)
        if self.kv_dtype is not None:
            choice("policy.kv_dtype", self.kv_dtype, DTYPES)
            if self.backend != "engine":
                hint = "policy.vllm.kv_cache_dtype" if self.backend == "vllm" else "the engine backend"
                raise ConfigError(f"policy.kv_dtype is an option of the engine backend, not {self.backend!r}; "
                                  f"use {hint} (or drop policy.kv_dtype)")
        if "{question}" not in self.prompt_template:
            raise ConfigError("policy.prompt_template must contain the placeholder {question} "
                              "(the only placeholder; other braces are kept as written)")
        if self.kv_budget_tokens is not None:
            integer("policy.kv_budget_tokens", self.kv_budget_tokens, 1)
        integer("policy.max_batch_tokens", self.max_batch_tokens, 1)
        if self.memory_fraction is not None and not 0 < self.memory_fraction <= 1:
            raise ConfigError(f"policy.memory_fraction: {self.memory_fraction!r} must be in (0, 1], the share of the "
                              "device's free memory the KV pools take (e.g. 0.9)")
        if self.reward_memory_share is not None and not 0 < self.reward_memory_share < 1:
            raise ConfigError(f"policy.reward_memory_share: {self.reward_memory_share!r} must be in (0, 1), the PRM's "
                              "part of the KV memory (null: both pools the same number of tokens)")
        if self.backend == "vllm" and self.memory_fraction is not None:
            raise ConfigError("policy.memory_fraction sizes the engine's pools; vLLM sizes its own: use "
                              "policy.vllm.gpu_memory_utilization (or drop policy.memory_fraction)")
        self.compile, self.prepack = switch(self.compile), switch(self.prepack)
        choice("policy.compile", self.compile, COMPILE_MODES)
        choice("policy.prepack", self.prepack, PREPACK_MODES)
        if self.prepack == "on" and self.compile == "on":
            raise ConfigError("policy.prepack=on and policy.compile=on: a compiled forward lays out its linears "
                              "itself; use policy.prepack=auto or off")
        if self.prepack == "on" and (not self.device.startswith("cpu") or self.dtype not in ("float32", "bfloat16")):
            raise ConfigError(f"policy.prepack=on: oneDNN prepacked linears run on the cpu for float32 or bfloat16 "
                              f"weights, not {self.dtype} on {self.device}; use policy.prepack=auto or off")

    def inert_keys_notes(self) -> list[str]:
        """A line for each key set that this backend reads nothing from. Not an error (as
        `kv_dtype` is): a config written for the engine, demo.yaml's, must still run with
        `policy.backend=hf` as the baseline it is compared against."""
        notes = []
        if self.backend == "hf" and self.kv_budget_tokens is not None:
            notes.append(f"policy.kv_budget_tokens: {self.kv_budget_tokens:,} has no effect on the hf backend: it "
                         f"keeps no KV pool (each expansion re-encodes its paths), so admission is bounded by "
                         f"concurrency alone")
        if self.backend == "engine" and self.kv_budget_tokens is not None and self.memory_fraction is not None:
            notes.append(f"policy.memory_fraction: {self.memory_fraction:g} does not size the policy's pool: "
                         f"policy.kv_budget_tokens ({self.kv_budget_tokens:,}) does; it sizes a PRM's own pool on the "
                         "same device, unless reward.options.kv_budget_tokens is set")
        if self.backend != "engine":  # the engine's forward alone reads these
            defaults = {f.name: f.default for f in fields(self)}
            engine_only = [f"policy.{key}: {getattr(self, key)}" for key in ("compile", "max_batch_tokens")
                           if getattr(self, key) != defaults[key]]
            if engine_only:
                own = ("vLLM's own options go under policy.vllm" if self.backend == "vllm"
                       else "transformers' generate runs the policy as it is")
                notes.append(f"{' and '.join(engine_only)} {'has' if len(engine_only) == 1 else 'have'} no effect "
                             f"on the {self.backend} backend: the engine's forward reads {'it' if len(engine_only) == 1 else 'them'}; {own}")
        return notes


@dataclass
class RewardConfig:
    """The process reward model: a built-in name or `module:attr`, with its own options."""

    name: str = "step_tag"
    model: str | None = None          # path for model-based PRMs (None: the policy's model)
    options: dict[str, Any] = field(default_factory=dict)  # the reward's own (rewards/registry.py checks them)

    def __post_init__(self) -> None:
        check_fields(self, "reward.")
        self.options = dict(self.options)


@dataclass
class DataConfig:
    """Where the problems come from."""

    path: str | None = None           # JSONL file
    format: str = "auto"              # auto | gsm8k | math500 | fields
    question_field: str | None = None  # with format=fields
    answer_field: str | None = None
    hf_name: str | None = None        # a `datasets` name, for machines with a hub
    hf_split: str = "test"
    # A slice [start, end) of the problems in file order, before `limit`: the part of a
    # dataset one job of an array searches (None: from the first, to the last).
    start: int | None = None
    end: int | None = None
    limit: int | None = None          # first N problems

    def __post_init__(self) -> None:
        check_fields(self, "data.")
        choice("data.format", self.format, ("auto", "gsm8k", "math500", "fields"))
        named = [f"data.{key}" for key in ("question_field", "answer_field") if getattr(self, key) is not None]
        if named and self.format == "auto":
            self.format = "fields"  # naming the fields says how the file is laid out
        elif named and self.format != "fields":
            raise ConfigError(f"{' and '.join(named)}: read with data.format=fields, and the format is "
                              f"{self.format} (its fields are fixed); set data.format=fields, or remove them")
        if self.format == "fields" and not (self.question_field and self.answer_field):
            raise ConfigError("data.format=fields needs data.question_field and data.answer_field")
        if self.limit is not None:
            integer("data.limit", self.limit, 1)
        if self.start is not None:
            integer("data.start", self.start, 0)
        if self.end is not None:
            integer("data.end", self.end, 1)
            if self.end <= (self.start or 0):
                raise ConfigError(f"data.end: {self.end} must be above data.start ({self.start or 0}): "
                                  f"the slice [start, end) holds the problems start..end-1")

    @property
    def sliced(self) -> bool:
        return self.start is not None or self.end is not None

    def slice_label(self) -> str:
        """`<start>-<end>` of a slice (`end` for a slice to the last problem), for file names."""
        return f"{self.start or 0}-{'end' if self.end is None else self.end}"


def sliced_output(output: str, label: str) -> str:
    """`runs/r.jsonl` -> `runs/r.<label>.jsonl`; a name that carries the label already is kept."""
    path = Path(output)
    if path.stem.endswith(f".{label}"):
        return output
    return str(path.with_name(f"{path.stem}.{label}{path.suffix}"))


# torch.set_num_threads takes a C int.
TORCH_THREADS_LIMIT = 2**31


ROUNDS = ("in_flight", "whole")


@dataclass
class RunConfig:
    search: SearchConfig = field(default_factory=SearchConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    data: DataConfig = field(default_factory=DataConfig)
    output: str = "runs/results.jsonl"
    concurrency: int = 8              # problems searched at once (one batched call per round)
    save_trees: bool = False          # add each whole search tree to its result line
    # in_flight: each problem's round on its own, scored as soon as its steps end (the engine
    # policy; others run whole rounds) | whole: every round waits for its longest step
    rounds: str = "in_flight"
    # torch's intra-op threads in this process (None: torch's default, one per core). Small
    # models run thousands of small ops, where a thread wake-up costs more than the work:
    # the demo runs 1.35x faster on 1 thread than on 2 on a 2-core CPU (demo.yaml).
    torch_threads: int | None = None
    # The ETS code's recipe keys (`store_path` sets `output`; see the module doc):
    num_threads: int | None = None    # accepted, no effect here (the ETS code's SGLang client threads)
    policy_model_type: str | None = None   # a PRESETS row applied to the policy section
    reward_model_type: str | None = None   # a PRESETS row applied to the reward section
    # Recipe keys accepted that do nothing here (search-and-learn's push_to_hub, ...), as
    # given; `ets run` logs a line for each (ets/config/sal_recipes.py says why).
    no_effect: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self)
        integer("concurrency", self.concurrency, 1)
        choice("rounds", self.rounds, ROUNDS)
        self.no_effect = dict(self.no_effect)
        if self.data.sliced:
            # Each slice of a dataset writes its own file: the jobs of an array given one
            # output run side by side (`ets eval` reads the files together).
            self.output = sliced_output(self.output, self.data.slice_label())
        if self.num_threads is not None:
            integer("num_threads", self.num_threads, 1)
        if self.torch_threads is not None:
            integer("torch_threads", self.torch_threads, 1)
            if self.torch_threads >= TORCH_THREADS_LIMIT:
                raise ConfigError(f"torch_threads: {self.torch_threads} must be below 2**31 (torch counts its threads "
                                  f"in 32 bits); e.g. the number of cores")
        for key in ("policy_model_type", "reward_model_type"):
            if getattr(self, key) is not None:
                preset(key, getattr(self, key))
        search = self.search
        if (search.method == "ets" and search.lambda_s > 0 and search.embedder == "policy"
                and self.policy.backend == "vllm"):
            raise ConfigError("search.embedder: policy reads the policy's hidden states, which vLLM does not hand out; "
                              "use embedder: prm (the PRM's), a sentence embedder (e.g. static:all-MiniLM-L6-v2), or "
                              "policy.backend: engine or hf")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
