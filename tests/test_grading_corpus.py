"""The grader on hand-written pairs (tests/grading_corpus.py): every equivalent pair judged
equal, every non-equivalent one unequal, in each topic; and the tolerance option."""

import pytest

from ets.answers.grading import is_equivalent
from tests.grading_corpus import EQUIVALENT, NOT_EQUIVALENT

TOPICS = ("fractions", "decimals", "units", "text", "choices", "tuples", "intervals", "degrees", "percentages", "pi")


def test_the_corpus_is_big_enough_and_covers_every_topic():
    assert sum(map(len, EQUIVALENT.values())) >= 100
    assert sum(map(len, NOT_EQUIVALENT.values())) >= 100
    for topic in TOPICS:
        assert len(EQUIVALENT[topic]) >= 5 and len(NOT_EQUIVALENT[topic]) >= 5, topic


@pytest.mark.parametrize("topic", sorted(EQUIVALENT))
def test_equivalent_pairs_are_judged_equal(topic):
    missed = [pair for pair in EQUIVALENT[topic] if not is_equivalent(*pair)]
    assert not missed, f"{topic}: {len(missed)} of {len(EQUIVALENT[topic])} judged unequal: {missed}"


@pytest.mark.parametrize("topic", sorted(NOT_EQUIVALENT))
def test_non_equivalent_pairs_are_judged_unequal(topic):
    wrong = [pair for pair in NOT_EQUIVALENT[topic] if is_equivalent(*pair)]
    assert not wrong, f"{topic}: {len(wrong)} of {len(NOT_EQUIVALENT[topic])} judged equal: {wrong}"


@pytest.mark.parametrize(
    "predicted, truth",
    [("4.666667", "\\frac{14}{3}"), ("0.053571", "\\frac{3}{56}"), ("(4.666667, 1)", "(\\frac{14}{3}, 1)"),
     ("0.3333333", "0.333333")],
)
def test_float_rounding_allows_a_tolerance(predicted, truth):
    assert not is_equivalent(predicted, truth)
    assert is_equivalent(predicted, truth, float_rounding=6)
    assert not is_equivalent("4.67", "\\frac{14}{3}", float_rounding=6)   # 6 places: 4.67 is still off
    assert is_equivalent("4.67", "\\frac{14}{3}", float_rounding=2)


def test_float_rounding_must_be_places():
    with pytest.raises(ValueError, match="float_rounding"):
        is_equivalent("1", "1", float_rounding=-1)
