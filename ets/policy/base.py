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
  (policies that cache nothing) are ignored;
- `memory()` reports the backend's own KV memory: the most it can keep (`capacity_tokens`,
  read by admission, ets/loop/admission.py; None when it keeps nothing between calls) and
  what the live search holds now. The backend owns that number; nobody re-derives it from
  the config that built the backend.
"""

from __future__ import annotations

from typing import Any, Hashable, NamedTuple, Protocol, runtime_checkable


class ExpandRequest(NamedTuple):
    key: Hashable            # the caller's label of the node, e.g. (problem index, node id)
    token_ids: list[int]     # the node's full path: prompt + every step so far
    n: int                   # number of children to sample


class Prompt(NamedTuple):
    text: str                # the templated question: the root node's text
    token_ids: list[int]     # its tokens: the root of every path


class KVMemory(NamedTuple):
    """A policy backend's KV memory, in tokens."""

    capacity_tokens: int | None    # the most KV it keeps at once (its pool); None: nothing is kept
    live_tokens: int               # KV locked now by the handles it gave out (live search nodes)
    peak_live_tokens: int | None   # the most that had to be resident at once; None: not measured
    mean_live_tokens: float | None  # live KV right after each `expand`, averaged; None: not measured


class Step(NamedTuple):
    text: str                # decoded new tokens (delimiter included)
    token_ids: list[int]     # the new tokens
    finish: str              # "stop" (step delimiter), "eos", or "length" (max_step_tokens)
    handle: Hashable | None = None  # the policy's lock on this path, for `release`


@runtime_checkable
class Policy(Protocol):
    tokenizer: Any

    def format_prompt(self, question: str) -> Prompt:
        """The prompt text for `question` and its token ids (the root of the tree)."""

    def expand(self, requests: list[ExpandRequest]) -> list[list[Step]]:
        """`request.n` sampled continuations of each request, each ending one step."""

    def release(self, handles: list[Hashable | None]) -> None:
        """These steps' paths will not be extended again (their KV may be evicted)."""

    def memory(self) -> KVMemory:
        """Its KV capacity and live usage (see the contract above)."""

    def stats(self) -> dict[str, Any]:
        """Counters of this policy (tokens generated, the backend's own accounting)."""
