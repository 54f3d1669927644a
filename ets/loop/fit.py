"""Does a problem fit: its longest path in the model's context, and in the policy's KV pool.

The search loop checks every prompt before its first round (`SearchLoop.preflight`), and
`ets run --check` makes the same check from the tokenizer alone, so a pool too small for
one sequence is refused in the same words before any model loads.
"""

from __future__ import annotations

from ets.config import ConfigError, SearchConfig


def sequence_tokens(prompt_tokens: int, search: SearchConfig, context: int | None) -> int:
    """The longest sequence a search from a prompt of `prompt_tokens` asks the policy for:
    a path is extended only while it holds fewer than max_tokens generated tokens and
    max_depth steps, by at most max_step_tokens, and never past the model's context."""
    need = prompt_tokens + min(search.max_tokens - 1 + search.max_step_tokens, search.max_depth * search.max_step_tokens)
    return need if context is None else min(need, context)


def check_pool_holds(capacity: int, problem_id: str, prompt_tokens: int, search: SearchConfig,
                     context: int | None) -> None:
    """A `ConfigError` naming `policy.kv_budget_tokens` when a pool of `capacity` tokens
    cannot hold the longest sequence of the problem with this prompt, and what to lower."""
    need = sequence_tokens(prompt_tokens, search, context)
    if need <= capacity:
        return
    s = search
    by_tokens, by_depth = s.max_tokens - 1 + s.max_step_tokens, s.max_depth * s.max_step_tokens
    if need < prompt_tokens + min(by_tokens, by_depth):
        why, lower = f"what the model's context of {context} leaves", "policy.max_context"
    elif by_depth < by_tokens:
        why, lower = f"max_depth {s.max_depth} x max_step_tokens {s.max_step_tokens}", "max_depth"
    else:
        why, lower = f"max_tokens {s.max_tokens} - 1 + max_step_tokens {s.max_step_tokens}", "max_tokens"
    raise ConfigError(
        f"policy.kv_budget_tokens: the policy's KV pool of {capacity} tokens cannot hold one sequence of "
        f"problem {problem_id!r}: its prompt ({prompt_tokens} tokens) and up to {need - prompt_tokens} generated "
        f"tokens ({why}) need {need}; set policy.kv_budget_tokens >= {need} or lower {lower} (a pool smaller "
        f"than a whole search is fine: the engine evicts and recomputes)")
