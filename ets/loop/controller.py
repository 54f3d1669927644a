"""The search loop: many problems at once, one batched policy call and one batched reward
call per round (docs/ARCHITECTURE.md, "One round of the search loop"); on the engine each
problem's round in flight on its own (`in_flight`, "Rounds in flight" there).

    loop = SearchLoop(problems, policy, reward, config, concurrency=8)
    records, stats = loop.run()

Each active problem holds a `SearchTree`, its completed trajectories, its remaining width,
the allocation its strategy chose last round and its own metrics. A round (`step`):
  1. admit   waiting problems start while their expected peak KV fits the policy's
             capacity (`policy.memory().capacity_tokens`, ets/loop/admission.py);
  2. expand  every active problem's allocation in one `policy.expand` call; new children
             go into their trees, and the parents' locks are released;
  3. score   one reward call scores every new child (its whole trajectory, newest step last);
             with `lookahead`, the candidates are then rolled forward greedily and scored
             where they lead (ets/loop/lookahead.py);
             a strategy that reads step embeddings from a model's hidden states (ETS with
             `search.embedder: policy` or `prm`, `Strategy.step_embeddings`) gets them on
             each child (`Node.embedding`) from the expand call or from this one;
  4. select  finished children leave the frontier; each problem's strategy allocates its
             next round; children that will not be expanded are released to the policy;
  5. finish  problems with nothing left to expand are voted, graded and handed to
             `on_result` at once (a caller can write them before the run ends), making room
             for the next.

Before the first round every prompt is formatted and checked (`preflight`): a prompt that
leaves no room in the model's context is the policy's `PromptTooLong`, raised here as a
`DataError` naming the problem (or, with `policy.prompt_overflow: truncate`, its question cut
to its last tokens inside the template, with one warning per problem; the reward then scores
the steps against that part of the question, so a megabyte-long question costs the PRM no
more than one that fits), and a KV pool that cannot hold one sequence of the
longest prompt is a `ConfigError` naming `policy.kv_budget_tokens`, before any search.

One answer per seed: every request carries its own seed, `node_seed(config seed, problem,
node id)`, and the config's `SamplingSettings`, so a problem's samples depend only on the
config, the seed and the problem, never on `concurrency`, admission order, the pool size or
what else is in flight (the policy's contract, ets/policy/base.py).

Limits, measured and not papered over. On the engine, on the CPU, a sequence's logits are
the same bit for bit whatever else is in its batch (ets/engine/invariant.py), so
the policy's samples and the PRM's scores of a problem do not depend on the problems beside
it, and tests/test_determinism.py compares step scores exactly. Before that (commit
2d4bec0) they moved in the last bits with a batch's composition, and once in 120 W=64
demo records compared between runs of 24 and 60 problems a near-tied selection flipped (PRM
scores of identical steps 1.4e-6 apart); after it, the 24 problems that run and a 24-problem run share have identical
records, step scores included. The PRM on its plain forward (the transformers and vLLM
backends) scores each sequence in a forward of its own, so its scores do not depend on the
batch either (rewards/backends.py, `batch_invariant`; tests/test_hf_determinism.py). Where
floats still depend on the batch: the transformers and vLLM policies (their logits come from
batches shaped by what is in flight: a draw that falls within their last bits of a token's
boundary moves; logged once per run), a PRM with `batch_invariant: false`, a transformer
sentence embedder for ETS (batched over every problem in flight; the demo's static embedder
is per text), several torch threads on larger models, and GPUs. A
selection reads those floats, so there it *can* flip when two candidates' scores (or a
REBASE share at an integer, or a cosine distance at the ETS cut) lie within ~1e-6 of the
decision; ties keep candidate order. ETS's solver also runs under a
wall-clock limit (`lp_time_limit`, 10 s): a solve that runs out falls back to REBASE, which a
slower or busier machine can make happen on one run and not another (counted in
`lp_fallback`, and logged; the limit is set far above the slowest solves measured, see
lp.solve.DEFAULT_TIME_LIMIT).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

from ets.answers.aggregate import choose_answer
from ets.answers.extract import NOT_FOUND, extract
from ets.answers.accuracy import grade
from ets.config import ConfigError, SearchConfig
from ets.data import DataError, Problem
from ets.loop import rules
from ets.loop.admission import KVAdmission
from ets.loop.fit import check_pool_holds, sequence_tokens
from ets.loop.lookahead import look_ahead
from ets.loop.record import result_record
from ets.policy.base import ExpandRequest, Policy, Prompt, PromptTooLong, SamplingSettings, Step
from ets.tree import Node, SearchTree, kv_size
from ets.rewards.base import empty_steps_inherit, scored, validate_scores
from ets.strategies import Frontier, Strategy, build
from ets.strategies.base import checked_allocation

log = logging.getLogger(__name__)


def node_seed(seed: int, problem: Problem, node_id: int) -> int:
    """The seed of the children of node `node_id` of `problem`'s search under the config's
    `seed`: a 62-bit BLAKE2b hash of (seed, problem id, question, node id). Node ids are
    given in the order a tree grows, which depends on this problem alone; the question is
    hashed too, so two problems that share an id (a caller's own) but not a question
    draw their own samples."""
    key = f"{seed}\x00{problem.id}\x00{problem.question}\x00{node_id}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 2


PHASES = ("expand_seconds", "score_seconds", "select_seconds")  # RunStats' per-phase clocks


class RunStats(NamedTuple):
    """What one run of the loop measured."""

    rounds: int                  # rounds run (one policy call and one reward call each)
    mean_active: float           # problems in flight, averaged over rounds
    peak_active: int             # the most problems in flight in one round
    mean_search_peak_kv: float   # a search's peak footprint (admission's projection), averaged over problems
    # Wall seconds of the round's three phases, summed over rounds: the policy's call
    # (decode), the reward's call, and selection (the strategy's batch work and every
    # frontier's allocation: ETS's embedding, clustering and integer programs).
    expand_seconds: float = 0.0
    score_seconds: float = 0.0
    select_seconds: float = 0.0


class LoopResult(NamedTuple):
    records: list[dict[str, Any]]  # one result record per problem, in input order (ets/loop/record.py)
    stats: RunStats


@dataclass(eq=False)
class _Active:
    """The state of one problem's search between rounds."""

    index: int
    problem: Problem
    tree: SearchTree
    alloc: dict[int, int]
    remaining: int
    completed: list[Node] = field(default_factory=list)
    depth: int = 0
    metrics: Counter = field(default_factory=Counter)  # the strategy writes here, via its Frontier
    handles: dict[int, Any] = field(default_factory=dict)  # node id -> the policy's lock
    kv_size_steps: list[int] = field(default_factory=list)
    # the ETS code's KV metric; its first selection is of the root alone (ets/loop/rules.py)
    kv_size_ref_steps: list[int] = field(default_factory=lambda: [rules.ROOT_KV_REF])
    peak_footprint: float = 0.0  # the most KV tokens a round of this search has locked
    context_warned: bool = False  # a path of this search has reached the model's context
    lookahead_tokens: int = 0  # generated by lookahead rollouts (not in the tree)
    # what the reward scores the steps against: the question, or the end of it that a
    # truncated prompt kept (policy.prompt_overflow=truncate)
    question: str = ""
    started: float = field(default_factory=time.perf_counter)
    expansion: Any = None  # its round's expansion in flight (a policy that can `submit`)


class SearchLoop:
    """One run of `config.method` over `problems`; `run()` once.

    `reward` is a `rewards.ProcessRewardModel` or any callable with its `score` signature;
    its output is validated every round. `progress` is an optional tqdm-like bar updated
    once per finished problem. `save_trees` adds each whole search tree to its record. At
    most `concurrency` problems are in flight; fewer when the policy reports a KV capacity
    that their expected peaks would outgrow.
    """

    def __init__(
        self,
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
        in_flight: bool | None = None,
    ):
        self.policy = policy
        self.config = config
        self.strategy = strategy or build(config)
        self.reward_name = getattr(reward, "name", getattr(reward, "__name__", type(reward).__name__))
        self.score_fn = getattr(reward, "score", reward)
        self.sampling = SamplingSettings.from_search(config)  # what every request asks for
        self.context_tokens = getattr(policy, "context_tokens", None)
        self.concurrency = concurrency
        self.on_result = on_result
        self.progress = progress
        self.save_trees = save_trees
        # The capacity is the policy backend's own figure, read once: the pool does not resize.
        self.admission = KVAdmission(_capacity(policy), config.width, config.max_step_tokens, config.max_tokens)
        self.pending = list(enumerate(problems))[::-1]  # pop() from the end = input order
        self.active: list[_Active] = []
        self.results: dict[int, dict[str, Any]] = {}
        self._prompts: dict[int, Prompt] = {}  # tokenised once, even if a problem waits several rounds
        self._rounds = self._active_sum = self._peak_active = 0
        self._phase_seconds = dict.fromkeys(PHASES, 0.0)
        self._checked = False
        # "policy" / "prm": whose hidden states embed the steps (None: the strategy needs none)
        step_embeddings = getattr(self.strategy, "step_embeddings", None)
        self.embeddings = step_embeddings() if step_embeddings is not None else None
        self.score_and_embed = getattr(reward, "score_with_embeddings", None)
        self.reward_embeds = bool(getattr(reward, "embeds_steps", False))
        self.reward_embeds_note = getattr(reward, "embeds_steps_note", None)  # why it cannot, when it says
        # Each problem's rounds on its own clock: submitted, and taken back as soon as its own
        # steps end (a policy that can: ets/policy/engine.py `submit`/`poll`). Not with
        # lookahead (its rollouts are whole rounds), nor with a PRM that scores on the
        # policy's own engine (a scoring call there waits for nothing in flight).
        # `in_flight`: None, whenever it can; False: every problem's round together (records
        # are the same either way, only the time differs: `rounds` in the run config).
        reward_engine = getattr(getattr(reward, "backend", None), "engine", None)
        can = (hasattr(policy, "submit") and hasattr(policy, "poll") and not config.lookahead
               and (reward_engine is None or reward_engine is not getattr(policy, "engine", None)))
        if in_flight and not can:
            raise ValueError("in_flight: this policy cannot submit expansions, or lookahead or a PRM on the "
                             "policy's own engine needs whole rounds")
        self.in_flight = can if in_flight is None else in_flight

    def run(self) -> LoopResult:
        try:
            while self.step():
                pass
        except BaseException:
            if self.in_flight:  # the other problems' expansions stop with the search
                self.policy.abandon()
            raise
        return LoopResult([self.results[i] for i in sorted(self.results)], self.stats())

    def step(self) -> bool:
        """One round; False when every problem is done. With expansions in flight
        (`in_flight`), the round of the problems whose steps ended first."""
        if not self._checked:
            self.preflight()
        self.admit()
        if not self.active:
            return False
        if self.in_flight:
            return self._step_in_flight()
        self._count_round()
        clock = self._phase_seconds
        t0 = time.perf_counter()
        children = self.expand()
        t1 = time.perf_counter()
        self.score(children)
        t2 = time.perf_counter()
        if self.config.lookahead:
            self.look_ahead(children)  # its rollouts' decoding and scoring: counted with the policy's
        t3 = time.perf_counter()
        done = self.select(children)
        t4 = time.perf_counter()
        clock["expand_seconds"] += t1 - t0 + t3 - t2
        clock["score_seconds"] += t2 - t1
        clock["select_seconds"] += t4 - t3
        self.finish(done)
        return True

    def _step_in_flight(self) -> bool:
        """Submit the round of every problem that has none in flight; run the policy until
        some have ended theirs; score, select and finish those, while the others decode on.
        (Waiting for more of them, half, made more forwards, not fewer: the demo, rebase
        W=16, 8 problems, 640 against 527 in whole rounds and 518 this way.)"""
        for a in self.active:
            if a.expansion is None:
                a.expansion = self.policy.submit(self._requests([a]))
        clock = self._phase_seconds
        t0 = time.perf_counter()
        ready = [a for a in self.active if a.expansion.done]
        while not ready:
            self.policy.poll()
            ready = [a for a in self.active if a.expansion.done]
        self._count_round()
        children = {}
        for a in ready:
            expansion, a.expansion = a.expansion, None
            children.update(self._grow([a], expansion.requests, expansion.steps))
        t1 = time.perf_counter()
        self.score(children, ready)
        t2 = time.perf_counter()
        done = self.select(children, ready)
        clock["expand_seconds"] += t1 - t0
        clock["score_seconds"] += t2 - t1
        clock["select_seconds"] += time.perf_counter() - t2
        self.finish(done)
        return True

    def _count_round(self) -> None:
        """A round's place in the run's statistics: rounds, problems in flight."""
        self._rounds += 1
        self._active_sum += len(self.active)
        self._peak_active = max(self._peak_active, len(self.active))

    def stats(self) -> RunStats:
        r = self._rounds
        return RunStats(r, self._active_sum / r if r else 0.0, self._peak_active, self.admission.mean_peak or 0.0,
                        **self._phase_seconds)

    # ------------------------------------------------------------------ the round
    def preflight(self) -> None:
        """Format every waiting prompt and check, before any search, that each fits the
        model's context and that the longest fits one sequence in the policy's KV pool,
        and that the step embeddings the strategy reads can be had."""
        self._checked = True
        self._check_embeddings()
        for index, problem in self.pending:
            self._prompt(index, problem)
        capacity = self.admission.capacity_tokens
        if capacity is None or not self._prompts:
            return
        index, problem = max(reversed(self.pending), key=lambda item: len(self._prompts[item[0]].token_ids))
        check_pool_holds(capacity, problem.id, len(self._prompts[index].token_ids), self.config, self.context_tokens)

    def _check_embeddings(self) -> None:
        """`search.embedder: policy` needs a policy that hands out step embeddings, `prm` a
        reward that does: else one line naming the other choices."""
        others = "or a sentence embedder (e.g. static:all-MiniLM-L6-v2)"
        if self.embeddings == "policy" and not getattr(self.policy, "embeds_steps", False):
            backend = getattr(getattr(self.policy, "config", None), "backend", None)
            what = f"policy.backend {backend}" if backend else f"the policy {type(self.policy).__name__}"
            raise ConfigError(f"search.embedder: policy reads the policy's hidden states, which {what} does not "
                              f"hand out; use embedder: prm (the PRM's) {others}")
        if self.embeddings == "prm" and not (self.score_and_embed is not None and self.reward_embeds):
            why = f" ({self.reward_embeds_note})" if self.reward_embeds_note else ""
            raise ConfigError(f"search.embedder: prm reads the PRM's hidden states, which reward {self.reward_name!r} "
                              f"does not hand out{why}; use embedder: policy (the policy's) {others}")

    def sequence_tokens(self, prompt_tokens: int) -> int:
        """The longest sequence a search from a prompt of `prompt_tokens` asks the policy for."""
        return sequence_tokens(prompt_tokens, self.config, self.context_tokens)

    def _prompt(self, index: int, problem: Problem) -> Prompt:
        """The problem's prompt, formatted (and fitted to the context) once."""
        if index not in self._prompts:
            try:
                prompt = Prompt(*self.policy.format_prompt(problem.question))
            except PromptTooLong as exc:
                raise DataError(f"problem {problem.id!r}: {exc}") from None
            if prompt.truncated_from is not None:
                log.warning("problem %r: its prompt of %d tokens does not fit the model's context of %s; kept the "
                            "end of its question, in a prompt of %d tokens (policy.prompt_overflow=truncate)",
                            problem.id, prompt.truncated_from, self.context_tokens, len(prompt.token_ids))
            self._prompts[index] = prompt
        return self._prompts[index]

    def admit(self) -> None:
        """Start waiting problems while their expected peak KV fits beside the active ones'."""
        reserved = 0.0
        for a in self.active:
            footprint = self.admission.footprint([a.tree.nodes[i] for i in a.alloc], sum(a.alloc.values()))
            a.peak_footprint = max(a.peak_footprint, footprint)
            reserved += self.admission.reservation(footprint, a.tree.root.num_tokens)
        while self.pending and len(self.active) < self.concurrency:
            index, problem = self.pending[-1]
            prompt = self._prompt(index, problem)
            if not self.admission.admits(reserved, len(prompt.token_ids), len(self.active)):
                break  # wait until a finished search frees its share of the capacity
            self.pending.pop()
            del self._prompts[index]
            tree = SearchTree(prompt.text, prompt.token_ids)
            a = _Active(index, problem, tree, {0: self.strategy.root_children(self.config.width)}, self.config.width)
            a.question = problem.question
            if prompt.truncated_from is not None:
                a.tree.root.tags["truncated_from"] = prompt.truncated_from
                a.question = prompt.question if prompt.question is not None else problem.question
            a.peak_footprint = self.admission.footprint([a.tree.root], self.config.width)
            reserved += self.admission.reservation(a.peak_footprint, len(prompt.token_ids))
            self.active.append(a)

    def expand(self) -> dict[int, list[Node]]:
        """One policy call for every active allocation; the new children of each problem."""
        requests = self._requests(self.active)
        return self._grow(self.active, requests, self.policy.expand(requests))

    def _requests(self, problems: list[_Active]) -> list[ExpandRequest]:
        """The policy requests of these problems' allocations (one per node to expand)."""
        seed = self.config.seed
        embed = self.embeddings == "policy"
        return [
            ExpandRequest((a.index, node_id), a.tree.nodes[node_id].path_token_ids(), n,
                          node_seed(seed, a.problem, node_id), self.sampling, embed)
            for a in problems
            for node_id, n in a.alloc.items()
        ]

    def _grow(self, problems: list[_Active], requests: list[ExpandRequest],
              steps: list[list[Step]]) -> dict[int, list[Node]]:
        """The policy's steps added to these problems' trees; the new children of each."""
        # The children now lock the paths they extend: the parents' own locks can go.
        self.policy.release([a.handles.pop(node_id, None) for a in problems for node_id in a.alloc])

        children: dict[int, list[Node]] = {a.index: [] for a in problems}
        by_index = {a.index: a for a in problems}
        for req, req_steps in zip(requests, steps):
            a = by_index[req.key[0]]
            parent = a.tree.nodes[req.key[1]]
            for step in req_steps:
                terminal = rules.is_terminal(self.config, parent, step.text, step.finish)
                child = a.tree.add_child(parent, step.text, step.token_ids, terminal)
                child.tags["finish"] = step.finish
                child.embedding = step.embedding
                a.handles[child.id] = step.handle
                children[a.index].append(child)
        self.admission.observe(c for new in children.values() for c in new)
        return children

    def score(self, children: dict[int, list[Node]], problems: list[_Active] | None = None) -> None:
        """One reward call for every new child of these problems (default: every active one)."""
        with_children = [a for a in (self.active if problems is None else problems) if children[a.index]]
        if not with_children:
            return
        questions = [a.question for a in with_children]
        trajectories = [[c.step_texts() for c in children[a.index]] for a in with_children]
        if self.embeddings == "prm":  # the newest step's embedding, from the PRM's same forward
            scores, embeddings = self.score_and_embed(questions, trajectories)
            for a, per_problem in zip(with_children, embeddings):
                for child, embedding in zip(children[a.index], per_problem):
                    child.embedding = embedding
            scores = validate_scores(scores, trajectories, self.reward_name, [a.problem.id for a in with_children])
        else:
            scores = scored(self.score_fn, questions, trajectories, self.reward_name,
                            [a.problem.id for a in with_children])
        if not self.config.ets_code:  # (the ETS code scores an empty step as any other)
            empty_steps_inherit(trajectories, scores)
        for a, per_problem in zip(with_children, scores):
            for child, step_scores in zip(children[a.index], per_problem):
                child.score = step_scores[-1]  # the newest step's score drives selection

    def look_ahead(self, children: dict[int, list[Node]]) -> None:
        """Score each candidate by a greedy rollout of `lookahead` steps (ets/loop/lookahead.py),
        for the problems that will select this round."""
        starts = []
        for a in self.active:
            new = children[a.index]
            outcomes = [rules.outcome(c, self.config, c.tags.get("finish") == "context") for c in new]
            if a.remaining - outcomes.count(rules.COMPLETE) <= 0:
                continue  # its search ends this round: nothing to select among
            starts += [(a.index, a.question, c, node_seed(self.config.seed, a.problem, c.id))
                       for c, outcome in zip(new, outcomes) if outcome == rules.CONTINUE]
        if not starts:
            return
        tokens = look_ahead(self.policy, self.score_fn, self.reward_name, self.config, starts)
        for a in self.active:
            a.lookahead_tokens += tokens.get(a.index, 0)

    def select(self, children: dict[int, list[Node]], problems: list[_Active] | None = None) -> list[_Active]:
        """Each strategy allocates its problem's next round (these problems', default every
        active one's); the problems that are over."""
        problems = self.active if problems is None else problems
        done = []
        for a in problems:
            frontier = self._frontier(a, children[a.index])
            a.alloc = {} if frontier is None else self._allocation(frontier)
            # Completed and pruned children will never be expanded: their KV may be evicted.
            self.policy.release([a.handles.pop(c.id, None) for c in children[a.index] if c.id not in a.alloc])
            if not a.alloc:
                done.append(a)
        return done

    def finish(self, done: list[_Active]) -> None:
        """Vote, grade and hand over each finished problem; its place goes to the next."""
        for a in done:
            self.results[a.index] = record = self._record(a)
            self.admission.finished(a.peak_footprint)
            if self.on_result is not None:
                self.on_result(record)
            if self.progress is not None:
                self.progress.update(1)
        self.active = [a for a in self.active if a not in done]

    # ------------------------------------------------------------------ helpers
    def _frontier(self, a: _Active, new: list[Node]) -> Frontier | None:
        """Move finished children to `completed`; the frontier left to select from, if any."""
        config = self.config
        a.depth += 1
        candidates = []
        for child in new:
            # A trajectory also ends at the model's context, or the token or depth limit
            # (the ETS code ends the loop at max_depth; we keep those trajectories as
            # completed so they can still vote; compat: ets_code drops them, rules.outcome).
            at_context = child.tags.get("finish") == "context"
            if at_context and not a.context_warned:
                a.context_warned = True
                log.warning("problem %r: a path reached the model's context (%s tokens); trajectories that reach it "
                            "end there (finish 'context')", a.problem.id, self.context_tokens)
            outcome = rules.outcome(child, config, at_context)
            if outcome == rules.COMPLETE:
                a.completed.append(child)
                a.remaining -= 1
            elif outcome == rules.CONTINUE:
                candidates.append(child)
        if candidates:
            # The paper's KV-size metric: tokens on the union of root-to-candidate paths.
            a.kv_size_steps.append(kv_size(candidates))
        if a.remaining <= 0 or not candidates:
            return None
        frontier = Frontier(a.tree, candidates, list(a.completed), a.remaining, config.width, a.depth, a.metrics)
        # the ETS code counts selections only, over the nodes its selection lists
        a.kv_size_ref_steps.append(rules.kv_size_ref(self.strategy.listed_nodes(frontier)))
        return frontier

    def _allocation(self, frontier: Frontier) -> dict[int, int]:
        return checked_allocation(self.strategy.select(frontier), frontier, self.strategy)

    def _record(self, a: _Active) -> dict[str, Any]:
        config = self.config
        completed = self.strategy.answering(a.completed, config.width)
        found = [extract("".join(n.step_texts()), config.answer_extraction, config.answer_markers)
                 if rules.votes(n, config) else NOT_FOUND
                 for n in completed]
        answers = [f.answer for f in found]
        chosen = choose_answer(answers, [n.step_scores() for n in completed], config.aggregation, config.vote)
        correct = grade(chosen, a.problem.answer)  # None: the problem has no ground truth
        return result_record(
            problem=a.problem,
            tree=a.tree,
            completed=completed,
            answers=answers,
            answer_rules=[f.rule for f in found],
            chosen=chosen,
            correct=correct,
            kv_size_steps=a.kv_size_steps,
            kv_size_ref_steps=a.kv_size_ref_steps,
            wall_time=time.perf_counter() - a.started,
            config=config,
            strategy_metrics=dict(+a.metrics),  # counters that stayed at zero are left out
            save_tree=self.save_trees,
            lookahead_tokens=a.lookahead_tokens if config.lookahead else None,
        )


def _capacity(policy: Policy) -> int | None:
    """The policy's KV capacity. A policy written before `memory()` joined the protocol
    reports none: it is admitted up to `concurrency`, as it always was."""
    memory = getattr(policy, "memory", None)
    return memory().capacity_tokens if memory is not None else None


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
) -> list[dict[str, Any]]:
    """Run `config.method` on every problem; one result record per problem, in input order
    (see ets/loop/record.py for the record's fields, `SearchLoop` for the arguments). For
    the run's statistics as well, use `SearchLoop(...).run()`."""
    return SearchLoop(
        problems, policy, reward, config, strategy=strategy, concurrency=concurrency,
        on_result=on_result, progress=progress, save_trees=save_trees,
    ).run().records
