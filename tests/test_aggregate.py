"""Aggregations and votes, each worked by hand."""

import math

import pytest

from ets.answers.aggregate import aggregate, choose_answer, group_answers

SCORES = [0.9, 0.5, 0.8]


@pytest.mark.parametrize(
    "aggregation, expected",
    [("last", 0.8), ("min", 0.5), ("mean", (0.9 + 0.5 + 0.8) / 3), ("prod", 0.9 * 0.5 * 0.8)],
)
def test_aggregations(aggregation, expected):
    assert math.isclose(aggregate(SCORES, aggregation), expected)


def test_aggregate_of_no_steps_is_zero():
    assert aggregate([], "prod") == 0.0


def test_unknown_names_list_the_choices():
    with pytest.raises(ValueError, match="last, min, mean, prod"):
        aggregate(SCORES, "max")
    with pytest.raises(ValueError, match="best, majority, weighted"):
        choose_answer(["1"], [[0.5]], "last", "plurality")


def test_lengths_must_agree():
    with pytest.raises(ValueError, match="one per trajectory"):
        choose_answer(["1", "2"], [[0.5]])


def test_grouping_is_by_equivalence_and_skips_none():
    assert group_answers(["\\frac{1}{2}", None, "3", "0.5", "1/2"]) == [[0, 3, 4], [2]]


# Five trajectories, last-step scores:  answer   last   min
#   t0  "\frac{1}{2}"  [0.2, 0.9]  ->  1/2      0.9    0.2
#   t1  "3"            [0.6, 0.6]  ->  3        0.6    0.6
#   t2  "0.5"          [0.9, 0.3]  ->  1/2      0.3    0.3
#   t3  "3"            [0.7, 0.5]  ->  3        0.5    0.5
#   t4  None           [1.0, 1.0]  ->  (does not vote)
#   t5  "3.0"          [0.4, 0.1]  ->  3        0.1    0.1
ANSWERS = ["\\frac{1}{2}", "3", "0.5", "3", None, "3.0"]
STEP_SCORES = [[0.2, 0.9], [0.6, 0.6], [0.9, 0.3], [0.7, 0.5], [1.0, 1.0], [0.4, 0.1]]


@pytest.mark.parametrize(
    "aggregation, vote, expected",
    [
        # best: highest single trajectory; t4 scores 1.0 but has no answer
        ("last", "best", "\\frac{1}{2}"),     # t0 0.9
        ("min", "best", "3"),                 # t1 0.6
        # majority: {3, 3, 3.0} = 3 votes beat {1/2, 0.5} = 2, whatever the scores
        ("last", "majority", "3"),
        # weighted, last: 1/2 -> 0.9 + 0.3 = 1.2;  3 -> 0.6 + 0.5 + 0.1 = 1.2: a tie,
        # which goes to the group seen first (t0's)
        ("last", "weighted", "\\frac{1}{2}"),
        # weighted, min: 1/2 -> 0.2 + 0.3 = 0.5;  3 -> 0.6 + 0.5 + 0.1 = 1.2
        ("min", "weighted", "3"),
        # weighted, prod: 1/2 -> 0.18 + 0.27 = 0.45;  3 -> 0.36 + 0.35 + 0.04 = 0.75
        ("prod", "weighted", "3"),
        # weighted, mean: 1/2 -> 0.55 + 0.6 = 1.15;  3 -> 0.6 + 0.6 + 0.25 = 1.45
        ("mean", "weighted", "3"),
    ],
)
def test_votes(aggregation, vote, expected):
    assert choose_answer(ANSWERS, STEP_SCORES, aggregation, vote) == expected


def test_weighted_vote_pools_equivalent_answers():
    # "0.5" alone (0.7) loses to "2" (0.8), but with "\frac{1}{2}" (0.3) 1/2 has 1.0
    assert choose_answer(["0.5", "2", "\\frac{1}{2}"], [[0.7], [0.8], [0.3]], "last", "weighted") == "0.5"
    assert choose_answer(["0.5", "2", "7"], [[0.7], [0.8], [0.3]], "last", "weighted") == "2"


@pytest.mark.parametrize("vote", ["best", "majority", "weighted"])
def test_no_answer_no_choice(vote):
    assert choose_answer([None, None], [[0.9], [0.8]], "last", vote) is None
    assert choose_answer([], [], "last", vote) is None
