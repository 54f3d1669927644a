"""`ets run --check` on the prompts: every problem's root prompt written and fitted to the
model's context as the policy will write it (ets/policy/steps.py), from the tokenizer
alone (and the first as it is written, cut where it is cut), so what a run would refuse at
its first round is refused before any model loads:
a prompt with no room to generate (`policy.prompt_overflow: error`), an explicit
`policy.kv_budget_tokens` too small for the longest prompt's sequence (ets/loop/fit.py),
and an explicit pool too small for the PRM's (ets/app/reward_fit.py)."""

from __future__ import annotations

from ets.app.reward_fit import check_reward_pool, reward_pool
from ets.config import RunConfig
from ets.data import DataError, Problem
from ets.loop.fit import check_pool_holds
from ets.models.load import read_model_config
from ets.policy.base import Prompt, PromptTooLong
from ets.policy.chat import prompt_format, render
from ets.policy.steps import fit_prompt, model_context
from ets.app.terminal import plural


def fit_prompts(config: RunConfig, problems: list[Problem], tokenizer) -> tuple[list[str], Prompt]:
    """The prompts' lengths against the model's context, as `--check` notes, and the first
    problem's prompt as the run writes it (cut, where it is cut); raises the `DataError`
    or `ConfigError` the run would raise. `problems` is not empty."""
    policy = config.policy
    lengths, cut, first, context = _fitted(config, problems, tokenizer)
    longest = max(lengths, key=lengths.get)
    if policy.backend == "engine" and policy.kv_budget_tokens is not None:
        check_pool_holds(policy.kv_budget_tokens, longest, lengths[longest], config.search, context)
    reward_notes = check_reward_pool(config, problems, lengths, context, tokenizer)
    where = "no context limit known" if context is None else f"the model's context: {context:,} tokens"
    shortest = min(lengths.values())
    span = f"{shortest}-{lengths[longest]}" if shortest < lengths[longest] else f"{shortest}"
    notes = [f"prompts: {span} tokens (longest: {longest!r}); {where}"]
    if cut:
        notes.append(f"prompts: {plural(cut, 'question')} cut to fit the context (policy.prompt_overflow: truncate)")
    return notes + reward_notes, first


def check_reward_fits(config: RunConfig, problems: list[Problem], tokenizer) -> list[str]:
    """What a run checks of the PRM's explicit KV pool before it searches `problems`, with
    the policy's `tokenizer` (ets/app/reward_fit.py): raises where it cannot hold the
    PRM's longest sequence, else its notes."""
    if not problems or reward_pool(config) is None:
        return []
    lengths, _, _, context = _fitted(config, problems, tokenizer)
    return check_reward_pool(config, problems, lengths, context, tokenizer)


def _fitted(config: RunConfig, problems: list[Problem], tokenizer) -> tuple[dict[str, int], int, Prompt, int | None]:
    """Every problem's prompt written and fitted to the model's context: the prompts'
    lengths by problem id, how many were cut, the first prompt, and the context."""
    policy = config.policy
    context = model_context(read_model_config(policy.model) if policy.max_context is None else None,
                            policy.max_context)
    fmt = prompt_format(tokenizer, policy)

    def write(question: str) -> tuple[str, list[int]]:
        return render(tokenizer, policy, fmt, question)

    lengths, cut, first = {}, 0, None
    for problem in problems:
        try:
            prompt = fit_prompt(problem.question, write, context, policy.prompt_overflow,
                                config.search.max_step_tokens, tokenizer)
        except PromptTooLong as exc:
            raise DataError(f"problem {problem.id!r}: {exc}") from None
        lengths[problem.id] = len(prompt.token_ids)
        cut += prompt.truncated_from is not None
        first = first or prompt
    return lengths, cut, first, context
