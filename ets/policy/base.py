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
- optional, `submit(requests)` and `poll()` (the engine policy has them): `expand` without
  waiting. `submit` returns a ticket; each `poll()` runs one step of everything submitted
  and returns the tickets that ended with it, whose `steps` are then what `expand` would
  have returned; `abandon()` drops everything in flight (a search stopped by an error).
  The loop then runs each problem's round on its own (ets/loop/controller.py, `in_flight`);
- `memory()` reports the backend's own KV memory: the most it can keep (`capacity_tokens`,
  read by admission, ets/loop/admission.py; None when it keeps nothing between calls) and
  what the live search holds now. The backend owns that number; nobody re-derives it from
  the config that built the backend.
- sampling: a request's `sampling` (a `SamplingSettings`: temperature, top-p, top-k,
  max_step_tokens) is what the caller wants for it; the search loop sets it from the
  `SearchConfig` it runs, so `ets.search_with(..., config)` decides, not the config the policy
  was built with (that one is the default for a request without `sampling`). A policy
  that cannot honour a setting raises `ValueError` naming it; it never ignores one.
- seeds: sample j of a request with a `seed` depends only on (seed, j) and the model:
  not on the other requests of the call, their order, the batch or the cache. The loop
  derives each node's seed from (config seed, problem, node id), so a problem's search does
  not depend on what else is in flight. (Up to floating point: logits computed in another
  batch may differ in the last bits, which moves a sample only when its uniform draw falls
  within that distance of a token's boundary.) A request without a seed gets one from the
  policy's own stream (the order of calls then matters).
- context: `context_tokens` is the most tokens a path may hold (the model's positions,
  or `policy.max_context`; None: no limit known). A prompt that leaves no room to
  generate is refused by `format_prompt` (`PromptTooLong`) or its question cut to its last
  tokens inside the template (`policy.prompt_overflow`; `Prompt.truncated_from` says from how
  many, `Prompt.question` is the part kept); during the
  search no request decodes past the context: its new tokens are capped at
  `context_tokens - len(token_ids)`, and a step that fills the context ends with finish
  "context" (the loop then completes its trajectory).
- step embeddings: a request with `embed` asks for each step's `embedding`, the mean of
  the policy's final hidden states its tokens were sampled from, L2-normalised (ETS's
  `search.embedder: policy`). A policy that can hand them out says so with
  `embeds_steps = True`; the search loop refuses `embedder: policy` on any other.
"""

from __future__ import annotations

from typing import Any, Hashable, NamedTuple, Protocol, runtime_checkable

from ets.data import DataError


class SamplingSettings(NamedTuple):
    """How a request's children are sampled; `from_search` reads them off a SearchConfig."""

    temperature: float = 1.0   # 0: greedy
    top_p: float = 1.0
    top_k: int = 0             # 0 = off
    max_step_tokens: int = 256  # new tokens per step before it is cut

    @classmethod
    def from_search(cls, config) -> "SamplingSettings":
        return cls(float(config.temperature), float(config.top_p), int(config.top_k), int(config.max_step_tokens))


class ExpandRequest(NamedTuple):
    key: Hashable            # the caller's label of the node, e.g. (problem index, node id)
    token_ids: list[int]     # the node's full path: prompt + every step so far
    n: int                   # number of children to sample
    seed: int | None = None  # sample j depends only on (seed, j); None: the policy's own stream
    sampling: SamplingSettings | None = None  # None: the settings the policy was built with
    embed: bool = False      # each step's `embedding` too (policies with `embeds_steps`)


class Prompt(NamedTuple):
    text: str                # the templated question: the root node's text
    token_ids: list[int]     # its tokens: the root of every path
    truncated_from: int | None = None  # the prompt's length before it was cut to fit the context
    question: str | None = None  # when cut: the end of the question the prompt holds (what the reward sees)


class PromptTooLong(DataError):
    """A prompt leaves no room in the model's context (`policy.prompt_overflow: error`).
    The message says how long it is, the context, and the fix; the search loop puts the
    problem's id in front."""


class KVMemory(NamedTuple):
    """A policy backend's KV memory, in tokens."""

    capacity_tokens: int | None    # the most KV it keeps at once (its pool); None: nothing is kept
    live_tokens: int               # KV locked now by the handles it gave out (live search nodes)
    peak_live_tokens: int | None   # the most that had to be resident at once; None: not measured
    mean_live_tokens: float | None  # live KV right after each `expand`, averaged; None: not measured


class Step(NamedTuple):
    text: str                # decoded new tokens (delimiter included)
    token_ids: list[int]     # the new tokens
    finish: str              # "stop" (step delimiter), "eos", "length" (max_step_tokens), or
                             # "context" (the path now fills the model's context)
    handle: Hashable | None = None  # the policy's lock on this path, for `release`
    # with ExpandRequest.embed: the mean of the final hidden states its tokens were sampled
    # from (the path's last token's, then each of its tokens' but the last; an EOS that
    # ended it counted), L2-normalised, a float32 numpy vector
    embedding: Any = None


@runtime_checkable
class Policy(Protocol):
    tokenizer: Any
    context_tokens: int | None  # the most tokens a path may hold; None: no limit known

    def format_prompt(self, question: str) -> Prompt:
        """The prompt text for `question` and its token ids (the root of the tree), fitted
        to the context (raises `PromptTooLong`, or truncates, as configured)."""

    def expand(self, requests: list[ExpandRequest]) -> list[list[Step]]:
        """`request.n` sampled continuations of each request, each ending one step."""

    def release(self, handles: list[Hashable | None]) -> None:
        """These steps' paths will not be extended again (their KV may be evicted)."""

    def memory(self) -> KVMemory:
        """Its KV capacity and live usage (see the contract above)."""

    def stats(self) -> dict[str, Any]:
        """Counters of this policy (tokens generated, the backend's own accounting)."""
