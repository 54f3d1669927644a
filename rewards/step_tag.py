"""The step-tag PRM (Math-Shepherd convention): a causal LM reads the steps, each followed
by a step tag, and the score of a step is P(good) at its tag:

    text  = template with {question} and {steps} = "step 1 ки\\nstep 2 ки"
    score = softmax(logits[tag position][[good, bad]])[good]

Defaults are Math-Shepherd's (`peiyi9979/math-shepherd-mistral-7b-prm`): input
`f"{question} {step1} ки\\n{step2} ки"`, labels "+" / "-", BOS added. Llemma-based PRMs
trained in the same convention load by path with the same options.

Backends (option `backend`): `engine` scores on the prefix-sharing engine, so siblings in
the search tree share the KV of question and history; `forward` runs a plain padded
forward; `auto` (default) picks the engine when it is installed and the policy runs on it.
Both give the same scores (tests/test_rewards_step_tag.py checks 1e-5). The PRM gets its
own engine (its own KV pool, so the policy's KV figures stay the policy's); with
`share_policy_engine: true` and the policy's model it scores on the policy's engine
instead, saving a copy of the weights.

Option `surprise` ({tag, step, path, bias}) reads the PRM's verdict together with its own
LM's surprise at each step's numbers (rewards/surprise.py); the demo config sets it.

Memory: the PRM's own pool is sized by its own key, `reward.options.kv_budget_tokens`
(None: the engine's default, `ets.engine.DEFAULT_KV_TOKENS`), never by the policy's
`policy.kv_budget_tokens`: it is a second cache beside the policy's, and `stats()`
reports its size and peak (`pool_kv_tokens`, `peak_kv_tokens`), which the run summary
shows as `reward_stats`.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ets.config import ConfigError
from ets.config.checks import switch
from ets.config.sections import COMPILE_MODES
from ets.rewards.backends import EngineBackend, ScoringBackend, forward_backend, prefix_digests
from ets.rewards.marker_prm import MarkerPRM
from ets.rewards.marking import (MarkedText, MarkerError, clean_step, mark_steps, split_template, token_id,
                             tokenize_marked_offsets)
from ets.rewards.options import RewardContext, check_dtype, choice
from ets.rewards.surprise import SurpriseReadout, number_rows, number_token_ids, step_surprise

log = logging.getLogger(__name__)

BACKENDS = ("auto", "engine", "forward")
MAX_MEMO_STEPS = 1 << 18       # steps whose surprise the readout remembers (a few MB)


@dataclass
class StepTagOptions:
    tag: str = " ки"                  # appended to every step; the score is read at its token
    good_token: str | int = "+"       # a string that is one token, or a token id
    bad_token: str | int = "-"
    template: str = "{question} {steps}"
    step_separator: str = "\n"        # between one step's tag and the next step
    strip_steps: bool = True          # drop the policy's delimiter whitespace around steps
    add_special_tokens: bool = True   # e.g. BOS, as the tokenizer's own encode() adds it
    backend: str = "auto"             # auto | engine | forward
    padding_side: str | None = None   # forward backend: left | right (default: the tokenizer's)
    max_batch_tokens: int = 8192      # tokens per forward (forward: padded; engine: new tokens)
    batch_invariant: bool = True      # forward backend: one sequence per forward, its scores the same whatever
                                      # else is scored (false: padded micro-batches, scores move in the last bits)
    kv_budget_tokens: int | None = None  # own engine: its KV pool in tokens (None: ets.engine.DEFAULT_KV_TOKENS)
    compile: str | bool = "auto"      # own engine: its forward under torch.compile (auto: on cuda), as policy.compile
    share_policy_engine: bool = False  # same model as the policy: score on the policy's engine
    device: str | None = None         # default: the policy's
    dtype: str | None = None          # default: the policy's
    surprise: Any = None              # {tag, step, path, bias}: also read the LM's surprise (rewards/surprise.py)

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        SurpriseReadout.parse(self.surprise)
        if not self.tag:
            raise ValueError("option 'tag' must be a non-empty string, e.g. ' ки'")
        split_template(self.template, "template")
        choice("backend", self.backend, BACKENDS)
        if self.padding_side is not None:
            choice("padding_side", self.padding_side, ("left", "right"))
        if self.max_batch_tokens < 1:
            raise ValueError(f"option 'max_batch_tokens' = {self.max_batch_tokens} must be >= 1")
        if self.kv_budget_tokens is not None and self.kv_budget_tokens < 1:
            raise ValueError(f"option 'kv_budget_tokens' = {self.kv_budget_tokens} must be >= 1 (or null: the engine's default)")
        self.compile = switch(self.compile)
        choice("compile", self.compile, COMPILE_MODES)


class StepTagPRM(MarkerPRM):
    Options = StepTagOptions
    readout: SurpriseReadout | None = None     # option `surprise`; subclasses without it read the tag alone

    def __init__(self, tokenizer, options: StepTagOptions, make_backend: Callable[[list[int] | None], ScoringBackend],
                 name: str = "step_tag"):
        # Resolve the three tokens before `make_backend` loads any weights: a wrong tag
        # fails in a second, not after a 7B model has loaded.
        tag_id, good, bad = self._tokens(tokenizer, options, name)
        self.options = options
        self._head, self._tail = split_template(options.template, "template")
        self.readout = SurpriseReadout.parse(options.surprise)
        self._good_bad = [good, bad]
        # The surprise needs whole rows of logits (log-softmax over the vocabulary).
        self._numbers = number_token_ids(tokenizer) if self.readout else frozenset()
        # s_k of the steps already read, by a digest of the tokens up to the step's tag: a
        # search asks for every step of a path each round, and without this the rows of
        # every history step's numbers (~10 full rows a step) were stacked again each round.
        self._surprise_memo: OrderedDict[bytes, float] = OrderedDict()
        self._needs_rows: set[bytes] = set()    # this round's steps whose number rows were asked for
        super().__init__(name, tokenizer, make_backend(None if self.readout else [good, bad]), tag_id, positive=0,
                         add_special_tokens=options.add_special_tokens)

    @staticmethod
    def _tokens(tokenizer, options: StepTagOptions, name: str) -> tuple[int, int, int]:
        """The step tag's, good token's and bad token's ids; each must be one token."""
        try:
            return (token_id(tokenizer, options.tag, "step tag"), token_id(tokenizer, options.good_token, "good token"),
                    token_id(tokenizer, options.bad_token, "bad token"))
        except MarkerError as exc:
            raise ConfigError(f"reward {name!r}: {exc}") from exc

    @classmethod
    def check_tokenizer(cls, tokenizer, options: StepTagOptions, name: str) -> None:
        """What building this reward checks of its tokenizer before any weights load (for
        `ets run --check`): a `ConfigError` naming what is wrong."""
        cls._tokens(tokenizer, options, name)

    def render(self, question: str, steps: list[str]) -> MarkedText:
        o = self.options
        steps = [clean_step(s, o.tag, o.strip_steps) for s in steps]
        return mark_steps(self._head.replace("{question}", question), steps, o.tag, o.step_separator,
                          self._tail.replace("{question}", question))

    def tokenize(self, marked: list[MarkedText]) -> list[tuple[list[int], list[int]]]:
        """With `surprise`: after the tags, the positions whose rows predict the numbers of
        each step not read before (`_surprise_memo`; `_features` reads them in this order)."""
        if self.readout is None:
            return super().tokenize(marked)
        # A round is one tokenize, then one read per trajectory: the memo is trimmed only
        # here, so what this round found in it stays there until its reads are done.
        while len(self._surprise_memo) > MAX_MEMO_STEPS:
            self._surprise_memo.popitem(last=False)
        self._needs_rows = set()
        out = []
        for (ids, tags, offsets), m in zip(tokenize_marked_offsets(self.tokenizer, marked, self.marker_id,
                                                                    self.add_special_tokens), marked):
            new = [(d, span) for d, span in zip(prefix_digests(ids, tags), m.steps) if d not in self._surprise_memo]
            self._needs_rows.update(d for d, _ in new)
            rows = number_rows(ids, offsets, [span for _, span in new], self._numbers)
            out.append((ids, tags + [p for per_step in rows for p in per_step]))
        return out

    def read(self, rows: torch.Tensor, n_steps: int, ids: list[int], positions: list[int]) -> list[float]:
        if self.readout is None:
            return super().read(rows, n_steps, ids, positions)
        return self.readout.scores(*self._features(rows, n_steps, ids, positions))

    def surprise_features(self, questions, trajectories) -> list[list[tuple[list[float], list[float]]]]:
        """out[q][t] = (each step's tag logit difference, each step's surprise s_k): what
        the readout combines, for fitting its weights (scripts/fit_prm_surprise.py).
        Needs the option `surprise` set (any weights: they are not used here)."""
        if self.readout is None:
            raise ValueError("surprise_features needs the option 'surprise' (the rows it reads)")
        return self.read_round(questions, trajectories, self._features)

    def _features(self, rows, n_steps, ids, positions) -> tuple[list[float], list[float]]:
        tags, numbers = positions[:n_steps], positions[n_steps:]
        tag_rows = rows[:n_steps, self._good_bad].float()
        # A number row belongs to the step after the last tag at or before it.
        per_step = [0] * n_steps
        for p in numbers:
            per_step[bisect_right(tags, p)] += 1
        fresh = step_surprise(rows[n_steps:], ids, numbers, per_step)
        surprise = []
        for digest, s in zip(prefix_digests(ids, tags), fresh):
            if digest in self._needs_rows:        # read now (s is 0 for a step without numbers)
                self._surprise_memo[digest] = s
            self._surprise_memo.move_to_end(digest)
            surprise.append(self._surprise_memo[digest])
        return (tag_rows[:, 0] - tag_rows[:, 1]).tolist(), surprise

    @classmethod
    def from_model(cls, model, tokenizer, options: StepTagOptions | None = None, engine=None, name: str = "step_tag"):
        """A step-tag PRM over an already-loaded model: on `engine` if given, else plain forward."""
        options = options or StepTagOptions()
        if engine is not None:
            return cls(tokenizer, options, lambda cols: EngineBackend(engine, cols), name)
        return cls(tokenizer, options, lambda cols: forward_backend(model, tokenizer, cols, options), name)

    @classmethod
    def from_config(cls, options: StepTagOptions, ctx: RewardContext):
        from ets.models.load import load_causal_lm, load_tokenizer

        if ctx.model is None:
            raise ConfigError(f"reward {ctx.name!r} needs a model: set reward.model or policy.model")
        device, dtype = options.device or ctx.device, options.dtype or ctx.dtype
        tokenizer = load_tokenizer(ctx.model)

        def make_backend(cols: list[int]) -> ScoringBackend:
            if wants_engine(options, ctx.use_engine) and options.share_policy_engine and ctx.engine is not None:
                return EngineBackend(ctx.engine, cols, owns_engine=False)
            if note := unshared_note(options, ctx.use_engine, ctx.engine is not None or not ctx.use_engine):
                log.warning(note)
            model, _ = load_causal_lm(ctx.model, device=device, dtype=dtype)
            if wants_engine(options, ctx.use_engine):
                from ets.config import ConfigError
                from ets.engine import Engine
                from ets.engine.memory import plan_for
                from ets.engine.pool import PoolTooLarge

                # Its own pool, its own key, never the policy's; None: sized in the device's
                # memory plan beside the policy's pool (ets/engine/memory.py), else the
                # engine's DEFAULT_KV_TOKENS. It only scores: no decode buffers.
                plan = plan_for(model.device, ctx.memory, ctx.memory_fraction)
                try:
                    engine = Engine.from_pretrained(model, kv_budget_tokens=options.kv_budget_tokens,
                                                    tokenizer=tokenizer, max_batch_tokens=options.max_batch_tokens,
                                                    memory=plan, memory_name="reward", scoring_only=True,
                                                    prepack=ctx.prepack, compile=options.compile)
                    if plan is not None and plan is not ctx.memory:
                        plan.resolve()  # a plan of its own: nothing else joins it
                except PoolTooLarge as exc:
                    sized = plan is not None and options.kv_budget_tokens is None  # by the fraction
                    key = "policy.memory_fraction" if sized else "reward.options.kv_budget_tokens"
                    raise ConfigError(f"{key}: {exc}") from None
                return EngineBackend(engine, cols)
            return forward_backend(model, tokenizer, cols, options)

        return cls(tokenizer, options, make_backend, ctx.name)


def wants_engine(options: StepTagOptions, policy_on_engine: bool) -> bool:
    """Whether the PRM scores on an engine (its own, or the policy's when shared)."""
    return options.backend == "engine" or (options.backend == "auto" and policy_on_engine)


def unshared_note(options: StepTagOptions, policy_on_engine: bool, same_model: bool) -> str | None:
    """Why `share_policy_engine: true` does nothing here (the PRM scores on the policy's
    engine only on an engine, with the policy's own model), as a note; None if it shares."""
    if not options.share_policy_engine:
        return None
    own = "an engine of its own" if wants_engine(options, policy_on_engine) else "a plain forward"
    if options.backend == "forward":
        why, instead = "reward.options.backend is forward", own
    elif not policy_on_engine:
        why, instead = "the policy runs on no engine (policy.backend)", own
    elif not same_model:
        why, instead = "reward.model is not the policy's model", "an engine of its own"
    else:
        return None
    return f"reward.options.share_policy_engine: true has no effect: {why}; the PRM scores on {instead}"
