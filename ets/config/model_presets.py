"""Presets by model name: how the policies and PRMs people search with expect to be run.

A row's `match` is a glob over a model's name, its last path part compared case-blind, so
a hub name (`Qwen/Qwen2.5-Math-7B-Instruct`) and a local copy of it
(`/models/Qwen2.5-Math-7B-Instruct`) both match. The first matching row of `MODEL_PRESETS`
applies: a policy row when `policy.model` matches, a PRM row when `reward.model` does.
A row fills keys the user did not give: an explicit key always wins, and a PRM row's reward
options apply only while `reward.name` is the row's (or not given). The ETS code's model
types (`policy_model_type`, presets.py) apply before these, under the user's keys too.

Sources, row by row: the model cards' prompts (Qwen2.5-Math's chain-of-thought system prompt;
AceMath's single user turn), search-and-learn's defaults (its system prompt for Llama 3.2 and
Qwen2.5 Instruct; `src/sal/config.py`), the Easy-to-Hard code's '# Question' frame for its
Llemma models, and each PRM's reference scoring code (how its reading is implemented here:
docs/rewards.md).
"""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath
from typing import Any, Mapping

from ets.config.checks import ConfigError

# search-and-learn's default system prompt (src/sal/config.py), which its recipes give
# every policy; the ETS code's Llama preset writes the same text after a date header.
SAL_SYSTEM_PROMPT = (
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
# Qwen2.5-Math-Instruct's chain-of-thought prompt (its model card).
QWEN_MATH_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
# Llama 3's chat template writes today's date into the system turn unless given one: the
# template's own fallback date, fixed, keeps a run's prompts the same on every day.
LLAMA3_DATE = {"date_string": "26 Jul 2024"}

MODEL_PRESETS: list[dict[str, Any]] = [
    # --- policies: the chat template is the tokenizer's (policy.chat_template: auto) ---
    {"match": "qwen2.5-math-*-instruct", "kind": "policy",
     "about": "Qwen2.5-Math-1.5B/7B/72B-Instruct: its chat template, the model card's CoT system prompt, "
              "steps end at a blank line, the answer in \\boxed{}",
     "policy": {"chat_template": "auto", "system_prompt": QWEN_MATH_SYSTEM_PROMPT, "step_delimiter": "\n\n"}},
    {"match": "acemath-*-instruct", "kind": "policy",
     "about": "AceMath-1.5B/7B/72B-Instruct: its chat template with the question as the one user turn (its "
              "model card), steps end at a blank line, the answer in \\boxed{}",
     "policy": {"chat_template": "auto", "step_delimiter": "\n\n"}},
    {"match": "qwen2.5-*-instruct", "kind": "policy",
     "about": "Qwen2.5-1.5B/7B-Instruct: its chat template with search-and-learn's system prompt, steps end "
              "at a blank line, the answer in \\boxed{}",
     "policy": {"chat_template": "auto", "system_prompt": SAL_SYSTEM_PROMPT, "step_delimiter": "\n\n"}},
    {"match": "llama-3.[123]-*-instruct", "kind": "policy",
     "about": "Llama-3.1/3.2/3.3-Instruct: its chat template (dated 26 Jul 2024, the template's own default) "
              "with search-and-learn's system prompt, steps end at a blank line",
     "policy": {"chat_template": "auto", "system_prompt": SAL_SYSTEM_PROMPT, "step_delimiter": "\n\n",
                "chat_template_kwargs": LLAMA3_DATE}},
    {"match": "llemma-*-sft-*-hf", "kind": "policy",
     "about": "the Easy-to-Hard Llemma policies (ScalableMath/llemma-7b-sft-*): raw text in their "
              "'# Question' / '# Solution' frame, steps end at a blank line",
     "policy": {"chat_template": False, "prompt_template": "# Question\n\n{question}\n\n# Solution\n\n",
                "step_delimiter": "\n\n"}},
    # --- process reward models ---
    {"match": "qwen2.5-math-prm-*", "kind": "reward",
     "about": "Qwen2.5-Math-PRM-7B/72B: its chat template with its system prompt, <extra_0> after each step, "
              "P(label 1) of its token-classification head there",
     "reward": {"name": "token_classification", "options": {"trust_remote_code": True}}},
    {"match": "skywork-o1-open-prm-qwen-2.5-*", "kind": "reward",
     "about": "Skywork-o1-Open-PRM-Qwen-2.5-1.5B/7B: BOS, question, steps each followed by a newline, "
              "sigmoid of its value head at each newline",
     "reward": {"name": "value_head", "options": {}}},
    {"match": "llama3.1-8b-prm-*", "kind": "reward",
     "about": "RLHFlow Llama3.1-8B-PRM (Deepseek and Mistral data): each step a user turn of its chat template, "
              "P('+') against '-' where the assistant judges it",
     "reward": {"name": "chat_judgement", "options": {}}},
    {"match": "llemma-*-prm-*-hf", "kind": "reward",
     "about": "the Easy-to-Hard Llemma PRMs (ScalableMath/llemma-7b-prm-*): the '# Question' / '# Solution' "
              "frame, sigmoid of the mean logit at the first newline after each step",
     "reward": {"name": "value_head", "options": {
         "marker": "\n", "step_separator": "\n", "template": "# Question\n\n{question}\n\n# Solution\n\n{steps}",
         "tokenize": "whole", "head": "lm_mean"}}},
    {"match": "math-shepherd-mistral-7b-prm", "kind": "reward",
     "about": "Math-Shepherd: question, a space, steps each followed by ' ки' and a newline, "
              "P('+') against '-' at each ' ки'",
     "reward": {"name": "step_tag", "options": {}}},
]


def model_name(path_or_name: str) -> str:
    """The part of a model path or hub name that presets match: its last path part."""
    return PurePosixPath(str(path_or_name).rstrip("/")).name.lower()


def model_preset(model: Any, kind: str) -> dict[str, Any] | None:
    """The first row of `kind` ("policy" or "reward") whose glob matches `model`, else None."""
    if not isinstance(model, str) or not model or model.startswith("tiny:"):
        return None
    name = model_name(model)
    for row in MODEL_PRESETS:
        if row["kind"] == kind and fnmatch.fnmatchcase(name, row["match"]):
            return row
    return None


def fill_under(sections: dict[str, dict[str, Any]], policy: Mapping[str, Any] | None = None,
               reward: Mapping[str, Any] | None = None) -> None:
    """Put a preset's policy keys and its reward (`name` and `options`) into the sections,
    under the keys already there; the reward options only while reward.name is the
    preset's (or not given): another reward's options would be unknown keys to it."""
    if policy is not None:
        sections["policy"] = {**policy, **sections["policy"]}
    if reward is not None:
        mine = sections["reward"]
        if mine.get("name", reward["name"]) == reward["name"]:
            options = mine.get("options") or {}
            if not isinstance(options, Mapping):
                raise ConfigError(f"reward.options must be a mapping of option names to values, got {options!r}")
            sections["reward"] = {**mine, "name": reward["name"], "options": {**reward["options"], **options}}


def apply_model_presets(sections: dict[str, dict[str, Any]]) -> None:
    """Fill the policy and reward sections from the rows their models match, under the keys
    already there (the user's, and an ETS model type's)."""
    policy_row = model_preset(sections["policy"].get("model"), "policy")
    reward_row = model_preset(sections["reward"].get("model"), "reward")
    fill_under(sections, policy_row and policy_row["policy"], reward_row and reward_row["reward"])


def model_preset_notes(config) -> list[str]:
    """`--check`'s lines on the presets a config's models matched (and one that could not
    apply because reward.name names another reward)."""
    notes = []
    row = model_preset(config.policy.model, "policy")
    if row is not None:
        notes.append(f"policy.model matches the preset {row['match']!r} (`ets presets`): it set "
                     f"{', '.join('policy.' + k for k in row['policy'])} where not given explicitly")
    row = model_preset(config.reward.model, "reward")
    if row is not None:
        if config.reward.name == row["reward"]["name"]:
            notes.append(f"reward.model matches the preset {row['match']!r}: reward.name {row['reward']['name']}"
                         f"{', its options' if row['reward']['options'] else ''} where not given explicitly; "
                         f"it reads {row['about']}")
        else:
            notes.append(f"reward.model matches the preset {row['match']!r}, which reads it with "
                         f"{row['reward']['name']!r}; reward.name {config.reward.name!r} given explicitly wins")
    return notes


def model_preset_table() -> list[str]:
    """`MODEL_PRESETS` as one Markdown table, a row per preset: what `ets presets` prints."""
    lines = ["| model name (glob) | for | what it sets |", "|---|---|---|"]
    for row in MODEL_PRESETS:
        lines.append(f"| `{row['match']}` | {row['kind']} | {row['about']} |")
    return lines


def model_preset_keys(match: str) -> list[str]:
    """Every key a preset sets, in full: `ets presets NAME`."""
    for row in MODEL_PRESETS:
        if row["match"] == match or fnmatch.fnmatchcase(model_name(match), row["match"]):
            if row["kind"] == "policy":
                return [f"policy.{k}: {v!r}" for k, v in row["policy"].items()]
            return [f"reward.name: {row['reward']['name']!r}"] + [
                f"reward.options.{k}: {v!r}" for k, v in row["reward"]["options"].items()]
    word = match.lower()
    near = [row["match"] for row in MODEL_PRESETS if word in row["match"] or word in row["about"].lower()]
    hint = (f"; presets that mention it: {', '.join(near)} (give one of these, or a model name it matches)"
            if near else "")
    raise ConfigError(f"no preset matches {match!r} (a model name such as Qwen/Qwen2.5-Math-7B-Instruct, or a "
                      f"preset's glob){hint}; `ets presets` lists them")
