"""Final-answer extraction and the terminal-step test, on hand-written texts."""

import pytest

from ets.answers.extract import Extracted, extract, extract_answer, gsm8k_ground_truth, is_final_step, last_boxed
from ets.config import ANSWER_RULES, MARKED_ANSWER_RULES


@pytest.mark.parametrize(
    "text, expected",
    [
        # \boxed: braces balanced, the last one wins, \fbox and `\boxed 5` too
        ("so $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("first \\boxed{3}, then \\boxed{4}", "4"),
        ("\\boxed{\\left\\{1, 2\\right\\}}", "\\left\\{1, 2\\right\\}"),
        ("\\boxed{a^{2}+b_{1}}", "a^{2}+b_{1}"),
        ("\\fbox{7}", "7"),
        ("$\\boxed 5$", "5"),
        # a box wins over a phrase, wherever the phrase is
        ("The answer is 3. Wait, it is \\boxed{4}", "4"),
        ("\\boxed{4}\nThe answer is: 3", "4"),
        # phrases: colon or not, $...$ value, sentence end cut, decimals kept
        ("Step 3: so 2+2=4. The answer is: 4", "4"),
        ("The answer is 18", "18"),
        ("The answer is: 3.5.", "3.5"),
        ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}"),
        ("Therefore, the final answer is: 70,000. I hope it is correct.", "70,000"),
        ("the answer is 2\nthe answer is 5", "5"),
        # Math-Shepherd step tags are not part of the answer
        ("Step 2: The answer is: 4 ки", "4"),
        # The answer that starts the line, not the prose or the equation after it: the
        # grader reads "A ... = B" as B, so "4 since 2 + 3 = 5" would grade as 5.
        ("The answer is 18, which is what Janet makes.", "18"),
        ("The answer is 18 since she sells 9 eggs.", "18"),
        ("The answer is 4 since 2 + 3 = 5", "4"),
        ("The answer is \\frac{1}{2}, because half of it is left.", "\\frac{1}{2}"),
        ("The answer is 1,234 dollars.", "1,234"),
        ("The answer is 2 + 3 = 5", "2 + 3 = 5"),
        ("The answer is (2, 3).", "(2, 3)"),
        ("The answer is **5**.", "5"),
        ("The final answer is $\\$18$. I hope it is correct.", "\\$18"),   # an escaped dollar inside
        ("So the answer is 7.", "7"),
        ("My answer is wrong so far. Retry: 2+3 = 5", "5"),             # words, not an answer: the last number
        ("I am not sure the answer is right. She makes 18 dollars.", "18"),  # mid-sentence: not the phrase
        ("So my final answer is 12.", "12"),
        ("and so onThe answer is: 4", "4"),       # a step that ended at EOS runs on into the next
        ("the answer is 18:", "18"),
        ("I will present it in \\boxed format. The answer is 5.", "5"),  # \boxed with no number after it
        # GSM8K
        ("She makes 9 * 2 = $18.\n#### 18", "18"),
        ("#### 1,000", "1,000"),
        ("#### Step 1: add\n3 + 4 = 7\n#### 7", "7"),     # a Markdown heading is not a marker
    ],
)
def test_extract(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    [None, "", "no number here", "\\boxed{unclosed", "\\boxed{}", "The answer is:", "####   ", "and so on..."],
)
def test_extract_none(text):
    assert extract_answer(text) is None
    assert extract(text) == Extracted(None, None)


@pytest.mark.parametrize(
    "text, answer, rule",
    [
        ("So $x = \\boxed{5}$; checking, 5 + 2 = 7", "5", "boxed"),
        ("Step 3: so 2+2=4. The answer is: 4", "4", "marker"),
        ("She makes 9 * 2 = $18.\n#### 18", "18", "hashes"),
        ("#### 18\nThe answer is 19", "19", "marker"),                # the later marker wins
        ("The answer is 19\n#### 18", "18", "hashes"),
        ("The answer is 18. She has 18 apples and 3 pears.", "18", "marker"),   # a marker before a number
        # the last number, as lm-eval-harness's GSM8K flexible-extract reads it
        ("Therefore, Janet makes 624 dollars per day.", "624", "last_number"),
        ("She spends $1,234.50 in all.", "1234.50", "last_number"),
        ("The total is 70,000.", "70000", "last_number"),
        ("So x = -5", "-5", "last_number"),
        ("3 and 4 make 7...", "7", "last_number"),
        ("The answer is: 12 + 3 = 15 ки", "12 + 3 = 15", "marker"),
        ("3 + 4 = 7, so the answer is:", "7", "last_number"),           # a marker with nothing after it
    ],
)
def test_extract_names_the_rule_that_found_the_answer(text, answer, rule):
    assert extract(text) == Extracted(answer, rule)
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    "text, rules, found",
    [
        ("no marker here, just 42", MARKED_ANSWER_RULES, (None, None)),
        ("Therefore, Janet makes 624 dollars per day.", MARKED_ANSWER_RULES, (None, None)),
        ("\\boxed{5}\nThe answer is 6", ["marker"], ("6", "marker")),
        ("\\boxed{5}\nThe answer is 6", ["hashes", "last_number"], ("6", "last_number")),
        ("The answer is 6\n#### 7", ["marker"], ("6", "marker")),
        ("#### 1,800", ["last_number"], ("1800", "last_number")),
        ("#### 1,800", ["boxed", "marker", "hashes"], ("1,800", "hashes")),   # as written, as before
    ],
)
def test_extract_tries_only_the_rules_it_is_given(text, rules, found):
    assert extract(text, rules) == Extracted(*found)
    assert extract_answer(text, rules) == found[0]


