"""The search controller: many problems at once, one batched policy call and one batched
reward call per round (DESIGN.md, "How data flows").

Each active problem holds a `SearchTree`, its completed trajectories, its remaining width
and the allocation its strategy chose last round. A round:
  1. gather every active problem's allocation into one list of expansion requests;
  2. one `policy.expand` call; new children go into their trees;
  3. one reward call scores every new child (its whole trajectory, newest step last);
  4. finished children leave the frontier; each problem's strategy allocates the next
     round, and nodes that will not be expanded again are released to the policy.
Problems are admitted up to `concurrency` at a time; a finished problem makes room for the
next and is handed to `on_result` at once, so a caller can write it before the run ends.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ets.loop.admission import KVAdmission
from ets.answers.aggregate import choose_answer
from ets.answers.extract import extract_answer, is_final_step
from ets.config import SearchConfig
from ets.data import Problem
from ets.answers.grading import is_equivalent
from ets.policy.base import ExpandRequest, Policy
from ets.tree import Node, SearchTree, kv_size
from rewards.base import validate_scores
from search import Frontier, Strategy, build


@dataclass
class _Active:
    """The state of one problem's search between rounds."""

    index: int
    problem: Problem
    tree: SearchTree
    alloc: dict[int, int]
    remaining: int
    completed: list[Node] = field(default_factory=list)
    depth: int = 0
    strategy_metrics: Counter = field(default_factory=Counter)
    handles: dict[int, Any] = field(default_factory=dict)  # node id -> the policy's lock
    kv_size_steps: list[int] = field(default_factory=list)
    peak_footprint: float = 0.0  # the most KV tokens a round of this search has locked
    started: float = field(default_factory=time.perf_counter)


