"""Whole searches through the loop under both modes (`search.compat`), on scripted policies
whose steps say what they are: the terminal rules, the prompt's 2 tokens at the max_tokens
cut, the depth limit, both KV metrics, DVTS finishing more than W under the ETS code; and,
in a world scripted node by node (tests/scripted_world.py), whole trees of every method
worked out by hand from the ETS code's rules: the root selected as a candidate scored 1.0,
children made in the selection's ranking order and the ties across parents that order
decides, the final pass's ranking by s/T, DVTS's KV figure of a cycled survivor, and the
error where the code's REBASE share is not a number."""

from __future__ import annotations

import math
import re

import pytest

from ets.config import ConfigError, SearchConfig
from ets.data import Problem
from ets.loop.controller import search
from ets.policy.base import Step
from ets.tree import SearchTree, kv_size
from tests.scripted_world import Script, at_depth, node_paths, run_search

PROMPT_IDS = [1, 2, 3]          # the prompt: 3 tokens


class Scripted:
    """Each step's text comes from `script(depth, j)` for the j-th child of a node at `depth`
    (the root is depth 0); every step is 2 tokens; a `finish` of None is "stop"."""

    tokenizer = None
    context_tokens = None

    def __init__(self, script, prompt="Q"):
        self.script, self.prompt = script, prompt

    def format_prompt(self, question):
        return self.prompt, list(PROMPT_IDS)

    def expand(self, requests):
        out = []
        for r in requests:
            depth = (len(r.token_ids) - len(PROMPT_IDS)) // 2
            steps = []
            for j in range(r.n):
                text, finish = self.script(depth, j)
                steps.append(Step(text, [7, 7], finish or "stop"))
            out.append(steps)
        return out

    def release(self, handles):
        pass

    def stats(self):
        return {}


def reward(questions, trajectories):
    """The score a step writes as `s=0.x`, else 0.5."""
    def score(text):
        m = re.search(r"s=([0-9.]+)", text)
        return float(m.group(1)) if m else 0.5
    return [[[score(s) for s in traj] for traj in per_q] for per_q in trajectories]


def one(policy, **kw):
    config = SearchConfig(**kw)
    return search([Problem("What is 2 + 2?", "4", id="p")], policy, reward, config, save_trees=True)[0]


@pytest.mark.parametrize("text, project, ets_code", [
    ("my answer is wrong so far\n", False, False),     # "answer is" inside a sentence
    ("so the answer is 4\n", False, False),
    ("Step 2: The answer is: 4\n", True, True),
    ("I see. The answer is 4\n", True, True),
    ("so The answer is 4\n", False, True),            # the ETS code: anywhere, case as written
    ("So \\boxed{4}\n", True, False),                  # a box: the project's terminal, not the code's
])
def test_terminal_rules_in_a_search(text, project, ets_code):
    def script(depth, j):
        return (text, None) if depth == 1 else ("2 + 2 = 4\n", None)

    for compat, final in (("project", project), ("ets_code", ets_code)):
        r = one(Scripted(script), method="rebase", width=2, max_depth=4, compat=compat)
        assert r["depth"] == (2 if final else 4), (compat, text)


def test_eos_ends_a_trajectory_only_by_default():
    def script(depth, j):
        return ("and so on", "eos") if depth == 0 else ("The answer is: 4\n", None)

    r = one(Scripted(script), method="rebase", width=2, max_depth=5)
    assert r["depth"] == 1 and {t["finish"] for t in r["trajectories"]} == {"eos"}
    r = one(Scripted(script), method="rebase", width=2, max_depth=5, compat="ets_code")
    assert r["depth"] == 2 and r["answer"] == "4"                     # the text went on after EOS


def test_a_prompt_with_the_phrase_ends_every_child_under_the_ets_code():
    policy = Scripted(lambda d, j: ("1 + 1 = 2\n", None), prompt="Say 'The answer is' and a number.\n")
    assert one(policy, method="rebase", width=2, max_depth=4, compat="ets_code")["depth"] == 1
    assert one(policy, method="rebase", width=2, max_depth=4)["depth"] == 4


