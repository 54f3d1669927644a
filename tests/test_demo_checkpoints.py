"""Smoke test of the shipped demo checkpoints: they load with the Auto classes and work."""

import pytest
import torch

from ets.demo import (BAD_TOKEN, GOOD_TOKEN, POLICY_PATH, PRM_PATH, STEP_TAG, check_steps,
                      is_correct_solution, parse_question)
from ets.demo.hf import prm_scores, sample_solutions

EASY = "Ann buys 2 pens at 12 dollars each and 3 cups at 20 dollars each. How much does she spend in total?"


@pytest.fixture(scope="module")
def loaded():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    out = {}
    for name, path in (("policy", POLICY_PATH), ("prm", PRM_PATH)):
        out[name] = (AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path))
    return out


def test_checkpoints_are_small_and_in_hf_format():
    files = [f for d in (POLICY_PATH, PRM_PATH) for f in d.iterdir()]
    names = {f.name for f in files}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert sum(f.stat().st_size for f in files) <= 30e6


def test_policy_solves_an_easy_problem_greedily(loaded):
    model, tok = loaded["policy"]
    [[steps]] = sample_solutions(model, tok, [EASY], n=1, temperature=0.0)
    problem = parse_question(EASY)
    assert is_correct_solution(problem, steps), steps
    assert all(check_steps(problem, steps)), steps


def test_prm_has_the_step_tag_convention_and_separates_good_from_bad(loaded):
    model, tok = loaded["prm"]
    for t in (STEP_TAG, GOOD_TOKEN, BAD_TOKEN):
        assert len(tok.encode(t, add_special_tokens=False)) == 1
    good = ["Pens: 2 * 12 = 24", "Cups: 3 * 20 = 60", "Total: 24 + 60 = 84", "The answer is: 84"]
    bad = ["Pens: 2 * 12 = 24", "Cups: 3 * 20 = 50", "Total: 24 + 50 = 74", "The answer is: 74"]
    [[g, b]] = prm_scores(model, tok, [EASY], [[good, bad]])
    assert min(g) > 0.5 and b[1] < 0.5 and b[-1] < 0.5, (g, b)
