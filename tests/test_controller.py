"""The search loop end to end on a tiny random policy (plain transformers backend)."""

import zlib
from collections import Counter

import pytest

from ets.config import PolicyConfig, SearchConfig
from ets.loop.controller import SearchLoop, search
from ets.data import Problem
from ets.policy.hf import HFPolicy
from ets.tree import kv_size

PROBLEMS = [Problem(f"What is {i} + {i}?", str(2 * i), id=str(i)) for i in range(3)]


def text_score(questions, trajectories):
    """A deterministic reward: a hash of the newest step text, in [0, 1]."""
    return [[[zlib.crc32(s.encode()) % 1000 / 999 for s in traj] for traj in per_q] for per_q in trajectories]


class CountingReward:
    """Counts calls and how many questions each call carried."""

    name = "counting"

    def __init__(self):
        self.calls = []

    def score(self, questions, trajectories):
        self.calls.append(len(questions))
        return text_score(questions, trajectories)


@pytest.fixture(scope="module")
def policy():
    search_cfg = SearchConfig(max_step_tokens=4, max_depth=3, max_tokens=100)
    return HFPolicy.from_config(PolicyConfig(model="tiny:llama", step_delimiter="\n"), search_cfg)


@pytest.mark.parametrize("method", ["best_of_n", "beam", "dvts", "rebase"])
def test_every_strategy_completes_width_trajectories(policy, method):
    cfg = SearchConfig(method=method, width=4, max_step_tokens=4, max_depth=3, max_tokens=100)
    reward = CountingReward()
    calls_before = policy.stats()["expand_calls"]
    records = search(PROBLEMS, policy, reward, cfg, concurrency=3, save_trees=True)

    assert [r["id"] for r in records] == ["0", "1", "2"]
    rounds = max(r["depth"] for r in records)
    # One batched policy call and one batched reward call per round, for all problems.
    assert policy.stats()["expand_calls"] - calls_before == rounds
    assert len(reward.calls) == rounds and reward.calls[0] == 3
    for r in records:
        # Random tiny models rarely emit an answer, so most trajectories end at max_depth
        # (a sampled EOS ends one earlier): each of the W units of width ends in one
        # completed trajectory, or more after an early end where a strategy rounds up (beam
        # gives each kept beam ceil(remaining / keep) children, as the ETS code does).
        early = any(t["finish"] != "max_depth" for t in r["trajectories"])
        assert len(r["trajectories"]) == 4 or (early and len(r["trajectories"]) > 4)
        for t in r["trajectories"]:
            assert len(t["steps"]) == len(t["step_scores"])
            assert len(t["steps"]) == 3 if t["finish"] == "max_depth" else t["finish"] in ("eos", "answer")
            assert all(0 <= s <= 1 for s in t["step_scores"])
        nodes = r["tree"]["nodes"]
        assert r["generated_tokens"] == sum(n["num_tokens"] for n in nodes[1:])
        assert len(r["kv_size_steps"]) == 2 and r["kv_size"] == sum(r["kv_size_steps"])


def test_kv_size_steps_match_the_tree(policy):
    cfg = SearchConfig(method="beam", width=4, max_step_tokens=4, max_depth=3, max_tokens=100)
    record = search(PROBLEMS[:1], policy, text_score, cfg, save_trees=True)[0]
    nodes = record["tree"]["nodes"]
    from ets.tree import SearchTree

    tree = SearchTree("", [0] * record["prompt_tokens"])
    for n in nodes[1:]:
        tree.add_child(tree.nodes[n["parent"]], n["text"], [0] * n["num_tokens"])
    tree.check()
    # Candidates of each selection step = the non-terminal nodes at that depth.
    expected = [kv_size([n for n in tree.nodes if n.depth == d]) for d in (1, 2)]
    assert record["kv_size_steps"] == expected
    # Beam keeps ceil(sqrt(4)) = 2 beams: depth 2 holds 2 x 2 children.
    assert sum(1 for n in nodes if n["depth"] == 2) == 4
    assert len({n["parent"] for n in nodes if n["depth"] == 2}) == 2


