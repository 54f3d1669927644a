"""Marking steps in a PRM's input text and finding the marked tokens.

PRMs of every convention read one text per trajectory in which every step is followed by
a marker (Math-Shepherd: the step tag ` ки`; Qwen2.5-Math-PRM: the separator `<extra_0>`;
Skywork: "\n"; RLHFlow: the judgement "+" that the assistant answers after each step),
and score a step at (or, for a judgement, just before) its marker's token:

    head                steps, each followed by its marker                      tail
    "What is 2+3? "  |  "2+3 = 5 ки" "\n" "The answer is 5 ки"                |  ""
                                  ^ end of marker 0           ^ end of marker 1

The whole text is tokenized once (tokenizing pieces separately and adding lengths goes
wrong where a tokenizer merges across piece boundaries). A marker's token is the token
that holds the marker's last character; it must have the marker's id. Where a tokenizer
merged the marker with its neighbour, the marker's span is searched for the id instead,
and a marker that is nowhere to be found is an error naming the step. `tokenize_pieces`
is the other way, for PRMs trained on it: each piece encoded alone, the marker's id put
between them. `tokenize_marked_batch` and `tokenize_pieces_batch` give the same for a
whole round of texts in one batched tokenizer call (two for pieces).

Chat-framed PRMs render their messages with a `SENTINEL` where a marker (or the steps)
goes; `chat_pieces` splits the rendered text there, and `join_marked` puts the markers in.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Sequence


class MarkerError(ValueError):
    """A marker could not be found, or does not exist in the tokenizer, or the chat template
    could not render the marked conversation. From a batch call, `index` is the text it
    happened in (None otherwise)."""

    index: int | None = None


class MarkedText(NamedTuple):
    text: str
    spans: list[tuple[int, int]]    # [start, end) character span of each step's marker
    steps: list[tuple[int, int]] | None = None   # [start, end) of each step's own text, where known


def mark_steps(head: str, steps: Sequence[str], marker: str, between: str, tail: str = "") -> MarkedText:
    """`head + step0 + marker + between + step1 + marker + ... + tail`, with marker spans."""
    if not steps:
        return MarkedText(head + tail, [], [])
    marked = join_marked([head + steps[0], *(between + s for s in steps[1:]), tail], marker)
    return marked._replace(steps=[(a - len(s), a) for s, (a, _) in zip(steps, marked.spans)])


def join_marked(pieces: Sequence[str], marker: str) -> MarkedText:
    """`pieces[0] + marker + pieces[1] + marker + ... + pieces[-1]`, with marker spans.

        pieces  "Q? a"  |  "\nb"  |  ""         marker " ки"
        text    "Q? a ки\nb ки"
                     ^^^    ^^^   spans (4, 7), (9, 12)
    """
    spans = []
    pos = len(pieces[0])
    for piece in pieces[1:]:
        spans.append((pos, pos + len(marker)))
        pos += len(marker) + len(piece)
    return MarkedText(marker.join(pieces), spans)


def clean_step(step: str, marker: str, strip: bool) -> str:
    """A step as the PRM expects it: no marker text inside, no delimiter whitespace around."""
    if marker.strip():
        step = step.replace(marker.strip(), "")
    return step.strip() if strip else step


def token_id(tokenizer, token: str | int, role: str) -> int:
    """The id of `token` as one token of `tokenizer`, or a `MarkerError` naming it.

    An int is taken as an id. A string must encode to one token; sentencepiece tokenizers
    may put a lone word-boundary piece before it (`' ки'` -> `['▁', '▁ки']`), which is
    dropped, as the Math-Shepherd reference code does by taking the last id.
    """
    vocab_size = len(tokenizer)
    if isinstance(token, int):
        if not 0 <= token < vocab_size:
            raise MarkerError(f"{role} id {token} is outside the tokenizer's vocabulary (size {vocab_size})")
        return token
    ids = tokenizer.encode(token, add_special_tokens=False)
    if len(ids) == 1:
        return ids[0]
    if ids:
        last = tokenizer.decode(ids[-1:])
        lead = tokenizer.decode(ids[:-1])
        if last.strip() == token.strip() and not lead.strip():
            return ids[-1]
    # each token as the text it stands for (a byte-level BPE's own pieces read 'ĠÐº' for
    # ' к'), unless a token is part of a character
    pieces = [tokenizer.decode([i]) for i in ids]
    if any("\ufffd" in p for p in pieces):
        pieces = tokenizer.convert_ids_to_tokens(ids)
    raise MarkerError(
        f"the tokenizer has no single token for the {role} {token!r} (it encodes to {len(ids)} tokens: "
        f"{pieces}); add it to the tokenizer or choose a {role} that is one token"
    )


def tokenize_marked(tokenizer, marked: MarkedText, marker_id: int, add_special_tokens: bool) -> tuple[list[int], list[int]]:
    """(token ids of the whole text, index of each marker's token)."""
    enc = tokenizer(marked.text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    return _locate_markers(list(enc["input_ids"]), enc["offset_mapping"], marked.spans, marker_id)


def tokenize_marked_batch(tokenizer, marked: Sequence[MarkedText], marker_id: int,
                          add_special_tokens: bool) -> list[tuple[list[int], list[int]]]:
    """`tokenize_marked` of each text, in one batched tokenizer call (a fast tokenizer
    encodes the batch in Rust; the tokens of a text do not depend on the others in its
    batch). Identical texts are tokenized once. A `MarkerError` names its text's `index`."""
    return [(ids, positions) for ids, positions, _ in tokenize_marked_offsets(tokenizer, marked, marker_id, add_special_tokens)]


def tokenize_marked_offsets(tokenizer, marked: Sequence[MarkedText], marker_id: int,
                            add_special_tokens: bool) -> list[tuple[list[int], list[int], list]]:
    """`tokenize_marked_batch`, with each text's token character offsets as well."""
    unique: dict[str, int] = {}
    for m in marked:
        unique.setdefault(m.text, len(unique))
    if not unique:
        return []
    enc = tokenizer(list(unique), add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    all_ids, all_offsets = enc["input_ids"], enc["offset_mapping"]
    out = []
    for i, m in enumerate(marked):
        u = unique[m.text]
        try:
            out.append((*_locate_markers(list(all_ids[u]), all_offsets[u], m.spans, marker_id), all_offsets[u]))
        except MarkerError as exc:
            exc.index = i
            raise
    return out


def _locate_markers(ids: list[int], offsets, spans: Sequence[tuple[int, int]], marker_id: int) -> tuple[list[int], list[int]]:
    """(ids, index of each span's marker token) from one text's ids and character offsets."""
    positions = []
    t = 0
    for s, (start, end) in enumerate(spans):
        # Advance to the token holding the marker's last character (offsets are [a, b)).
        while t < len(ids) and not (offsets[t][0] < end <= offsets[t][1]):
            t += 1
        if t < len(ids) and ids[t] == marker_id:
            positions.append(t)
            continue
        positions.append(_search_span(ids, offsets, start, end, marker_id, s))
        t = positions[-1]
    return ids, positions


def tokenize_pieces(tokenizer, marked: MarkedText, marker_id: int, add_special_tokens: bool) -> tuple[list[int], list[int]]:
    """(token ids, index of each marker's token), encoding the text between markers piece by
    piece and each marker as `marker_id` itself (Skywork-PRM's reference builds its input
    this way), so a marker such as "\n" never merges with the text before it. Special
    tokens (BOS) are added to the first piece only.

        "Q\n" | "step 1" [marker] | "step 2" [marker] | ""
         encode   encode   id        encode   id        encode
    """
    ids: list[int] = []
    positions = []
    prev = 0
    for i, (start, end) in enumerate(marked.spans):
        ids += tokenizer.encode(marked.text[prev:start], add_special_tokens=add_special_tokens and i == 0)
        positions.append(len(ids))
        ids.append(marker_id)
        prev = end
    ids += tokenizer.encode(marked.text[prev:], add_special_tokens=False)
    return ids, positions


def tokenize_pieces_batch(tokenizer, marked: Sequence[MarkedText], marker_id: int,
                          add_special_tokens: bool) -> list[tuple[list[int], list[int]]]:
    """`tokenize_pieces` of each text, its pieces encoded in two batched tokenizer calls
    (the first pieces, which get the special tokens, and all the others)."""
    # Each text's pieces as (index into `first` or `rest`, is first); identical pieces encoded once.
    first: dict[str, int] = {}
    rest: dict[str, int] = {}
    plans = []
    for m in marked:
        plan, prev = [], 0
        for i, (start, end) in enumerate(m.spans):
            table = first if add_special_tokens and i == 0 else rest
            plan.append((table is first, table.setdefault(m.text[prev:start], len(table))))
            prev = end
        plan.append((False, rest.setdefault(m.text[prev:], len(rest))))
        plans.append(plan)
    encoded = {True: _encode_all(tokenizer, first, add_special_tokens), False: _encode_all(tokenizer, rest, False)}
    out = []
    for plan in plans:
        ids: list[int] = []
        positions = []
        for is_first, u in plan[:-1]:
            ids += encoded[is_first][u]
            positions.append(len(ids))
            ids.append(marker_id)
        ids += encoded[plan[-1][0]][plan[-1][1]]
        out.append((ids, positions))
    return out


def _encode_all(tokenizer, texts: dict[str, int], add_special_tokens: bool) -> list[list[int]]:
    """The token ids of each of `texts` (in their insertion order), in one call."""
    if not texts:
        return []
    return tokenizer(list(texts), add_special_tokens=add_special_tokens)["input_ids"]


def _search_span(ids, offsets, start, end, marker_id, step) -> int:
    """The last token with `marker_id` among the tokens overlapping [start, end)."""
    hits = [i for i, (a, b) in enumerate(offsets) if a < end and b > start and ids[i] == marker_id]
    if not hits:
        raise MarkerError(
            f"the marker of step {step} was merged with the text around it and its token id "
            f"{marker_id} does not occur there; remove the marker text from the steps or pick another marker"
        )
    return hits[-1]


def split_template(template: str, key: str) -> tuple[str, str]:
    """A prompt template "...{question}...{steps}..." -> (text before, text after {steps}).

    `{question}` is filled with `str.replace`, not `format`, so braces in questions
    (LaTeX!) are safe.
    """
    if template.count("{steps}") != 1 or "{question}" not in template:
        raise ValueError(f"option {key!r} = {template!r} must contain {{question}} and exactly one {{steps}}")
    head, tail = template.split("{steps}")
    return head, tail


SENTINEL = "\x00ETS_MARK\x00"   # stands for a marker while a chat template is rendered


def chat_pieces(tokenizer, messages: list[dict[str, str]], chat_template: str | None = None) -> list[str]:
    """Render `messages` with the chat template; return the text split where a message's
    content was `SENTINEL` (so n sentinels give n + 1 pieces, e.g. for `join_marked`).

    The template's own special tokens (BOS, turn headers) are in the pieces, so the text is
    tokenized without adding special tokens again.
    """
    try:
        text = tokenizer.apply_chat_template(messages, chat_template=chat_template, tokenize=False,
                                             add_generation_prompt=False)
    except Exception as exc:  # jinja2's TemplateError, the template's own raise_exception, its type errors
        raise MarkerError(f"the chat template could not render the conversation: {template_error(exc)}; fix the "
                          "template (reward.options.chat_template)") from exc
    pieces = text.split(SENTINEL)
    expected = sum(m["content"] == SENTINEL for m in messages) + 1
    if len(pieces) != expected:
        raise MarkerError(
            f"the chat template rendered {len(pieces) - 1} of the {expected - 1} marked turns; "
            "it must keep every message's content as it is"
        )
    return pieces


def template_error(exc: BaseException) -> str:
    """A template's error in one line: its type, message, and line when jinja2 gives one."""
    line = getattr(exc, "lineno", None)
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}{f' (template line {line})' if line else ''}"


def check_template_syntax(template: str | None, key: str) -> None:
    """A ValueError naming `key` if `template` is not valid Jinja (compiled as transformers
    compiles chat templates), so a broken one fails with the options, not mid-search."""
    if not isinstance(template, str):
        return
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # another transformers: the template is checked when the PRM is built
        return
    try:
        _compile_jinja_template(template)
    except Exception as exc:  # jinja2's TemplateSyntaxError
        raise ValueError(f"option {key!r} is not a valid Jinja template: {template_error(exc)}") from None


def fill(template: str, **values: str) -> str:
    """`template` with each `{key}` of `values` replaced in one pass; any other braces
    (LaTeX's `\\boxed{}`, or a `{step}` inside a question) stay as they are."""
    pattern = re.compile("|".join(re.escape("{" + key + "}") for key in values))
    return pattern.sub(lambda m: values[m.group(0)[1:-1]], template)