def test_answer_markers_are_configurable():
    policy = Scripted(lambda d, j: ("#### 4\n", None) if d == 1 else ("2 + 2 = 4\n", None))
    assert one(policy, method="rebase", width=2, max_depth=4)["depth"] == 4
    assert one(policy, method="rebase", width=2, max_depth=4, answer_markers=["####"])["depth"] == 2


def test_the_prompt_counts_as_two_tokens_towards_max_tokens():
    # 2-token steps, max_tokens 6: by default a path completes at 6 generated tokens (3
    # steps); the ETS code counts 2 + generated, so at 4 (2 steps), and that one gives no vote.
    policy = Scripted(lambda d, j: ("2 + 2 = 4\n", None))
    r = one(policy, method="beam", width=2, max_tokens=6, max_depth=10)
    assert r["depth"] == 3 and {t["finish"] for t in r["trajectories"]} == {"max_tokens"}
    r = one(policy, method="beam", width=2, max_tokens=6, max_depth=10, compat="ets_code")
    assert r["depth"] == 2 and {t["finish"] for t in r["trajectories"]} == {"max_tokens"}
    assert {t["answer"] for t in r["trajectories"]} == {None}        # only leaves vote there


def test_the_last_nodes_are_dropped_unless_leaves_under_the_ets_code():
    def script(depth, j):
        return ("The answer is: 4\n", None) if depth == 0 and j == 0 else ("2 + 2 = 4\n", None)

    r = one(Scripted(script), method="rebase", width=2, max_depth=2)
    assert len(r["trajectories"]) == 2 and sorted(t["finish"] for t in r["trajectories"]) == ["answer", "max_depth"]
    r = one(Scripted(script), method="rebase", width=2, max_depth=2, compat="ets_code")
    assert [t["finish"] for t in r["trajectories"]] == ["answer"]      # the depth-2 node is dropped
    assert r["answer"] == "4" and r["correct"]


def _tree(record) -> SearchTree:
    tree = SearchTree("Q", list(PROMPT_IDS))
    for n in record["tree"]["nodes"][1:]:
        tree.add_child(tree.nodes[n["parent"]], n["text"], [7] * n["num_tokens"], n["terminal"])
    return tree


def test_both_kv_metrics_are_in_every_record():
    policy = Scripted(lambda d, j: (f"s=0.{j + 1}\n", None))
    r = one(policy, method="beam", width=4, max_depth=3)
    tree = _tree(r)
    layers = [[n for n in tree.nodes if n.depth == d] for d in (1, 2)]
    # the project: each frontier, the prompt's 3 tokens counted
    assert r["kv_size_steps"] == [kv_size(layer) for layer in layers] == [3 + 8, 3 + 2 * 2 + 4 * 2]
    # the ETS code: the root's own selection (2), then each selection, the prompt as 2 tokens
    assert r["kv_size_ref_steps"] == [2, 2 + 8, 2 + 2 * 2 + 4 * 2]
    assert (r["kv_size"], r["kv_size_ref"]) == (sum(r["kv_size_steps"]), sum(r["kv_size_ref_steps"]))


def test_dvts_finishes_more_than_the_width_under_the_ets_code():
    """W = 4, S = 2 subtrees of width 2. Depth 1: four children scored 0.9, 0.1, 0.8, 0.2, so
    the leaders are children 0 and 2 with 2 children each. Depth 2: the first child of every
    node completes, the second goes on. Depth 3: everything completes."""
    def script(depth, j):
        if depth == 0:
            return f"s={[0.9, 0.1, 0.8, 0.2][j]}\n", None
        if depth == 1 and j == 0:
            return "The answer is: 4\n", None
        return ("The answer is: 4\n" if depth == 2 else "s=0.5\n"), None

    project = one(Scripted(script), method="dvts", width=4, max_depth=5)
    ref = one(Scripted(script), method="dvts", width=4, max_depth=5, compat="ets_code")
    # the project: both subtrees lose one unit of width at depth 2: 2 + 1 + 1 = 4
    assert len(project["trajectories"]) == 4
    # the ETS code: both leaders' surviving children still get 2 each: 2 + 2 + 2 = 6
    assert len(ref["trajectories"]) == 6