def test_bad_reward_is_named(policy):
    from ets.rewards.base import RewardError

    def nan_reward(questions, trajectories):
        return [[[float("nan")] * len(t) for t in per_q] for per_q in trajectories]

    cfg = SearchConfig(method="rebase", width=2, max_step_tokens=4, max_depth=2)
    with pytest.raises(RewardError, match="nan_reward"):
        search(PROBLEMS[:1], policy, nan_reward, cfg)


def test_terminal_steps_complete_early(policy):
    """A reward-independent check of the terminal rule: a step with a final-answer marker
    completes its trajectory, and its answer is extracted and graded."""
    from ets.policy.base import Step

    class Scripted:  # written to the older protocol: a bare tuple prompt, no memory()
        tokenizer = policy.tokenizer

        def __init__(self):
            self.round = 0

        def format_prompt(self, q):
            return q, [1, 2, 3]

        def expand(self, requests):
            self.round += 1
            text = "The answer is: 4\n" if self.round == 2 else "2 + 2 = 4\n"
            return [[Step(text, [5, 6], "stop") for _ in range(r.n)] for r in requests]

        def release(self, keys):
            pass

        def stats(self):
            return {}

    cfg = SearchConfig(method="rebase", width=3, max_depth=10)
    record = search([Problem("What is 2 + 2?", "4", id="p")], Scripted(), text_score, cfg)[0]
    assert record["depth"] == 2 and len(record["trajectories"]) == 3
    assert record["answer"] == "4" and record["correct"] is True
    assert all(t["finish"] == "answer" for t in record["trajectories"])


class Capped:
    """`policy` reporting a KV capacity of `capacity` tokens (the plain-transformers
    backend reports none): admission must read it from `memory()`."""

    def __init__(self, policy, capacity: int):
        self.policy, self.capacity = policy, capacity
        self.tokenizer = policy.tokenizer

    def memory(self):
        return self.policy.memory()._replace(capacity_tokens=self.capacity)

    def __getattr__(self, name):
        return getattr(self.policy, name)


def test_hf_policy_keeps_no_kv_between_calls(policy):
    from ets.policy.base import KVMemory, Policy, Prompt

    assert isinstance(policy, Policy)
    assert policy.memory() == KVMemory(capacity_tokens=None, live_tokens=0, peak_live_tokens=None, mean_live_tokens=None)
    prompt = policy.format_prompt("What is 1 + 1?")
    assert isinstance(prompt, Prompt) and prompt.text == "What is 1 + 1?\n" and prompt.token_ids


def test_the_policys_capacity_limits_problems_in_flight(policy):
    cfg = SearchConfig(method="rebase", width=4, max_step_tokens=4, max_depth=2, max_tokens=100)
    a, unlimited = SearchLoop(PROBLEMS, policy, text_score, cfg, concurrency=3).run()
    # The least capacity a run accepts: one sequence of the longest prompt (prompt + 8
    # tokens of 2 steps of 4), far below one search's expected peak (prompt + 4 x 100).
    longest = max(len(policy.format_prompt(p.question).token_ids) for p in PROBLEMS)
    one_sequence = SearchLoop(PROBLEMS, policy, text_score, cfg).sequence_tokens(longest)
    assert one_sequence == longest + 8
    b, tight = SearchLoop(PROBLEMS, Capped(policy, one_sequence), text_score, cfg, concurrency=3).run()
    assert unlimited.peak_active == 3 and unlimited.mean_active > 1
    # A capacity below one search still runs every problem, one at a time.
    assert tight.peak_active == 1 and tight.rounds == 3 * unlimited.rounds and tight.mean_active == 1
    assert [r["id"] for r in a] == [r["id"] for r in b] == ["0", "1", "2"]
    assert tight.mean_search_peak_kv > 0


