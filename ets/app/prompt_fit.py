"""`ets run --check` on the prompts: every problem's root prompt written and fitted to the
model's context as the policy will write it (ets/policy/steps.py), from the tokenizer
alone (and the first as it is written, cut where it is cut), so what a run would refuse at
its first round is refused before any model loads:
a prompt with no room to generate (`policy.prompt_overflow: error`), and an explicit
`policy.kv_budget_tokens` too small for the longest prompt's sequence (ets/loop/fit.py)."""

from __future__ import annotations

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
    longest = max(lengths, key=lengths.get)
    if policy.backend == "engine" and policy.kv_budget_tokens is not None:
        check_pool_holds(policy.kv_budget_tokens, longest, lengths[longest], config.search, context)
    where = "no context limit known" if context is None else f"the model's context: {context:,} tokens"
    shortest = min(lengths.values())
    span = f"{shortest}-{lengths[longest]}" if shortest < lengths[longest] else f"{shortest}"
    notes = [f"prompts: {span} tokens (longest: {longest!r}); {where}"]
    if cut:
        notes.append(f"prompts: {plural(cut, 'question')} cut to fit the context (policy.prompt_overflow: truncate)")
    return notes, first
