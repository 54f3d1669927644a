"""A scripted world for whole searches: every node is named by its path of child indices (the
k-th child made under its parent), and its score, whether it ends its trajectory and its
length are a fixed function of that path. The same world can be searched by the project's
loop (`run_search`, through a real policy and reward built on it) and by the model of the ETS
code in tests/reference_ets.py, so two searches can be compared node for node, and a tree
can be worked out by hand.

A step's text is the line `<k> s=<score>`, with the line "The answer is 4." after it when
it ends its trajectory (the ETS code's leaf phrase, and the project's at a line's start);
its first token is STEP_MARK + k, so the policy
reads a request's path from its tokens.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from ets.config import SearchConfig
from ets.data import Problem
from ets.policy.base import Step

PROMPT_IDS = [1, 2, 3]
LEAF_PHRASE = "The answer is 4."
STEP_MARK = 1000

Path = tuple[int, ...]


class Steps:
    """What a world says of the node at `path`: (score, ends its trajectory, tokens)."""

    def step(self, path: Path) -> tuple[float, bool, int]:
        raise NotImplementedError

    def text(self, path: Path) -> str:
        score, leaf, _ = self.step(path)
        return f"<{path[-1]}> s={score!r}\n" + (f"{LEAF_PHRASE}\n" if leaf else "")


class Script(Steps):
    """A world written by hand: {path: (score, leaf)}; a path not listed is `default`. Every
    step is `tokens` long."""

    def __init__(self, steps: dict[Path, tuple[float, bool]], default: tuple[float, bool] = (0.5, True),
                 tokens: int = 2):
        self.steps, self.default, self.tokens = steps, default, tokens

    def step(self, path: Path) -> tuple[float, bool, int]:
        score, leaf = self.steps.get(path, self.default)
        return score, leaf, self.tokens


class World(Steps):
    """A random world, fixed by `seed`: scores drawn from `scores`, a node a leaf with
    probability `p_leaf`, steps of 1 to `max_step_tokens` tokens."""

    def __init__(self, seed: int, scores: tuple[float, ...], p_leaf: float = 0.2, max_step_tokens: int = 3):
        self.seed, self.scores, self.p_leaf, self.max_step_tokens = seed, scores, p_leaf, max_step_tokens

    def step(self, path: Path) -> tuple[float, bool, int]:
        digest = hashlib.blake2b(repr((self.seed, path)).encode(), digest_size=8).digest()
        r = int.from_bytes(digest, "big")
        score = self.scores[r % len(self.scores)]
        leaf = (r >> 20) % 10_000 < self.p_leaf * 10_000
        tokens = 1 + (r >> 40) % self.max_step_tokens
        return score, leaf, tokens

    def __repr__(self) -> str:
        return f"World(seed={self.seed}, scores={self.scores}, p_leaf={self.p_leaf})"


def tie_prone_scores(temperature: float) -> tuple[float, ...]:
    """Scores with exact repeats, both ends of [0, 1], and a pair one ulp apart whose s/T
    coincide (the ETS code's final pass ranks by s/T), so that every tie rule is exercised."""
    base = (0.0, 0.1, 0.3, 0.3, 0.5, 0.7, 0.7, 0.9, 1.0)
    for s in (0.9, 0.45, 0.41, 0.82, 0.48):
        up = math.nextafter(s, 1.0)
        if s / temperature == up / temperature:
            return base + (s, up)
    return base


class WorldPolicy:
    """A policy that writes the world's steps: child j of a request for the node at `path`
    is `path + (j,)`."""

    tokenizer = None
    context_tokens = None

    def __init__(self, world: Steps):
        self.world = world

    def format_prompt(self, question):
        return "Q\n", list(PROMPT_IDS)

    def expand(self, requests):
        out = []
        for r in requests:
            path = tuple(t - STEP_MARK for t in r.token_ids[len(PROMPT_IDS):] if t >= STEP_MARK)
            steps = []
            for j in range(r.n):
                _, _, tokens = self.world.step(path + (j,))
                steps.append(Step(self.world.text(path + (j,)), [STEP_MARK + j] + [7] * (tokens - 1), "stop"))
            out.append(steps)
        return out

    def release(self, handles):
        pass

    def stats(self):
        return {}


def world_reward(questions, trajectories):
    """Each step's score, as the world wrote it into the step (`s=...`)."""
    def score(text):
        return float(re.search(r"s=(\S+)", text).group(1))
    return [[[score(s) for s in traj] for traj in per_q] for per_q in trajectories]


def run_search(world: Steps, **config: Any) -> dict[str, Any]:
    """The project's whole search of one problem in `world`: its result record, tree included."""
    from ets.loop.controller import search

    return search([Problem("p", "Q", "4", {})], WorldPolicy(world), world_reward, SearchConfig(**config),
                  save_trees=True)[0]


def node_paths(record: dict[str, Any]) -> list[Path]:
    """The path of every node of a record's tree, in creation order (the root is ())."""
    paths: dict[int, Path] = {}
    for n in record["tree"]["nodes"]:
        if n["parent"] is None:
            paths[n["id"]] = ()
        else:
            paths[n["id"]] = paths[n["parent"]] + (int(n["text"][1:n["text"].index(">")]),)
    return list(paths.values())


def at_depth(record: dict[str, Any], depth: int) -> list[Path]:
    """The paths of a record's nodes at `depth`, in creation order."""
    return [p for p in node_paths(record) if len(p) == depth]
