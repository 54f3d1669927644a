"""Prompt templates: `{question}` is the one placeholder; every other brace is text."""

import json
from pathlib import Path

import pytest

from ets.app.cli import main
from ets.config import ConfigError, PolicyConfig
from ets.models import load_tokenizer
from ets.policy.steps import format_prompt

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
MATH = "Solve step by step; put the final answer in \\boxed{}.\n{question}\nAnswer: {x} {0}\n"


def test_other_braces_are_literal():
    text, ids = format_prompt(load_tokenizer("tiny:llama"), MATH, "What is {2 + 3}?")
    assert text == "Solve step by step; put the final answer in \\boxed{}.\nWhat is {2 + 3}?\nAnswer: {x} {0}\n"
    assert ids and isinstance(ids[0], int)


def test_a_question_holding_the_placeholder_is_not_filled_twice():
    text, _ = format_prompt(load_tokenizer("tiny:llama"), "Q: {question}", "say {question}")
    assert text == "Q: say {question}"


def test_a_template_without_the_placeholder_is_refused():
    with pytest.raises(ConfigError, match=r"\{question\}"):
        PolicyConfig(prompt_template="\\boxed{}")


def test_ets_run_with_a_boxed_template(tmp_path):
    out = tmp_path / "r.jsonl"
    template = "Put the answer in \\boxed{}. {question}\n"
    code = main(["run", "--quiet", "--config", str(TINY), f"output={out}", "data.limit=1", "width=2",
                 "save_trees=true", f"policy.prompt_template={json.dumps(template)}"])
    assert code == 0
    record = json.loads(out.read_text().splitlines()[0])
    assert record["tree"]["nodes"][0]["text"] == template.replace("{question}", record["question"])
