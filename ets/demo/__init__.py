"""The embedded demo: a checkable deep multi-step arithmetic task with its own small models.

    task.py        problems (shopping bills worked out by place value): generator, text, parser
    solutions.py   reference solutions in many valid orders and several phrasings
    checker.py     the exact step checker: check_steps(problem, steps) -> [bool], and
                   judge_steps -> the kind of each error (arithmetic, operand, inherited, ...)
    splits.py      disjoint train / validation / test splits; the shipped test file
    hf.py          plain-transformers sampling and the PRM's input text (training, quality bars)
    metrics.py     ROC AUC and the weighted vote used by scripts/demo_quality.py
    spoil.py       wrong steps of the policy's kinds, for training the PRM
    checkpoints/   policy/ (LlamaForCausalLM, 4 layers, 1.13M parameters) and prm/ (the
                   policy plus 2 layers, 1.66M), one shared 597-token BPE tokenizer with
                   digits split, trained by scripts/train_demo_models.py; training.json
                   records the run

The constants below are the formats the demo models were trained on; the search settings
live in demo.yaml (a test checks that the two agree).
"""

from pathlib import Path

from ets.demo.checker import check_steps, is_correct_solution, judge_steps, parse_answer
from ets.demo.solutions import ANSWER_PREFIX, iter_orders, reference_solution, render_solution
from ets.demo.splits import TEST_PATH, generate_split, load_test_problems, split_of
from ets.demo.task import DemoParseError, Item, Problem, generate_problem, parse_question

CHECKPOINTS = Path(__file__).parent / "checkpoints"
POLICY_PATH = CHECKPOINTS / "policy"
PRM_PATH = CHECKPOINTS / "prm"

PROMPT_TEMPLATE = "{question}\n"   # the policy reads the question, then one step per line
STEP_DELIMITER = "\n"
STEP_TAG = " ки"                   # PRM input: question + " " + step1 + " ки\n" + step2 + " ки" ...
GOOD_TOKEN, BAD_TOKEN = "+", "-"

__all__ = [
    "ANSWER_PREFIX", "BAD_TOKEN", "CHECKPOINTS", "DemoParseError", "GOOD_TOKEN", "Item",
    "POLICY_PATH", "PRM_PATH", "PROMPT_TEMPLATE",
    "Problem", "STEP_DELIMITER", "STEP_TAG", "TEST_PATH", "check_steps", "iter_orders",
    "generate_problem", "generate_split", "is_correct_solution", "judge_steps", "load_test_problems",
    "parse_answer", "parse_question", "reference_solution", "render_solution", "split_of",
]
