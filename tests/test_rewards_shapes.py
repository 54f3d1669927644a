"""Every wrong output of a user reward is one named `RewardError` line, never a traceback:
a float per trajectory, None, wrong counts at each level, a non-number, NaN, out of range."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from ets.app.cli import main
from ets.rewards import RewardError, validate_scores

TRAJS = [[["a", "b"], ["c"]], [["d"]]]          # 2 questions; 2 + 1 trajectories
GOOD = [[[0.1, 0.2], [0.3]], [[0.4]]]
TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"


@pytest.mark.parametrize(
    "scores, expected",
    [
        (None, "returned None, expected a list of scores for 2 questions"),
        (0.5, "returned 0.5 (a float), expected a list of scores for 2 questions"),
        ("0.5", "returned '0.5' (a str), expected a list"),
        ({"q": 1}, "(a dict), expected a list"),
        ((s for s in []), "(a generator), expected a list"),
        ([[[0.1, 0.2], [0.3]]], "scores for 1 question, expected 2"),
        ([None, [[0.4]]], "None for question 0, expected a list of 2 trajectories' scores"),
        ([[[0.1, 0.2]], [[0.4]]], "1 trajectory for question 0, expected 2"),
        # A float per trajectory instead of a list per step: the commonest plug-in mistake.
        ([[0.5, 0.3], [0.4]], "0.5 (a float) for question 0 trajectory 0, expected a list of 2 step scores (one per step)"),
        ([[None, [0.3]], [[0.4]]], "None for question 0 trajectory 0, expected a list of 2 step scores"),
        ([[[0.1], [0.3]], [[0.4]]], "1 step score for question 0 trajectory 0, expected 2"),
        ([[[0.1, 0.2, 0.3], [0.3]], [[0.4]]], "3 step scores for question 0 trajectory 0, expected 2"),
        ([[[0.1, "0.2"], [0.3]], [[0.4]]], "'0.2' (a str) for question 0 trajectory 0 step 1; a score must be a number"),
        ([[[0.1, None], [0.3]], [[0.4]]], "None for question 0 trajectory 0 step 1; a score must be a number"),
        ([[[0.1, [0.2]], [0.3]], [[0.4]]], "[0.2] (a list) for question 0 trajectory 0 step 1"),
        ([[[0.1, 0.2], [0.3]], [[torch.tensor([0.4, 0.5])]]], "(a Tensor) for question 1 trajectory 0 step 0"),
        ([[[0.1, math.nan], [0.3]], [[0.4]]], "nan for question 0 trajectory 0 step 1; scores must be finite and in [0, 1]"),
        ([[[0.1, 0.2], [math.inf]], [[0.4]]], "inf for question 0 trajectory 1 step 0"),
        ([[[0.1, 0.2], [0.3]], [[-0.1]]], "-0.1 for question 1 trajectory 0 step 0"),
        # A verdict where a probability is due: not read as certainty.
        ([[[0.1, True], [0.3]], [[0.4]]], "True (a bool) for question 0 trajectory 0 step 1; a score must be a number"),
        ([[[0.1, 0.2], [0.3]], [[torch.tensor(False)]]], "tensor(False) (a Tensor) for question 1 trajectory 0 step 0"),
    ],
)
def test_each_wrong_output_is_one_named_line(scores, expected):
    with pytest.raises(RewardError) as err:
        validate_scores(scores, TRAJS, "my_reward")
    msg = str(err.value)
    assert msg.startswith("reward 'my_reward' returned ") and expected in msg and "\n" not in msg


def test_arrays_tensors_and_tuples_are_accepted_as_lists():
    as_numpy = [np.array([[0.1, 0.2], [0.3, 0.3]])[:1].tolist() + [(0.3,)], [torch.tensor([0.4])]]
    assert validate_scores(as_numpy, TRAJS, "r")[0] == [[0.1, 0.2], [0.3]]
    assert validate_scores([[torch.tensor([0.1, 0.2]), np.array([0.3])], ((np.float32(0.5),),)], TRAJS, "r")[1] == [[0.5]]
    assert validate_scores(GOOD, TRAJS, "r") == GOOD
    assert validate_scores([[[], []]], [[[], []]], "r") == [[[], []]]


def per_trajectory(questions, trajectories):
    return [[0.5 for _ in trajs] for trajs in trajectories]     # a float per trajectory


def nothing(questions, trajectories):
    return None


@pytest.mark.parametrize("fn, expected", [("per_trajectory", "0.5 (a float) for question 0 (problem {id!r}) trajectory 0"),
                                          ("nothing", "None")])
def test_ets_run_stops_with_the_named_line_and_exit_2(tmp_path, capsys, fn, expected):
    """The line names the problem by its id: a question's place in one reward call depends
    on what else was in flight."""
    from ets.api import load_problems

    expected = expected.format(id=load_problems(str(TINY))[0].id)
    out = tmp_path / "r.jsonl"
    code = main(["run", "--quiet", "--config", str(TINY), f"output={out}", "data.limit=1",
                 f"reward.name={__name__}:{fn}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"ets: error: reward '{__name__}:{fn}' returned ") and expected in err
    assert len(err.splitlines()) == 1
