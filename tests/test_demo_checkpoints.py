"""Smoke test of the shipped demo checkpoints: they load with the Auto classes and work."""

import pytest
import torch

from ets.demo import (BAD_TOKEN, GOOD_TOKEN, POLICY_PATH, PRM_PATH, STEP_TAG, check_steps,
                      is_correct_solution, parse_question)
from ets.app.demo import prm_scores
from ets.demo.hf import sample_solutions

# An easy demo problem (two items, no last operation; one of the shipped test problems).
EASY = "Ivy buys 7 towels at 30 dollars each and 6 socks at 49 dollars each. How much does she spend in total?"


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


def test_prm_has_the_step_tag_convention_and_flags_items_not_in_the_question(loaded):
    model, tok = loaded["prm"]
    for t in (STEP_TAG, GOOD_TOKEN, BAD_TOKEN):
        assert len(tok.encode(t, add_special_tokens=False)) == 1
    good = ["7 towels at 30 dollars: 7 * 30 = 210", "6 socks at 49 dollars: 6 * 49 = 294",
            "Total: 210 + 294 = 504", "The answer is: 504"]
    not_in_question = ["8 towels at 31 dollars: 8 * 31 = 248"]
    price_of_another_item = ["7 towels at 49 dollars: 7 * 49 = 343"]
    [[g, w, m]] = prm_scores(model, tok, [EASY], [[good, not_in_question, price_of_another_item]])
    assert len(g) == 4 and all(0.0 <= x <= 1.0 for x in g)
    assert min(g) > 0.5, g
    assert w[0] < 0.5 and m[0] < 0.5, (w, m)
    # (It does not reliably flag a hand-made arithmetic slip such as 210 + 294 = 514,
    # which scores 0.76 against 0.82 for the right sum: it learned to check what a step
    # multiplies against the question better than the digits of a result. Its step AUC
    # on the policy's own samples is 0.905; see the README.)