def test_admission_reserves_peaks_by_hand():
    from ets.loop.admission import KVAdmission
    from tests.helpers import tree_with_children

    adm = KVAdmission(capacity_tokens=100, width=4, max_step_tokens=8, max_tokens=8)
    assert adm.mean_step_tokens == 4                      # prior: half of max_step_tokens
    tree = tree_with_children([0.5, 0.5], prompt_tokens=10, step_tokens=3)
    adm.observe(tree.root.children)
    assert adm.mean_step_tokens == 3
    # Keeping both children (10 + 3 + 3 tokens) and generating 4 more steps of 3 tokens.
    assert adm.footprint(tree.root.children, 4) == 16 + 12
    # Before any search has finished, a search's peak is the worst case: prompt + W paths
    # of max_tokens.
    assert adm.expected_peak(20) == 20 + 4 * 8
    assert adm.reservation(28, 20) == 52                  # young: its expected peak
    assert adm.admits(40, 20, n_active=1) and not adm.admits(60, 20, n_active=1)
    # Then the peak 90% of the n finished searches stayed within (nearest rank), not their
    # mean (40 here), which half the searches outgrow, weighed n to 1 against the worst
    # case (52): the first to finish are the small ones. One above it keeps its own.
    adm.finished(30)
    adm.finished(50)
    assert adm.expected_peak(20) == pytest.approx((2 * 50 + 52) / 3) and adm.reservation(70, 20) == 70
    assert adm.mean_peak == 40                            # what RunStats reports
    assert adm.admits(49, 20, n_active=1) and not adm.admits(50, 20, n_active=1)
    assert adm.admits(10_000, 20, n_active=0)             # never starves
    # From ten finished searches on, the largest peaks stop setting it: the 9th of 10.
    for peak in (10, 11, 12, 13, 14, 15, 16, 17):
        adm.finished(peak)
    assert adm.expected_peak(20) == pytest.approx((10 * 30 + 52) / 11)


def test_a_young_search_is_reserved_its_peak_not_its_first_round(policy):
    """Two searches whose first rounds fit the budget together, but whose expected peaks
    do not, run one after the other. (Reserving the first round's footprint let waves of
    young searches in, which then outgrew the pool.)"""
    cfg = SearchConfig(method="rebase", width=4, max_step_tokens=4, max_depth=3, max_tokens=100)
    prompt = len(policy.format_prompt(PROBLEMS[0].question)[1])
    first_round = prompt + 4 * 2                          # the prior mean step: 2 tokens
    capacity = int(1.5 * (prompt + 4 * 100))              # 1.5 worst-case peaks
    assert 2 * first_round <= capacity                    # the old rule admitted both at once
    records, stats = SearchLoop(PROBLEMS[:2], Capped(policy, capacity), text_score, cfg, concurrency=2).run()
    assert stats.peak_active == 1 and len(records) == 2


def test_node_seeds_are_stable_and_per_problem():
    """A node's seed is a hash of (config seed, problem id, question, node id): the same in
    every run and process (no Python hash randomisation), and apart for other problems."""
    from ets.loop.controller import node_seed

    p, q = Problem("What is 1 + 1?", "2", id="7"), Problem("What is 1 + 1?", "2", id="8")
    seeds = {node_seed(s, x, n) for s in (0, 1) for x in (p, q) for n in (0, 1, 2)}
    assert len(seeds) == 12 and all(0 <= s < 2**62 for s in seeds)
    assert node_seed(0, p, 0) == node_seed(0, Problem("What is 1 + 1?", id="7", raw={"other": 1}), 0)
    assert node_seed(0, p, 0) == 4221479869723323015  # pinned: a change re-draws every search


