"""The steering term of `scripts/train_demo_models.py --stage steer` (ets/demo/steering.py):
REBASE's softmax weight on the right partial paths, per problem and depth."""

import math

import torch

from ets.demo.steering import steering_loss


def test_the_term_is_minus_the_log_weight_on_right_paths_and_its_gradient_lifts_them():
    # Two samples share their first step (one distinct path at depth 0: no rival, skipped);
    # at depth 1 a right path scored 0.8 meets a wrong one scored 0.95.
    scores = torch.tensor([0.9, 0.8, 0.9, 0.95], requires_grad=True)
    problem = [(["a", "b"], [True, True], [0, 1]), (["a", "c"], [True, False], [2, 3])]
    loss = steering_loss(scores, [problem], temperature=0.2)
    expected = math.log(math.exp(0.8 / 0.2) + math.exp(0.95 / 0.2)) - 0.8 / 0.2
    assert abs(loss.item() - expected) < 1e-5
    loss.backward()
    assert scores.grad[1] < 0 < scores.grad[3]          # lift the right path, lower the wrong one
    assert scores.grad[0] == scores.grad[2] == 0        # the shared step is no rival of itself


def test_a_wrong_step_keeps_its_path_wrong_at_every_later_depth_and_groups_average():
    # depth 1: the first sample's path went wrong at step 0 already, so it stays wrong
    scores = torch.tensor([0.2, 0.9, 0.6, 0.5])
    problem = [(["x", "y"], [False, True], [0, 1]), (["z", "w"], [True, True], [2, 3])]
    depth0 = math.log(math.exp(0.2 / 0.2) + math.exp(0.6 / 0.2)) - 0.6 / 0.2
    depth1 = math.log(math.exp(0.9 / 0.2) + math.exp(0.5 / 0.2)) - 0.5 / 0.2
    assert abs(steering_loss(scores, [problem]).item() - (depth0 + depth1) / 2) < 1e-5


def test_no_group_with_both_kinds_gives_none():
    scores = torch.tensor([0.5, 0.6])
    assert steering_loss(scores, [[(["a"], [True], [0]), (["b"], [True], [1])]]) is None
    assert steering_loss(scores, []) is None
