"""The chat-judgement PRM (RLHFlow convention): a chat model judges each step in a turn of
its own. The question and step 1 are the first user turn, each later step is a user turn,
and after each the assistant answers the good token; a step's score is the probability of
the good token against the bad one where the assistant gives that judgement:

    user: "{question} {step 1}"  assistant: "+"  user: "{step 2}"  assistant: "+"  ...
    score of step s = softmax(logits[token before judgement s][[good, bad]])[good]

The row just before a judgement is the one that predicts it; every earlier judgement reads
"+", as in training and in RLHFlow's reference code (`RLHFlow/Llama3.1-8B-PRM-*`), so one
forward scores all the steps of a trajectory. The conversation is rendered by the
tokenizer's chat template (or the `chat_template` option); a tokenizer without one fails
when the reward is built, as do good/bad tokens that are not single tokens.

Scoring is the step-tag PRM's (rewards/step_tag.py): a causal LM, the same backends (on
the engine, sibling trajectories share the cached conversation so far) and the same
backend, memory and device options. Step-tag framing options (`tag`, `template`,
`step_separator`) do not apply here; setting one is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from ets.config import ConfigError
from ets.rewards.marker_prm import MarkerPRM
from ets.rewards.marking import (SENTINEL, MarkedText, MarkerError, chat_pieces, check_template_syntax, clean_step, fill,
                             join_marked, token_id)
from ets.rewards.step_tag import StepTagOptions, StepTagPRM

STEP_TAG_FRAMING = ("tag", "template", "step_separator")


@dataclass
class ChatJudgementOptions(StepTagOptions):
    first_turn: str = "{question} {step}"   # the first user turn: the question and step 1
    system_prompt: str | None = None        # a system turn first, when set
    chat_template: str | None = None        # a Jinja chat template (default: the tokenizer's)
    add_special_tokens: bool = False        # on top of the rendered chat (which holds BOS already)
    # step_tag's options that frame its text: fields of this class, but not options of it
    not_options: ClassVar[tuple[str, ...]] = STEP_TAG_FRAMING

    def __post_init__(self) -> None:
        super().__post_init__()
        defaults = {f.name: f.default for f in fields(StepTagOptions)}
        for key in STEP_TAG_FRAMING:
            if getattr(self, key) != defaults[key]:
                raise ValueError(f"option {key!r} frames step_tag's text; chat_judgement puts each step in a user "
                                 "turn (options first_turn, system_prompt, chat_template)")
        if "{step}" not in self.first_turn:
            raise ValueError(f"option 'first_turn' = {self.first_turn!r} must contain {{step}} (and usually {{question}})")
        check_template_syntax(self.chat_template, "chat_template")


class ChatJudgementPRM(StepTagPRM):
    Options = ChatJudgementOptions

    def __init__(self, tokenizer, options: ChatJudgementOptions, make_backend, name: str = "chat_judgement"):
        # Tokens and template are checked before `make_backend` loads any weights.
        good, bad = self._tokens(tokenizer, options, name)
        self.options = options
        # The assistant's answer in every turn: the good token's text (the marker read before).
        self._judgement = options.good_token if isinstance(options.good_token, str) else tokenizer.decode([good])
        self.tokenizer = tokenizer
        try:  # a template that cannot render a conversation fails here, not in the first round (nor after the weights load)
            self.render("What is 1 + 1?", ["1 + 1 = 2.", "The answer is 2."])
        except MarkerError as exc:
            raise ConfigError(f"reward {name!r}: {exc}") from exc
        MarkerPRM.__init__(self, name, tokenizer, make_backend([good, bad]), good, positive=0,
                           add_special_tokens=options.add_special_tokens)

    @staticmethod
    def _tokens(tokenizer, options: ChatJudgementOptions, name: str) -> tuple[int, int]:
        """The good and bad tokens' ids (each one token), the tokenizer having a chat template."""
        try:
            good = token_id(tokenizer, options.good_token, "good token")
            bad = token_id(tokenizer, options.bad_token, "bad token")
        except MarkerError as exc:
            raise ConfigError(f"reward {name!r}: {exc}") from exc
        if not (options.chat_template or getattr(tokenizer, "chat_template", None)):
            raise ConfigError(f"reward {name!r}: the tokenizer has no chat template; set reward.options.chat_template "
                              "to the Jinja template the PRM was trained with")
        return good, bad

    def render(self, question: str, steps: list[str]) -> MarkedText:
        o = self.options
        messages = [{"role": "system", "content": o.system_prompt}] if o.system_prompt else []
        cleaned = []
        for k, step in enumerate(steps):
            step = clean_step(step, "", o.strip_steps)    # a "+" inside a step is the step's own text
            cleaned.append(step)
            text = fill(o.first_turn, question=question, step=step) if k == 0 else step
            messages += [{"role": "user", "content": text}, {"role": "assistant", "content": SENTINEL}]
        pieces = chat_pieces(self.tokenizer, messages, o.chat_template)
        marked = join_marked(pieces, self._judgement)
        return marked._replace(steps=_step_spans(pieces, marked.spans, cleaned))

    def encode_batch(self, items):
        # The row that predicts each judgement.
        return [(ids, [p - 1 for p in positions]) for ids, positions in super().encode_batch(items)]

    @classmethod
    def from_model(cls, model, tokenizer, options: ChatJudgementOptions | None = None, engine=None, name: str = "chat_judgement"):
        return super().from_model(model, tokenizer, options or ChatJudgementOptions(), engine, name)


def _step_spans(pieces: list[str], markers: list[tuple[int, int]], steps: list[str]) -> list[tuple[int, int]] | None:
    """Where each step's text lies in the joined text: its last occurrence in the turn
    before its judgement (after the question, in the first). None if a step is not there
    as written (a template that changes the content): then the turns' text is used."""
    out = []
    for k, step in enumerate(steps):
        at = pieces[k].rfind(step) if step else -1
        if at < 0:
            return None
        start = (markers[k - 1][1] if k else 0) + at
        out.append((start, start + len(step)))
    return out
