"""`ets run --check` on the prompts: every problem's root prompt written and fitted to the
model's context as the policy will write it (ets/policy/steps.py), from the tokenizer
alone, so what a run would refuse at its first round is refused before any model loads:
a prompt with no room to generate (`policy.prompt_overflow: error`), and an explicit
`policy.kv_budget_tokens` too small for the longest prompt's sequence (ets/loop/fit.py)."""

from __future__ import annotations

from ets.config import RunConfig
from ets.data import DataError, Problem
from ets.loop.fit import check_pool_holds
from ets.models.load import read_model_config
from ets.policy.base import PromptTooLong
from ets.policy.chat import prompt_format, render
from ets.policy.steps import fit_prompt, model_context
from ets.app.terminal import plural


def prompt_fit_notes(config: RunConfig, problems: list[Problem], tokenizer) -> list[str]:
    """The prompts' lengths against the model's context, as `--check` notes; raises the
    `DataError` or `ConfigError` the run would raise."""
    policy = config.policy
    context = model_context(read_model_config(policy.model) if policy.max_context is None else None,
                            policy.max_context)
    fmt = prompt_format(tokenizer, policy)

    def write(question: str) -> tuple[str, list[int]]:
        return render(tokenizer, policy, fmt, question)

    lengths, cut = {}, 0
    for problem in problems:
        try:
            prompt = fit_prompt(problem.question, write, context, policy.prompt_overflow,
                                config.search.max_step_tokens, tokenizer)
        except PromptTooLong as exc:
            raise DataError(f"problem {problem.id!r}: {exc}") from None
        lengths[problem.id] = len(prompt.token_ids)
        cut += prompt.truncated_from is not None
    if not lengths:
        return []
    longest = max(lengths, key=lengths.get)
    if policy.backend == "engine" and policy.kv_budget_tokens is not None:
        check_pool_holds(policy.kv_budget_tokens, longest, lengths[longest], config.search, context)
    where = "no context limit known" if context is None else f"the model's context: {context:,} tokens"
    notes = [f"prompts: {min(lengths.values())}-{lengths[longest]} tokens (longest: {longest!r}); {where}"]
    if cut:
        notes.append(f"prompts: {plural(cut, 'question')} cut to fit the context (policy.prompt_overflow: truncate)")
    return notes
