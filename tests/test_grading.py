"""Equivalence by math-verify, our thin normalisation around it, and its robustness."""

import threading
import time

import pytest

from ets.answers import grading
from ets.answers.grading import answers_match, is_equivalent, normalize
from tests.helpers import load_script


@pytest.mark.parametrize(
    "predicted, truth",
    [
        ("\\frac{1}{2}", "0.5"),
        ("0.5", "\\frac{1}{2}"),
        ("\\dfrac12", "1/2"),
        ("70,000", "70000"),
        ("1,000,000", "1000000"),
        ("10,\\!000", "10000"),
        ("$18$", "18"),
        ("\\$18.00", "18"),
        ("18 eggs", "18"),
        ("5 square feet", "5"),
        ("\\text{18 dollars}", "18"),
        ("18 \\text{ cm}", "18"),
        ("25\\%", "25"),
        ("2.5%", "2.5"),
        ("90^\\circ", "90"),
        ("90°", "90^\\circ"),        # the degree sign as typed
        ("4210_{5}", "4210_5"),
        # what math-verify does not read, normalised first
        ("\\frac\\pi2", "\\frac{\\pi}{2}"),      # \frac's arguments unbraced
        ("(-infinity, 3)", "(-\\infty,3)"),       # constants as words
        ("2 pi", "2\\pi"),
        ("5 million", "5000000"),                # a scale word scales; a unit word goes
        ("2.5 thousand", "2500"),
        ("-2 \\le x \\le 7", "[-2,7]"),          # an inequality in one variable is its interval
        ("3 < x \\le 4", "(3,4]"),
        ("x \\ge 2", "[2,\\infty)"),
        ("x = 5", "5"),
        ("\\{2, 1\\}", "\\{1, 2\\}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\pi/2)"),
        ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
        ("\\text{(C)}", "C"),
        ("Evelyn", "\\text{Evelyn}"),
        ("\\text{ monday }", "Monday"),
    ],
)
def test_equal(predicted, truth):
    assert is_equivalent(predicted, truth)


@pytest.mark.parametrize(
    "predicted, truth",
    [
        ("2", "3"),
        ("0.333", "\\frac{1}{3}"),        # strict: a rounded decimal is not the fraction
        ("(1,2)", "(2,1)"),                # ordered pairs stay ordered
        ("\\pi", "3.14159"),
        ("Eveyln", "Evelyn"),              # words compared as text, not as symbol products
        ("2 pi", "2"),                     # "pi" is not a unit word
        ("52_9", "52_8"),                  # a number in another base is another number
        ("5 million", "5"),
        ("x < 3", "(3,\\infty)"),
    ],
)
def test_not_equal(predicted, truth):
    assert not is_equivalent(predicted, truth)


@pytest.mark.parametrize(
    "predicted",
    [None, "", "   ", "{{{", "\\frac{", "\\boxed{", 5, ["1"], "a" * 5000, "\\undefinedmacro{x}^^_"],
)
def test_garbage_is_unequal_and_never_raises(predicted):
    assert is_equivalent(predicted, "5") is False
    assert is_equivalent("5", predicted) is False


def test_long_identical_strings_compare_without_parsing():
    long = "x" * 5000
    assert is_equivalent(long, long)


def test_normalize_is_light():
    assert normalize("  $18$ ") == "18"
    assert normalize("\\text{18 dollars}") == "18"
    assert normalize("50\\%") == "50"
    assert normalize("\\text{Evelyn}") == "\\text{Evelyn}"   # words are not unwrapped


def test_answers_match_is_symmetric():
    assert answers_match("\\frac{1}{2}", "0.5") and answers_match("0.5", "\\frac{1}{2}")
    assert not answers_match("1", "2")
    assert not answers_match(None, "2") and not answers_match("2", None)


def _off_main_thread(fn):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(timeout=120)
    return out[0]


def test_works_off_the_main_thread():
    # math-verify's timeouts need the main thread: off it, grading runs in a helper process.
    assert _off_main_thread(lambda: (is_equivalent("\\frac{3}{6}", "0.5"), is_equivalent("3", "4"))) == (True, False)


def test_a_hanging_comparison_times_out_as_unequal(monkeypatch):
    # sympy cannot settle 9^(9^(9^9)) == 5; math-verify's own alarm stops it
    monkeypatch.setattr(grading, "TIMEOUT_S", 1)
    start = time.perf_counter()
    assert is_equivalent("9^{9^{9^{9}}}", "5") is False
    assert time.perf_counter() - start < 10


def test_off_main_thread_backstop_kills_the_worker(monkeypatch):
    # math-verify in the worker would give up on this after 5 s; our backstop fires first
    monkeypatch.setattr(grading, "WORKER_TIMEOUT_S", 0.5)
    assert _off_main_thread(lambda: is_equivalent("9^{9^{9^{9}}}", "7")) is False
    assert grading._worker._pool is None                    # killed; the next call spawns anew
    monkeypatch.setattr(grading, "WORKER_TIMEOUT_S", 60)
    assert _off_main_thread(lambda: is_equivalent("\\frac{6}{12}", "0.5")) is True


# ---- the real benchmarks: reference solutions must grade as correct ----

@pytest.mark.parametrize("dataset", ["gsm8k", "math500"])
def test_reference_solutions_agree_with_ground_truth(dataset):
    check = load_script("check_grading")
    if not (check.DEFAULT_DATA / check.DATASETS[dataset][0]).is_file():
        pytest.skip(f"benchmark data not found at {check.DEFAULT_DATA} (../shared/data is absent on a fresh clone)")
    # The full check takes a few seconds, so the test runs all of it.
    report = check.check_dataset(dataset, check.DEFAULT_DATA)
    assert report.agreement >= 99.0, [(m.index, m.extracted, m.truth) for m in report.misses]