def test_every_request_carries_its_seed_and_the_configs_sampling(policy):
    from ets.policy.base import SamplingSettings

    seen = []

    class Spy:
        def __init__(self, inner):
            self.inner, self.tokenizer = inner, inner.tokenizer

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def expand(self, requests):
            seen.extend(requests)
            return self.inner.expand(requests)

    from ets.loop.controller import node_seed

    cfg = SearchConfig(method="rebase", width=2, max_step_tokens=3, max_depth=2, temperature=0.5, top_k=5, seed=9)
    search(PROBLEMS[:2], Spy(policy), text_score, cfg, concurrency=2)
    assert seen and all(r.sampling == SamplingSettings(0.5, 1.0, 5, 3) for r in seen)
    by_index = {0: PROBLEMS[0], 1: PROBLEMS[1]}
    assert all(r.seed == node_seed(9, by_index[r.key[0]], r.key[1]) for r in seen)


def test_each_rounds_phases_are_clocked(policy):
    """RunStats splits the rounds' time into the policy's, the reward's and selection's
    (the summary's 'rounds:' line): a reward that sleeps 20 ms a call shows in its phase."""
    import time

    calls = []

    def slow_score(questions, trajectories):
        calls.append(1)
        time.sleep(0.02)
        return text_score(questions, trajectories)

    cfg = SearchConfig(method="rebase", width=2, max_step_tokens=4, max_depth=2, max_tokens=100)
    started = time.perf_counter()
    _, stats = SearchLoop(PROBLEMS, policy, slow_score, cfg, concurrency=3).run()
    wall = time.perf_counter() - started
    assert stats.score_seconds >= 0.02 * len(calls) > 0
    assert stats.expand_seconds > 0 and stats.select_seconds > 0
    assert stats.expand_seconds + stats.score_seconds + stats.select_seconds <= wall


# ---------------------------------------------------------------- search-and-learn's beam options
class TextPolicy:
    """A scripted policy over whole-step tokens (one token id per distinct step text):
    `rule(step texts so far, sample index, temperature)` writes each new step. It records
    every request."""

    def __init__(self, rule):
        self.rule, self.requests, self.released = rule, [], []
        self.handles: dict[object, list] = {}  # request key -> the locks its steps took
        self.ids: dict[str, int] = {}
        self.texts: dict[int, str] = {}
        self.tokenizer = None
        self.context_tokens = None

    def token(self, text):
        if text not in self.ids:
            self.ids[text] = 100 + len(self.ids)
            self.texts[self.ids[text]] = text
        return self.ids[text]

    def format_prompt(self, question):
        return question, [1, 2, 3]

    def expand(self, requests):
        from ets.policy.base import Step

        self.requests.extend(requests)
        out = []
        for r in requests:
            path = [self.texts[t] for t in r.token_ids if t in self.texts]
            steps = []
            for j in range(r.n):
                text = self.rule(path, j, r.sampling.temperature)
                handle = ("lock", sum(map(len, self.handles.values())))
                self.handles.setdefault(r.key, []).append(handle)
                steps.append(Step(text, [self.token(text)], "stop", handle))
            out.append(steps)
        return out

    def release(self, handles):
        self.released.extend(h for h in handles if h is not None)

    def stats(self):
        return {}


FOUR = Problem("What is 2 + 2?", "4", id="p")
STEP_SCORES = {"A\n": 0.9, "B\n": 0.1, "good\n": 1.0, "bad\n": 0.0}


def scored_by_text(questions, trajectories):
    return [[[STEP_SCORES.get(s, 0.5) for s in traj] for traj in per_q] for per_q in trajectories]


def a_or_b_then_answer(path, j, temperature):
    """The root's children are A and B; greedily, A leads to a bad step and B to a good
    one; sampled again, each gives a final answer."""
    if temperature == 0:
        return {"A\n": "bad\n", "B\n": "good\n"}.get(path[-1], "more\n")
    return "AB"[j % 2] + "\n" if not path else "The answer is: 4\n"


