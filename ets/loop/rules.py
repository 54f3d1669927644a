"""Where a trajectory ends and what the KV metrics count: the project's rules, and the ETS
public code's under `search.compat: ets_code` (docs/FIDELITY.md), side by side.

The project: a step ends its trajectory on EOS, on a `\\boxed{}` answer, or
on one of `search.answer_markers` starting a sentence; a trajectory also completes at
`max_tokens` generated tokens, at the model's context or at `max_depth` steps, and every
completed trajectory votes.

The ETS code: a node is a leaf when its whole text holds one of its answer phrases
(`ets.answers.extract.reference_final`), never for EOS alone; the prompt counts as 2 tokens
towards `max_tokens`; the search stops after `max_depth` expansions and drops the last
nodes that are not leaves; only leaves vote (a trajectory cut at `max_tokens` spends its
unit of width and gives no answer).

Both KV metrics are kept for every search: `kv_size` (the project's: at each frontier, the
tokens on the union of its candidates' paths, the prompt counted) and `kv_size_ref` (the
ETS code's: the same union, the prompt as 2 tokens, at each selection it makes, the root's
own included).
"""

from __future__ import annotations

from typing import Callable

from ets.answers.extract import is_final_step, reference_final
from ets.config import REFERENCE_PROMPT_TOKENS, SearchConfig
from ets.tree import Node, kv_size

COMPLETE, DROP, CONTINUE = "complete", "drop", "continue"
# The ETS code's KV figure for its first selection, of the root alone.
ROOT_KV_REF = REFERENCE_PROMPT_TOKENS


def is_terminal(config: SearchConfig, parent: Node, text: str, finish: str) -> bool:
    """Whether a new step `text` under `parent` (the policy ended it with `finish`) ends
    its trajectory."""
    return step_ends(config, text, finish, lambda: "".join(n.text for n in parent.path()))


def step_ends(config: SearchConfig, text: str, finish: str, text_before: Callable[[], str]) -> bool:
    """`is_terminal` for a step after any path: `text_before()` is the path's text before
    the step, read by the ETS code's rule alone."""
    if config.ets_code:
        return reference_final(text_before() + text, text)
    return finish == "eos" or is_final_step(text, config.answer_markers)


def counted_tokens(node: Node, config: SearchConfig) -> int:
    """The tokens `max_tokens` is compared with: the generated ones, plus the ETS code's 2
    for the prompt under `compat: ets_code`."""
    return node.cum_tokens + (REFERENCE_PROMPT_TOKENS if config.ets_code else 0)


def outcome(node: Node, config: SearchConfig, at_context: bool = False) -> str:
    """What becomes of a new child: COMPLETE (it takes one unit of the width), DROP (the ETS
    code's nodes past its last selection that are not leaves) or CONTINUE (a candidate)."""
    if node.terminal:
        return COMPLETE
    if node.depth >= config.max_depth:
        return DROP if config.ets_code else COMPLETE
    if at_context or counted_tokens(node, config) >= config.max_tokens:
        return COMPLETE
    return CONTINUE


def votes(node: Node, config: SearchConfig) -> bool:
    """Whether a completed trajectory's answer takes part in the vote."""
    return node.terminal or not config.ets_code


def finished_votes(finish: str, config: SearchConfig) -> bool:
    """`votes` for a trajectory of a result record, by its `finish` (ets/loop/record.py):
    those that end in an answer or EOS are the terminal ones."""
    return finish in ("answer", "eos") or not config.ets_code


def kv_size_ref(listed: list[Node]) -> int:
    """The ETS code's KV figure for one selection over the nodes it `listed`: the union of
    their paths, the prompt as 2 tokens, and a node listed more than once (DVTS's cycled
    survivors) counted with its own tokens once per listing."""
    unique = list({n.id: n for n in listed}.values())
    repeated = sum(n.num_tokens for n in listed) - sum(n.num_tokens for n in unique)
    return kv_size(unique, prompt_tokens=REFERENCE_PROMPT_TOKENS) + repeated