# ------------------------------------------------------------------ whole trees, worked by hand
# Paths name nodes: (1, 0) is the first child of the root's second child. Script({...})
# gives a path's (score, ends its trajectory); every path not listed ends its trajectory.

CODE = dict(compat="ets_code", lambda_s=0.0)


@pytest.mark.parametrize("method, code_root", [("rebase", 16), ("ets", 16), ("beam", 15), ("dvts", 15)])
def test_the_root_is_a_candidate_scored_1_under_the_ets_code(method, code_root):
    """W = 15 and every child of the root ends its trajectory. The code's REBASE and ETS select
    the root, scored 1.0, like any frontier: ceil(float32(15 exp(5)) / exp(5)) = ceil(15.000001)
    = 16 children, 16 trajectories; its beam search and DVTS give the root the width."""
    r = run_search(Script({}), method=method, width=15, **CODE)
    assert len(at_depth(r, 1)) == len(r["trajectories"]) == code_root
    assert len(run_search(Script({}), method=method, width=15, lambda_s=0.0)["trajectories"]) == 15


@pytest.mark.parametrize("method", ["rebase", "ets"])
def test_a_tie_across_parents_goes_by_the_codes_creation_order(method):
    """W = 3, T = 0.2 (ETS with lambda_c = 0 keeps every leaf, so its final pass is REBASE's).

    Depth 1: a = (0,) 0.5, b = (1,) 0.5, c = (2,) 0.0. Ranked later first: b, a, c; with
    w = exp(2.5) = 12.18, b gets ceil(3w / (2w + 1)) = ceil(1.44) = 2, a ceil(w / (w + 1)) = 1,
    c none. The code makes b's children first: (1, 0), (1, 1), then a's (0, 0).
    Depth 2: (1, 0) 0.5, (1, 1) 0.0, (0, 0) 0.5. The tie is now won by the later, (0, 0): it
    gets 2 children, (1, 0) gets 1. (Made in candidate order, (0, 0) would come first and
    (1, 0) would win.) Depth 3: all end: 3 trajectories."""
    world = Script({(0,): (0.5, False), (1,): (0.5, False), (2,): (0.0, False),
                    (0, 0): (0.5, False), (1, 0): (0.5, False), (1, 1): (0.0, False)})
    r = run_search(world, method=method, width=3, lambda_c=0.0, **CODE)
    assert at_depth(r, 2) == [(1, 0), (1, 1), (0, 0)]
    assert at_depth(r, 3) == [(0, 0, 0), (0, 0, 1), (1, 0, 0)]
    assert len(r["trajectories"]) == 3


def test_the_ets_final_pass_ties_scores_one_ulp_apart_where_rebase_does_not():
    """The tree above, with (1, 0) scored 0.9000000000000001 and (0, 0) 0.9 (both 4.5 over T).
    REBASE ranks by the score: (1, 0) first, 2 children. ETS's final pass ranks by s / T: a
    tie, so the later (0, 0) first, 2 children."""
    up = math.nextafter(0.9, 1.0)
    world = Script({(0,): (0.5, False), (1,): (0.5, False), (2,): (0.0, False),
                    (0, 0): (0.9, False), (1, 0): (up, False), (1, 1): (0.0, False)})
    rebase = run_search(world, method="rebase", width=3, **CODE)
    ets = run_search(world, method="ets", width=3, lambda_c=0.0, **CODE)
    assert at_depth(rebase, 3) == [(1, 0, 0), (1, 0, 1), (0, 0, 0)]
    assert at_depth(ets, 3) == [(0, 0, 0), (0, 0, 1), (1, 0, 0)]


