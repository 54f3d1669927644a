"""Whole searches through the loop under both modes (`search.compat`), on a scripted policy
whose steps say what they are: the terminal rules, the prompt's 2 tokens at the max_tokens
cut, the depth limit, both KV metrics, and DVTS finishing more than W under the ETS code."""

from __future__ import annotations

import re

import pytest

from ets.config import SearchConfig
from ets.data import Problem
from ets.loop.controller import search
from ets.policy.base import Step
from ets.tree import SearchTree, kv_size

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
