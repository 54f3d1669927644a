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
accounting where they depart from the project's (the default, `project`, keeps the
project's corrected behaviour).

search-and-learn's recipes (`approach`, `n`, `model_path`, ...) are read as they are too
(sal_recipes.py, docs/search_and_learn.md): each key mapped to ours or named as having no
effect (`RunConfig.no_effect`), its defaults under the recipe's keys.

    checks.py    ConfigError and the shared value checks (each field against its annotation)
    sections.py  the dataclasses, their allowed values and defaults
    presets.py   the ETS code's model conventions (PRESETS)
    model_presets.py  presets by model name (MODEL_PRESETS): Qwen2.5-Math, Llama 3, the PRMs
    sal_recipes.py  search-and-learn's keys, defaults and fixed choices (SAL_KEYS)
    yaml_input.py  YAML read as a user means it: YAML 1.2 numbers, no key twice, aliases bounded
    loading.py   YAML files, overrides, the recipes' layouts -> RunConfig
"""

from ets.config.checks import ConfigError
from ets.config.embedders import HIDDEN_EMBEDDERS
from ets.config.loading import (SECTIONS, STORE_PATH_FILE, TOP_LEVEL, config_from_dict, load_config,
                                merge_overrides, parse_override)
from ets.config.model_presets import (MODEL_PRESETS, SAL_SYSTEM_PROMPT, model_preset, model_preset_keys,
                                      model_preset_notes, model_preset_table)
from ets.config.presets import LLAMA_SYSTEM_PROMPT, PRESETS, apply_presets, preset_lines
from ets.config.sections import (AGGREGATIONS, ANSWER_RULES, COMPAT_MODES, COSTS, ETS_CODE, ETS_KEY_ALIASES,
                                 MARKED_ANSWER_RULES, METHOD_ALIASES, POLICY_BACKENDS, PROJECT,
                                 DEFAULT_ANSWER_MARKERS, REFERENCE_PROMPT_TOKENS, VLLM_OPTIONS, VOTES, DataConfig,
                                 PolicyConfig, RewardConfig, RunConfig, SearchConfig)
from ets.config.yaml_input import read_yaml

__all__ = [
    "AGGREGATIONS", "ANSWER_RULES", "COMPAT_MODES", "COSTS", "ETS_CODE", "ETS_KEY_ALIASES", "LLAMA_SYSTEM_PROMPT",
    "MARKED_ANSWER_RULES", "METHOD_ALIASES", "MODEL_PRESETS", "POLICY_BACKENDS", "PRESETS", "PROJECT",
    "DEFAULT_ANSWER_MARKERS", "SAL_SYSTEM_PROMPT",
    "REFERENCE_PROMPT_TOKENS", "SECTIONS", "STORE_PATH_FILE", "TOP_LEVEL", "VLLM_OPTIONS", "VOTES",
    "ConfigError", "DataConfig", "HIDDEN_EMBEDDERS", "PolicyConfig", "RewardConfig", "RunConfig", "SearchConfig",
    "apply_presets", "config_from_dict", "load_config", "merge_overrides", "model_preset", "model_preset_keys",
    "model_preset_notes", "model_preset_table", "parse_override", "preset_lines", "read_yaml",
]
