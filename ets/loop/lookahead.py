"""Lookahead (`search.lookahead`, search-and-learn's): a candidate scored where its path leads.

Each candidate about to be selected among is rolled forward `lookahead` more steps,
greedily (temperature 0), and the PRM scores the rolled-out trajectory: the candidate's
steps and the rollout's. The score of its last step is the candidate's selection score
(`tags[LOOKAHEAD_SCORE]`, which beam and DVTS rank by, search.base.selection_score); the
tree keeps the candidate's own step and its own score, and the rollout is dropped.

A rollout stops early where a trajectory would end: at a final step (EOS, a boxed answer,
an answer marker), at `max_tokens`, at `max_depth` or at the model's context. Its tokens
are generated tokens of the problem (the record's `generated_tokens`, and its
`lookahead_tokens`). All rollouts of a round share each policy call (one per lookahead
step) and one reward call.

search-and-learn's DVTS does the same (`generate_k_steps`, then the PRM on
`current_text + lookahead_text`). Its beam search generates the rollouts too, but scores
each candidate's own text: its lookahead costs tokens and changes no selection there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from ets.config import SearchConfig
from ets.loop import rules
from ets.policy.base import ExpandRequest, Policy, SamplingSettings
from ets.tree import Node
from ets.rewards.base import scored
from ets.strategies.base import LOOKAHEAD_SCORE


@dataclass(eq=False)
class _Rollout:
    group: Hashable            # the problem it belongs to (one reward question each)
    question: str
    node: Node                 # the candidate rolled forward
    seed: int
    token_ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    tokens: int = 0
    handle: Any = None         # the policy's lock on the rollout's newest step
    open: bool = True

    def __post_init__(self) -> None:
        self.token_ids = self.node.path_token_ids()

    def text(self) -> str:
        """The rolled-out path's text so far, the prompt included."""
        return "".join(n.text for n in self.node.path()) + "".join(self.texts)


def look_ahead(policy: Policy, score: Callable, reward_name: str, config: SearchConfig,
               starts: list[tuple[Hashable, str, Node, int]]) -> dict[Hashable, int]:
    """Roll each (group, question, candidate, seed) forward and tag the candidate with its
    rollout's score; the tokens generated, per group."""
    rollouts = [_Rollout(*start) for start in starts]
    greedy = SamplingSettings.from_search(config)._replace(temperature=0.0)
    for _ in range(config.lookahead):
        live = [r for r in rollouts if r.open]
        if not live:
            break
        steps = policy.expand([ExpandRequest(("lookahead", r.group, r.node.id), r.token_ids, 1, r.seed, greedy)
                               for r in live])
        # The new steps lock the paths they extend: the rollouts' previous locks can go
        # (the candidate's own lock stays with the tree).
        policy.release([r.handle for r in live])
        for r, (step,) in zip(live, steps):
            final = rules.step_ends(config, step.text, step.finish, r.text)
            r.token_ids = r.token_ids + list(step.token_ids)
            r.texts.append(step.text)
            r.tokens += len(step.token_ids)
            r.handle = step.handle
            r.open = not (final or step.finish == "context"
                          or r.node.depth + len(r.texts) >= config.max_depth
                          or rules.counted_tokens(r.node, config) + r.tokens >= config.max_tokens)
    policy.release([r.handle for r in rollouts])
    _score(score, reward_name, [r for r in rollouts if r.texts])
    tokens: dict[Hashable, int] = {}
    for r in rollouts:
        tokens[r.group] = tokens.get(r.group, 0) + r.tokens
    return tokens


def _score(score: Callable, reward_name: str, rollouts: list[_Rollout]) -> None:
    """One reward call for every rollout: each problem's rolled-out trajectories."""
    groups: dict[Hashable, list[_Rollout]] = {}
    for r in rollouts:
        groups.setdefault(r.group, []).append(r)
    if not groups:
        return
    questions = [members[0].question for members in groups.values()]
    trajectories = [[r.node.step_texts() + r.texts for r in members] for members in groups.values()]
    scores = scored(score, questions, trajectories, reward_name)
    for members, per_problem in zip(groups.values(), scores):
        for r, step_scores in zip(members, per_problem):
            r.node.tags[LOOKAHEAD_SCORE] = step_scores[-1]
