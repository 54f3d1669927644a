"""The policy interface the controller talks to.

A policy turns a batch of expansion requests (a node's token path and how many children
it should get) into new steps. The controller sends one batch per round for all active
problems; whether the policy shares prefixes (the engine) or recomputes them (the plain
`transformers` baseline) is invisible to it.

Contract:
- `expand(requests)` returns, for each request in order, exactly `request.n` steps;
- a step's `token_ids` are the tokens generated after `request.token_ids`, delimiter
  included when generation stopped on it, so `request.token_ids + step.token_ids` is the
  child's path and can be continued as-is (no re-tokenisation);
- each step may carry a `handle`: the policy's lock on the step's path (the engine keeps
  that KV cached while it is held). The controller passes every handle back to
  `release` exactly once: a pruned or completed child's right after selection, an expanded
  node's right after its children (which lock the same path) are made. `None` handles
  (policies that cache nothing) are ignored.
"""

from __future__ import annotations

from typing import Any, Hashable, NamedTuple, Protocol, runtime_checkable


class ExpandRequest(NamedTuple):
    key: Hashable            # the caller's label of the node, e.g. (problem index, node id)
    token_ids: list[int]     # the node's full path: prompt + every step so far
    n: int                   # number of children to sample


class Step(NamedTuple):
    text: str                # decoded new tokens (delimiter included)
    token_ids: list[int]     # the new tokens
    finish: str              # "stop" (step delimiter), "eos", or "length" (max_step_tokens)
    handle: Hashable | None = None  # the policy's lock on this path, for `release`


@runtime_checkable
class Policy(Protocol):
    tokenizer: Any

    def format_prompt(self, question: str) -> tuple[str, list[int]]:
        """The prompt text for `question` and its token ids (the root of the tree)."""

    def expand(self, requests: list[ExpandRequest]) -> list[list[Step]]:
        """`request.n` sampled continuations of each request, each ending one step."""

    def release(self, handles: list[Hashable | None]) -> None:
        """These steps' paths will not be extended again (their KV may be evicted)."""

    def stats(self) -> dict[str, Any]:
        """Counters of this policy (tokens generated, KV accounting where measured)."""