def test_lookahead_selects_by_where_a_greedy_rollout_leads():
    cfg = dict(method="beam", width=2, fixed_width=1, max_depth=5)
    kept_parent = {}
    for lookahead in (0, 1):
        policy = TextPolicy(a_or_b_then_answer)
        (record,) = search([FOUR], policy, scored_by_text, SearchConfig(**cfg, lookahead=lookahead),
                           save_trees=True)
        nodes = record["tree"]["nodes"]
        kept_parent[lookahead] = {nodes[n["parent"]]["text"] for n in nodes if n["depth"] == 2}
        rollouts = [r for r in policy.requests if r.key[0] == "lookahead"]
        if lookahead:
            # one greedy step for each of the two candidates, all in one call
            assert [(r.n, r.sampling.temperature) for r in rollouts] == [(1, 0.0), (1, 0.0)]
            assert record["lookahead_tokens"] == 2
            assert record["generated_tokens"] == sum(n["num_tokens"] for n in nodes[1:]) + 2
            # the tree keeps each candidate's own step and score; the rollout's is its tag
            b = next(n for n in nodes if n["text"] == "B\n")
            assert b["score"] == 0.1 and b["tags"]["lookahead_score"] == 1.0
            assert not any(n["text"] in ("good\n", "bad\n") for n in nodes)
            # every lock the rollouts took was given back, once
            taken = [h for key, hs in policy.handles.items() if key[0] == "lookahead" for h in hs]
            assert len(taken) == 2 and all(policy.released.count(h) == 1 for h in taken)
        else:
            assert not rollouts and "lookahead_tokens" not in record
        assert record["correct"] and len(record["trajectories"]) == 2
    assert kept_parent == {0: {"A\n"}, 1: {"B\n"}}   # the PRM prefers A; B's rollout scores better


def test_lookahead_rollouts_stop_where_a_trajectory_would():
    """A rollout ends at a final step (here the answer at once) and at max_depth."""
    def rule(path, j, temperature):
        if temperature == 0:
            return "The answer is: 4\n" if path[-1] == "A\n" else "more\n"
        return "AB"[j % 2] + "\n" if not path else "The answer is: 4\n"

    policy = TextPolicy(rule)
    cfg = SearchConfig(method="beam", width=2, fixed_width=1, lookahead=3, max_depth=3)
    (record,) = search([FOUR], policy, scored_by_text, cfg)
    rollouts = [r for r in policy.requests if r.key[0] == "lookahead"]
    # A's rollout ends at its answer (1 step); B's at max_depth 3 (2 steps after depth 1)
    by_node = Counter(r.key[2] for r in rollouts)
    assert sorted(by_node.values()) == [1, 2] and record["lookahead_tokens"] == 3


def test_sort_completed_lets_the_best_width_trajectories_answer():
    """Beam rounds up (ceil(remaining / keep) children per beam), so a search can end with
    more than W completed trajectories; sort_completed keeps the W best."""
    answers = {0: "The answer is: 4\n", 1: "The answer is: 5\n"}

    def rule(path, j, temperature):
        if not path:  # the root: one answer at once, three candidates
            return "The answer is: 4\n" if j == 0 else "ABA"[j - 1] + "\n"
        return answers[j]

    scores = {"The answer is: 5\n": 0.2}
    reward = lambda qs, ts: [[[scores.get(s, 0.9) for s in t] for t in per_q] for per_q in ts]  # noqa: E731
    for sort_completed, expected in ((False, 5), (True, 4)):
        cfg = SearchConfig(method="beam", width=4, sort_completed=sort_completed)
        (record,) = search([FOUR], TextPolicy(rule), reward, cfg)
        # 1 completed at depth 1; keep 2 beams x ceil(3 / 2) = 4 children at depth 2: 5 in all
        assert len(record["trajectories"]) == expected
        low = [t for t in record["trajectories"] if t["step_scores"][-1] == 0.2]
        assert len(low) == (2 if not sort_completed else 1)  # one of the two 0.2 answers is left out