def test_beam_search_keeps_the_later_of_a_tie_and_expands_best_first():
    """W = 4. Depth 1: 0.9, 0.5, 0.5, 0.1: keep ceil(sqrt(4)) = 2 beams, (0,) and the later 0.5,
    (2,), with ceil(4 / 2) = 2 children each. Depth 2: (0, 0) ends; (0, 1), (2, 0), (2, 1) all
    0.3 and 3 left: keep ceil(sqrt(3)) = 2 beams, the later two, (2, 1) then (2, 0), with
    ceil(3 / 2) = 2 children each. Depth 3: all end: 5 trajectories for W = 4."""
    world = Script({(0,): (0.9, False), (1,): (0.5, False), (2,): (0.5, False), (3,): (0.1, False),
                    (0, 1): (0.3, False), (2, 0): (0.3, False), (2, 1): (0.3, False)})
    r = run_search(world, method="beam", width=4, **CODE)
    assert at_depth(r, 2) == [(0, 0), (0, 1), (2, 0), (2, 1)]
    assert at_depth(r, 3) == [(2, 1, 0), (2, 1, 1), (2, 0, 0), (2, 0, 1)]
    assert len(r["trajectories"]) == 5


def test_dvts_counts_a_cycled_survivor_once_per_subtree_in_the_codes_kv_figure():
    """W = 9: S = 3 subtrees of width 3. Of the root's 9 children only (0,) (0.8) and (1,)
    (0.3) go on: the code cycles them over the 3 subtrees as (0,), (1,), (0,), so (0,) gets
    3 + 3 children and (1,) 3, and its KV figure lists (0,) twice: 2 (the prompt) + 2 + 2 + 2
    = 8, where the union of the paths is 6. Every grandchild ends: 7 + 9 = 16 trajectories."""
    world = Script({(0,): (0.8, False), (1,): (0.3, False)})
    r = run_search(world, method="dvts", width=9, **CODE)
    assert [p[0] for p in at_depth(r, 2)] == [0] * 6 + [1] * 3
    assert r["kv_size_ref_steps"] == [2, 8]
    assert r["kv_size_steps"] == [3 + 2 + 2]              # the project's metric: the union, the prompt's 3 tokens
    assert len(r["trajectories"]) == 16


def test_rebase_share_that_is_not_a_number_stops_the_search_with_a_clear_error():
    """T = 0.05, W = 3, depth 1 scored 0.0, 0.0, 1.0: exp(20) absorbs the two exp(0) in the
    float32 sum, which is 0 once the best child has its 3; the next share is 0 / 0, where the
    code raises. The project's default REBASE has no such case."""
    world = Script({(0,): (0.0, False), (1,): (0.0, False), (2,): (1.0, False)})
    with pytest.raises(ConfigError, match="softmax_temperature 0.05: under compat=ets_code"):
        run_search(world, method="rebase", width=3, softmax_temperature=0.05, **CODE)
    r = run_search(world, method="rebase", width=3, softmax_temperature=0.05)
    assert at_depth(r, 2) == [(2, 0), (2, 1), (2, 2)]


def test_an_empty_step_takes_the_score_of_the_step_before_it():
    """A policy that ends at once after a step writes an empty one: a reward's reading of
    it is noise (here 0.0) that would weigh the trajectory's vote; it takes its parent's."""
    def script(depth, j):
        return ("2 + 2 = 4 s=0.8\n", None) if depth == 0 else ("", "eos")

    def empty_is_zero(questions, trajectories):
        return [[[0.0 if not s.strip() else 0.8 for s in traj] for traj in per_q] for per_q in trajectories]

    config = SearchConfig(method="rebase", width=2, max_depth=4)
    r = search([Problem("What is 2 + 2?", "4", id="p")], Scripted(script), empty_is_zero, config)[0]
    assert [t["step_scores"] for t in r["trajectories"]] == [[0.8, 0.8], [0.8, 0.8]]
    assert [t["steps"][-1] for t in r["trajectories"]] == ["", ""]
