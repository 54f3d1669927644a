"""Smoke test of the shipped demo checkpoints: they load with the Auto classes and work."""

import pytest
import torch

from ets.demo import (BAD_TOKEN, GOOD_TOKEN, POLICY_PATH, PRM_PATH, STEP_TAG, check_steps,
                      is_correct_solution, parse_question)
from ets.app.demo import demo_surprise, fit_demo_surprise, prm_scores
from ets.demo.hf import sample_solutions

# An easy demo problem (two items, no last operation; one of the shipped test problems).
EASY = "Mia buys 8 pens at 217 dollars each and 7 cups at 378 dollars each. How much does she spend in total?"


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


GOOD = ["8 pens at 217 dollars, the hundreds: 8 * 200 = 1600", "8 pens at 217 dollars, the tens: 8 * 10 = 80",
        "Pens, hundreds and tens: 1600 + 80 = 1680", "8 pens at 217 dollars, the ones: 8 * 7 = 56",
        "8 pens at 217 dollars: 1680 + 56 = 1736", "7 cups at 378 dollars, the hundreds: 7 * 300 = 2100",
        "7 cups at 378 dollars, the tens: 7 * 70 = 490", "Cups, hundreds and tens: 2100 + 490 = 2590",
        "7 cups at 378 dollars, the ones: 7 * 8 = 56", "7 cups at 378 dollars: 2590 + 56 = 2646",
        "Total: 1736 + 2646 = 4382", "The answer is: 4382"]


def test_prm_has_the_step_tag_convention_and_passes_a_right_solution(loaded):
    model, tok = loaded["prm"]
    for t in (STEP_TAG, GOOD_TOKEN, BAD_TOKEN):
        assert len(tok.encode(t, add_special_tokens=False)) == 1
    problem = parse_question(EASY)
    assert all(check_steps(problem, GOOD))
    [[g]] = prm_scores(model, tok, [EASY], [[GOOD]])
    assert len(g) == len(GOOD) and all(0.0 <= x <= 1.0 for x in g)
    assert min(g) > 0.5, g


@pytest.mark.xfail(strict=True, reason="the shipped PRM's known blind spot (docs/demo.md, 'The models'): it "
                   "scores hand-made operand errors and most hand-made slips above 0.5; a better PRM makes "
                   "this pass, and then this mark must go")
def test_prm_flags_hand_made_errors(loaded):
    model, tok = loaded["prm"]
    wrong = [[GOOD[0], "8 pens at 217 dollars, the tens: 8 * 10 = 90"],          # a slip
             GOOD[:2] + ["Pens, hundreds and tens: 1600 + 80 = 1780"],            # a carry
             ["9 pens at 218 dollars, the hundreds: 9 * 200 = 1800"],             # an item not in the question
             ["8 pens at 378 dollars, the hundreds: 8 * 300 = 2400"]]             # another item's price
    scores = prm_scores(model, tok, [EASY], [wrong])[0]
    assert all(s[-1] < 0.5 for s in scores), scores


def test_the_demo_readout_catches_slips_the_tag_alone_misses(loaded):
    """The demo config reads the PRM's tag with its LM's surprise (rewards/surprise.py)."""
    model, tok = loaded["prm"]
    wrong = [[GOOD[0], "8 pens at 217 dollars, the tens: 8 * 10 = 90"],          # a slip
             GOOD[:2] + ["Pens, hundreds and tens: 1600 + 80 = 1780"],            # a carry
             GOOD[:2] + ["Pens, hundreds and tens: 1600 + 90 = 1690"]]            # a miscopied operand
    tag = prm_scores(model, tok, [EASY], [wrong])[0]
    read = prm_scores(model, tok, [EASY], [wrong], surprise=demo_surprise())[0]
    assert tag[1][-1] > 0.5 and tag[2][-1] > 0.5, tag    # the tag alone passes the carry and the miscopy ...
    assert read[0][-1] < 0.5 and read[2][-1] < 0.5, read  # ... the readout flags the slip and the miscopy,
    assert read[1][-1] < tag[1][-1] - 0.3, (tag, read)    # and doubts the carry, if not enough to fail it
    [[right]] = prm_scores(model, tok, [EASY], [[GOOD]], surprise=demo_surprise())
    assert min(right) > 0.5, right


def test_fit_demo_surprise_fits_on_validation_samples_and_beats_the_tag_in_sample(loaded):
    """scripts/fit_prm_surprise.py's fit, small: 6 problems x 4 samples of the validation split."""
    readout, figures = fit_demo_surprise(*loaded["policy"], *loaded["prm"], problems=6, samples=4)
    assert figures["steps"] > 50 and 0 < figures["wrong_steps"] < figures["steps"]
    assert readout.tag > 0 and figures["auc_readout"] >= figures["auc_tag"] - 0.01
