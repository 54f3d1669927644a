"""`ets run --check` on the step-tag PRM's KV pool: does the longest sequence the PRM may
score fit an explicit pool (`reward.options.kv_budget_tokens` for its own engine, or
`policy.kv_budget_tokens` where it scores on the policy's engine)?

The PRM reads a question in its own template and the path's steps, each followed by its
tag (rewards/step_tag.py). Its longest sequence is bounded, from the tokenizers alone, by
the question as the PRM reads it, the most tokens the policy may generate on the path
(ets/loop/fit.py) and one tag and separator a step. With the policy's tokenizer the bound
holds and a pool below it is refused, as the run would refuse it mid-search; with another
tokenizer the steps are tokenized afresh, so the bound is an estimate and a pool below it
is a note."""

from __future__ import annotations

from ets.config import ConfigError, RunConfig
from ets.data import Problem
from ets.loop.fit import sequence_tokens


def reward_pool(config: RunConfig) -> tuple[str, int] | None:
    """The key and size of the explicit KV pool the step-tag PRM scores in; None where it
    scores on no engine or its pool is sized otherwise (the default, memory_fraction)."""
    from ets.app.memory_notes import _reward_engine, step_tag_options
    from ets.rewards.step_tag import wants_engine

    # (chat_judgement runs on the same machinery, but writes its text through a chat
    # template: its sequences are not bounded here, and a run names a pool too small)
    options = step_tag_options(config) if config.reward.name == "step_tag" else None
    on_engine = config.policy.backend == "engine"
    if options is None or not wants_engine(options, on_engine):
        return None
    if _reward_engine(config) is not None:
        tokens = options.kv_budget_tokens
        return None if tokens is None else ("reward.options.kv_budget_tokens", tokens)
    tokens = config.policy.kv_budget_tokens
    return None if tokens is None else ("policy.kv_budget_tokens", tokens)


def check_reward_pool(config: RunConfig, problems: list[Problem], prompt_lengths: dict[str, int],
                      context: int | None, policy_tokenizer) -> list[str]:
    """Raises the `ConfigError` naming the pool's key when the PRM's longest sequence
    cannot fit it; returns a note where that is only estimated (another tokenizer)."""
    pool = reward_pool(config)
    if pool is None:
        return []
    from ets.app.memory_notes import step_tag_options
    from ets.models.load import ModelLoadError, load_tokenizer
    from ets.rewards.marking import split_template

    key, capacity = pool
    options = step_tag_options(config)
    try:
        tokenizer = load_tokenizer(config.reward.model or config.policy.model)
    except (OSError, ValueError, ModelLoadError):
        return []  # check_reward_tokenizer's note says so
    head, tail = split_template(options.template, "template")

    def count(text: str, special: bool = False) -> int:
        return len(tokenizer(text, add_special_tokens=special)["input_ids"])

    per_step = count(options.tag) + count(options.step_separator)
    search = config.search
    need, longest = 0, None
    for problem in problems:
        question = count(head.replace("{question}", problem.question) + tail.replace("{question}", problem.question),
                         options.add_special_tokens)
        generated = sequence_tokens(prompt_lengths[problem.id], search, context) - prompt_lengths[problem.id]
        steps = min(search.max_depth, generated)
        total = question + generated + steps * per_step
        if total > need:
            need, longest = total, (problem.id, question, generated, steps)
    if need <= capacity:
        return []
    problem_id, question, generated, steps = longest
    same = tokenizer.get_vocab() == policy_tokenizer.get_vocab()
    what = (f"its question as the PRM reads it ({question} tokens), up to {generated} generated tokens, and a tag "
            f"and separator after each of up to {steps} steps ({steps * per_step} tokens)")
    if same:
        raise ConfigError(f"{key}: a KV pool of {capacity:,} tokens cannot hold the longest sequence the PRM may "
                          f"score for problem {problem_id!r}: {what} need {need:,}; set {key} >= {need} or lower "
                          "max_tokens or max_depth")
    return [f"{key}: a KV pool of {capacity:,} tokens may not hold the longest sequence the PRM may score for "
            f"problem {problem_id!r}: {what} need about {need:,} (the PRM's tokenizer is not the policy's, so the "
            f"steps' count is estimated); a run stops with an error if one does not fit"]
