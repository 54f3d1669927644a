"""The model conventions of the ETS (and REBASE) code, as one data table: `PRESETS`.

A recipe's `policy_model_type` / `reward_model_type` name a row; `apply_presets` fills the
policy and reward sections from it, under the user's explicit keys. `ets presets` prints
the table (`preset_lines`); docs/FIDELITY.md says how each row was read from the code.
"""

from __future__ import annotations

from typing import Any

from ets.config.checks import ConfigError, did_you_mean
from ets.config.model_presets import SAL_SYSTEM_PROMPT, fill_under


# The system prompt the ETS code gives its instruction-tuned Llama policy (rebase.py):
# search-and-learn's, after a date header.
LLAMA_SYSTEM_PROMPT = "Cutting Knowledge Date: December 2023\nToday Date: 05 Jan 2025\n\n" + SAL_SYSTEM_PROMPT

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
            "chat_template": False,  # the chat turns are written above, by hand, as the ETS code does
            "step_delimiter": "\n\n"},
        "reward": {"name": "chat_judgement", "options": {"good_token": "+", "bad_token": "-"}},
    },
}


def preset(key: str, name: Any) -> dict[str, Any]:
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigError(f"{key}: {name!r} is not a preset{did_you_mean(name, PRESETS)}; "
                          f"known: {', '.join(PRESETS)} (`ets presets` lists them)")
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



def apply_presets(sections: dict[str, dict[str, Any]], top: dict[str, Any]) -> None:
    """Fill the policy and reward sections from the named presets, under the user's keys."""
    policy = top.get("policy_model_type")
    reward = top.get("reward_model_type")
    fill_under(sections, preset("policy_model_type", policy)["policy"] if policy is not None else None,
               preset("reward_model_type", reward)["reward"] if reward is not None else None)