def test_every_rule_can_fire_and_the_names_are_the_configs():
    texts = ["\\boxed{1}", "The answer is 2", "#### 3", "it is 4 now"]
    assert tuple(extract(t).rule for t in texts) == ANSWER_RULES


def test_last_boxed_skips_an_unclosed_last_box():
    # a step cut at max_step_tokens leaves an open box: the complete one before it counts
    assert last_boxed("\\boxed{2} and \\boxed{3") == "2"


@pytest.mark.parametrize(
    "step, final",
    [
        ("So the total is \\boxed{12}.", True),
        ("The answer is: 12", True),
        ("Therefore, the final answer is $\\boxed{", True),   # cut mid-answer: still final
        ("Step 3: so 2+2=4. The answer is: 4", True),         # a marker starting a sentence
        ("**The answer is 5**", True),
        ("The final answer is: 7", True),
        ("Therefore, the final answer is 9.", True),
        ("#### 12", False),                                    # GSM8K's marker only when configured
        ("Step 2: 3 + 4 = 7", False),
        ("#### Step 2: add them", False),
        ("The answers are different for each case", False),
        ("my answer is wrong so far", False),                  # "answer is" inside a sentence
        ("so the answer is still unclear", False),             # case as written
        ("I think The answer is 3", False),
        ("The answer isn't clear yet", False),                 # a marker ends at a word's end
        ("The final answer is 7.", True),                      # a chat model's, without the ETS code's colon
        ("The final answer isn't 7", False),
        ("", False),
    ],
)
def test_is_final_step(step, final):
    assert is_final_step(step) is final


@pytest.mark.parametrize(
    "step, markers, final",
    [
        ("#### 12", ["####"], True),
        ("so 3 + 9 = 12\n#### 12", ["####"], True),
        ("#### Step 2: add them", ["####"], False),           # a Markdown heading, not an answer
        ("Final Answer: 12", ["Final Answer:"], True),
        ("The answer is: 4", [], False),                      # no markers: EOS and \boxed{} only
        ("So \\boxed{4}", [], True),
    ],
)
def test_is_final_step_with_configured_markers(step, markers, final):
    assert is_final_step(step, markers) is final


def test_reference_final_is_the_ets_code_rule():
    from ets.answers.extract import reference_final

    # anywhere in the whole text, the prompt included, case as written
    assert reference_final("Q\nmy guess: The answer is 4", "my guess: The answer is 4")
    assert reference_final("Q: The answer is what?\nstep", "step")           # the prompt counts
    assert reference_final("Q\nThe final answer is: 5", "The final answer is: 5")
    assert not reference_final("Q\nThe final answer is 5", "The final answer is 5")   # its colon
    # "Therefore, the final answer is" only in the newest step (the Llama system prompt has it)
    assert not reference_final("... conclude with: Therefore, the final answer is: ...\nstep", "step")
    assert reference_final("Q\nTherefore, the final answer is $5$", "Therefore, the final answer is $5$")
    assert not reference_final("Q\nthe answer is 4", "the answer is 4")
    assert not reference_final("Q\nSo \\boxed{4}", "So \\boxed{4}")   # a box alone is no leaf there


def test_gsm8k_ground_truth_drops_thousands_commas():
    assert gsm8k_ground_truth("... = 70,000\n#### 70,000") == "70000"
    assert gsm8k_ground_truth("no marker") is None


def test_a_configured_answer_marker_is_read_where_a_sentence_starts_with_it():
    """`search.answer_markers` end a trajectory; the answer after one is the one read."""
    markers = ["Final Answer:"]
    assert extract("Work.\nFinal Answer: $x^2+1$", markers=markers) == ("x^2+1", "marker")
    assert extract("Answer: $\\frac{1}{2}$", markers=["Answer:"]) == ("\\frac{1}{2}", "marker")
    assert extract("Work.\nFinal Answer: $x^2+1$") == ("1", "last_number")          # not configured: not read
    assert extract("See the Final Answer: below. 3 + 4 = 7", markers=markers) == ("7", "last_number")