def search(
    problems: Iterable[Problem],
    policy: Policy,
    reward: Callable,
    config: SearchConfig,
    *,
    strategy: Strategy | None = None,
    concurrency: int = 8,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    progress: Any = None,
    save_trees: bool = False,
    kv_budget: int | None = None,
    run_stats: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run `config.method` on every problem; returns one result record per problem, in
    input order (see ets/loop/record.py for the record's fields).

    `reward` is a `rewards.ProcessRewardModel` or any callable with its `score` signature;
    its output is validated every round. `progress` is an optional tqdm-like bar updated
    once per finished problem. `save_trees` adds each whole search tree to its record.

    At most `concurrency` problems are in flight; with `kv_budget` (tokens), fewer, as the
    KV the active searches are expected to lock at their peak allows (ets/loop/admission.py).
    `run_stats`, if given, receives the number of rounds, the mean and peak number of
    problems in flight, and the mean over problems of a search's peak footprint (the most
    KV tokens one of its rounds locked, as admission projects it).
    """
    strategy = strategy or build(config)
    name = getattr(reward, "name", getattr(reward, "__name__", type(reward).__name__))
    score_fn = getattr(reward, "score", reward)
    pending = list(enumerate(problems))[::-1]  # pop() from the end = input order
    active: list[_Active] = []
    results: dict[int, dict[str, Any]] = {}

    admission = KVAdmission(kv_budget, config.width, config.max_step_tokens, config.max_tokens)
    prompts: dict[int, tuple[str, list[int]]] = {}
    rounds, active_sum, peak_active = 0, 0, 0

    def admit() -> None:
        reserved = 0.0
        for a in active:
            footprint = admission.footprint([a.tree.nodes[i] for i in a.alloc], sum(a.alloc.values()))
            a.peak_footprint = max(a.peak_footprint, footprint)
            reserved += admission.reservation(footprint, a.tree.root.num_tokens)
        while pending and len(active) < concurrency:
            index, problem = pending[-1]
            if index not in prompts:  # tokenised once, even if it waits several rounds
                prompts[index] = policy.format_prompt(problem.question)
            prompt, prompt_ids = prompts[index]
            if not admission.admits(reserved, len(prompt_ids), len(active)):
                break  # wait until a finished search frees its share of the budget
            pending.pop()
            del prompts[index]
            tree = SearchTree(prompt, prompt_ids)
            a = _Active(index, problem, tree, {0: config.width}, config.width)
            a.peak_footprint = admission.footprint([tree.root], config.width)
            reserved += admission.reservation(a.peak_footprint, len(prompt_ids))
            active.append(a)

    admit()
    while active:
        rounds += 1
        active_sum += len(active)
        peak_active = max(peak_active, len(active))
        requests = [
            ExpandRequest((a.index, node_id), a.tree.nodes[node_id].path_token_ids(), n)
            for a in active
            for node_id, n in a.alloc.items()
        ]
        steps = policy.expand(requests)
        # The children now lock the paths they extend: the parents' own locks can go.
        policy.release([a.handles.pop(node_id, None) for a in active for node_id in a.alloc])

        children: dict[int, list[Node]] = {a.index: [] for a in active}
        by_index = {a.index: a for a in active}
        for req, req_steps in zip(requests, steps):
            a = by_index[req.key[0]]
            parent = a.tree.nodes[req.key[1]]
            for step in req_steps:
                terminal = step.finish == "eos" or is_final_step(step.text)
                child = a.tree.add_child(parent, step.text, step.token_ids, terminal)
                child.tags["finish"] = step.finish
                a.handles[child.id] = step.handle
                children[a.index].append(child)

        _score_round(active, children, score_fn, name)
        admission.observe(c for new in children.values() for c in new)

        frontiers = {a.index: _frontier(a, children[a.index], config) for a in active}
        _prepare(strategy, active, frontiers)
        still_active = []
        for a in active:
            if _select(a, frontiers[a.index], children[a.index], strategy, policy):
                still_active.append(a)
            else:
                results[a.index] = _finish(a, config, save_trees)
                admission.finished(a.peak_footprint)
                if on_result is not None:
                    on_result(results[a.index])
                if progress is not None:
                    progress.update(1)
        active[:] = still_active
        admit()
    if run_stats is not None:
        run_stats.update(rounds=rounds, mean_active=active_sum / rounds if rounds else 0.0, peak_active=peak_active,
                         mean_search_peak_kv=admission.mean_peak or 0.0)
    return [results[i] for i in sorted(results)]


def _score_round(active: list[_Active], children: dict[int, list[Node]], score_fn, name: str) -> None:
    """One reward call for every new child of every active problem."""
    with_children = [a for a in active if children[a.index]]
    if not with_children:
        return
    questions = [a.problem.question for a in with_children]
    trajectories = [[c.step_texts() for c in children[a.index]] for a in with_children]
    scores = validate_scores(score_fn(questions, trajectories), trajectories, name)
    for a, per_problem in zip(with_children, scores):
        for child, step_scores in zip(children[a.index], per_problem):
            child.score = step_scores[-1]  # the newest step's score drives selection


def _frontier(a: _Active, new: list[Node], config: SearchConfig) -> Frontier | None:
    """Move finished children to `completed`; the frontier left to select from, if any."""
    a.depth += 1
    candidates = []
    for child in new:
        # A trajectory also ends at the token or depth limit (ALGORITHMS.md ends the loop
        # at max_depth; we keep those trajectories as completed so they can still vote).
        if child.terminal or child.cum_tokens >= config.max_tokens or child.depth >= config.max_depth:
            a.completed.append(child)
            a.remaining -= 1
        else:
            candidates.append(child)
    if candidates:
        # The paper's KV-size metric: tokens on the union of root-to-candidate paths.
        a.kv_size_steps.append(kv_size(candidates))
    if a.remaining <= 0 or not candidates:
        return None
    return Frontier(a.tree, candidates, list(a.completed), a.remaining, config.width, a.depth)


def _prepare(strategy: Strategy, active: list[_Active], frontiers: dict[int, Frontier | None]) -> None:
    """The strategy's once-per-round batch work (e.g. ETS embeds every step text of the
    round in one call); its cost is shared equally by the problems that select."""
    selecting = [a for a in active if frontiers[a.index] is not None]
    if not selecting:
        return
    before = Counter(strategy.metrics)
    strategy.prepare([frontiers[a.index] for a in selecting])
    spent = Counter(strategy.metrics) - before
    for a in selecting:
        a.strategy_metrics.update({k: v / len(selecting) for k, v in spent.items()})


def _select(a: _Active, frontier: Frontier | None, new: list[Node], strategy: Strategy, policy: Policy) -> bool:
    """Let the strategy allocate the next round; release what it will not expand. False
    when this problem's search is over."""
    a.alloc = {}
    if frontier is not None:
        before = Counter(strategy.metrics)
        a.alloc = {node_id: n for node_id, n in strategy.select(frontier).items() if n > 0}
        # Attribute the strategy's counters to this problem (problems run interleaved).
        a.strategy_metrics.update(Counter(strategy.metrics) - before)
        _check_allocation(a.alloc, frontier.candidates, strategy)
    # Completed and pruned children will never be expanded: their KV may be evicted.
    policy.release([a.handles.pop(c.id, None) for c in new if c.id not in a.alloc])
    return bool(a.alloc)


def _check_allocation(alloc: dict[int, int], candidates: list[Node], strategy: Strategy) -> None:
    allowed = {c.id for c in candidates}
    stray = set(alloc) - allowed
    if stray:
        raise RuntimeError(f"strategy {strategy.name!r} allocated children to non-candidates {sorted(stray)}")


def _finish(a: _Active, config: SearchConfig, save_trees: bool) -> dict[str, Any]:
    from ets.loop.record import result_record

    answers = [extract_answer("".join(n.step_texts())) for n in a.completed]
    chosen = choose_answer(answers, [n.step_scores() for n in a.completed], config.aggregation, config.vote)
    correct = chosen is not None and a.problem.answer is not None and is_equivalent(chosen, a.problem.answer)
    return result_record(
        problem=a.problem,
        tree=a.tree,
        completed=a.completed,
        answers=answers,
        chosen=chosen,
        correct=correct,
        kv_size_steps=a.kv_size_steps,
        wall_time=time.perf_counter() - a.started,
        config=config,
        strategy_metrics=dict(a.strategy_metrics),
        save_tree=save_trees,
    )
