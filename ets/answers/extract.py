"""Final answers: find the answer a trajectory commits to, in the text it wrote.

Four rules (`search.answer_extraction` chooses which apply), because policies are trained
on different conventions, and some end in prose:

    boxed        \\boxed{...}            MATH / Qwen-Math / search-and-learn (braces balanced)
    marker       The answer is: X       Math-Shepherd / the ETS public code's policies
                 The final answer is X  Minerva ("... is $X$. I hope it is correct.")
                                        (X: a `$...$` span, else up to the sentence's end
                                        or a clause: "18, which is ..." reads 18)
    hashes       #### X                 GSM8K reference solutions
    last_number  ... makes 624 dollars. an instruct model's closing sentence: the last number

Precedence: if any `\\boxed{}` is complete, the last one wins (a solution may box
intermediate results; the last box is the one it ends on). Otherwise the last phrase or
`####` marker in the text wins. Otherwise the last number in the text, as lm-eval-harness's
GSM8K "flexible-extract" reads it (lm_eval/tasks/gsm8k/gsm8k.yaml: the last match of
`(-?[$0-9.,]{2,})|(-?[0-9]+)`, compared without commas, dollar signs and a final full
stop). Nothing found, or a marker with nothing after it (and no number): None.

`extract` says which rule fired (`Extracted(answer, rule)`); `extract_answer` gives the
answer alone. Extraction returns the answer *as written* (LaTeX kept; the last number
without its thousands commas, dollar sign and full stop); `ets.answers.grading` decides
equality.

Where a trajectory ends is a stricter question (`is_final_step`): a step that writes a
`\\boxed{}` answer, or one of the configured answer markers (`search.answer_markers`,
default the ETS code's phrases "The answer is", "The final answer is:", "Therefore, the
final answer is") as written and starting a sentence. "my answer is wrong so far" or "so
the answer is still unclear" do not end a trajectory. `reference_final` is the ETS code's
own rule, for `search.compat: ets_code`.
"""

from __future__ import annotations

import re
from typing import Collection, Iterator, NamedTuple, Sequence

from ets.config import ANSWER_RULES, DEFAULT_ANSWER_MARKERS

# `\boxed` and `\fbox` both appear in MATH solutions.
_BOX = re.compile(r"\\(?:boxed|fbox)\s*")
# "The answer is", "The final answer is", "Therefore, the final answer is", optional colon.
_PHRASE = re.compile(r"(?:final\s+)?answer\s+is\s*:?", re.IGNORECASE)
# GSM8K's "#### 18", but not a Markdown heading "#### Step 2": a number or LaTeX must follow.
_HASHES = re.compile(r"(?<!#)####(?!#)(?=[ \t]*[-+$\\\d.(])")
# lm-eval-harness's GSM8K "flexible-extract" pattern: a run of digits, `$`, `.` and `,`
# (two or more), or a whole number.
_NUMBER = re.compile(r"-?[$0-9.,]{2,}|-?[0-9]+")
STEP_TAG = "ки"
# A clause after an answer: its reasons and remarks, not its value.
_CLAUSE = re.compile(r",?\s+(?:since|because|as|which|so|for|given|when|where|if|but|and|from|by|using)\b",
                     re.IGNORECASE)
# A number as an answer starts: sign, dollar, thousands commas, decimals, a fraction, a percent.
_LEADING_NUMBER = re.compile(r"[-+]?(?:\\?\$)?\d[\d,]*(?:\.\d+)?(?:/\d+)?(?:\\?%)?")
# What precedes "answer is" in its sentence when it gives the answer: the sentence's start
# (after Markdown marks), a connective, then "the" or "my" ("Answer is 5", "So the answer
# is 5", "Therefore, the final answer is"), or a capital "The" anywhere (a step that ended
# at EOS runs on into the next: "...and so onThe answer is: 4"); not "which answer is",
# "sure the answer is right".
_THE_ANSWER = re.compile(r"(?:(?:^|[\n.!?:;])[\s*_#>\-$]*(?:(?:so|thus|therefore|hence|then|and|finally|overall|"
                         r"in conclusion|in summary)\b[\s,]*)?(?:(?:the|my)\s+)?|(?-i:The)\s+)$", re.IGNORECASE)
# Two or more plain lower-case words and nothing mathematical: prose, not an answer.
_PROSE = re.compile(r"[a-z][a-z']*(?:\s+[a-z][a-z']*)+")
# A box makes a step final even if what follows is cut off (see `is_final_step`).
_ANY_BOX = re.compile(r"\\(?:boxed|fbox)\b")
# What may stand between a sentence's start and its first word: spaces, Markdown emphasis,
# heading, quote and list marks, a LaTeX dollar.
_SENTENCE_LEAD = " \t*_#>-$"
_SENTENCE_END = "\n.!?:;"


def _balanced(text: str, start: int) -> str | None:
    """Content of the brace group opening at text[start] == '{', or None if unclosed."""
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":          # `\{`, `\}` (and `\\`) are escapes, not groups: skip the pair
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` (or `\\boxed 5`), else None."""
    found = None
    for m in _BOX.finditer(text):
        end = m.end()
        if end < len(text) and text[end] == "{":
            content = _balanced(text, end)
        else:                     # `\boxed 5`: the argument is the next token, a number
            token = re.match(r"[^\s$.,;]+", text[end:])
            content = token.group(0) if token and any(ch.isdigit() for ch in token.group(0)) else None
        if content is not None and content.strip():
            found = content.strip()
    return found


def _phrase_value(rest: str) -> str | None:
    """The value after 'The answer is': a `$...$` span, else the answer that starts the line,
    up to the sentence's end or a clause after it ("18, which is what she makes", "4 since
    2 + 3 = 5": the grader must see 18 and 4, not the prose or the equation after them)."""
    # Math-Shepherd-style policies end each step with the PRM's step tag "ки"; Markdown bold
    # ("The answer is **5**.") is emphasis, not part of the answer.
    line = rest.split("\n", 1)[0].replace(STEP_TAG, " ").replace("**", "").replace("__", "").strip()
    if line.startswith("$"):
        close = _closing_dollar(line)
        if close is not None:
            return line[1:close].strip() or None
    # Cut at the sentence end ("5. I hope..."), but not inside a decimal such as 3.5.
    value = re.split(r"\.(?:\s|$)", line, maxsplit=1)[0]
    if _PROSE.fullmatch(value.strip().rstrip(".,:;")):
        return None  # "my answer is wrong so far": words, not an answer
    value = _CLAUSE.split(value, maxsplit=1)[0]
    number = _LEADING_NUMBER.match(value)
    if number and re.match(r"\s*,?\s+[A-Za-z]", value[number.end():]):
        value = number.group(0)  # "18 eggs", "18, so": the number is the answer
    value = value.strip().rstrip(".,:;").strip()
    return value or None


def _closing_dollar(line: str) -> int | None:
    """The index of the `$` closing the math span `line` opens, past escaped dollars (`\\$18`)."""
    i = 1
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] == "$":
            return i if i > 1 else None
        i += 1
    return None


class Extracted(NamedTuple):
    """A trajectory's final answer and the rule that found it (one of ANSWER_RULES);
    both None when no rule found one."""

    answer: str | None
    rule: str | None


NOT_FOUND = Extracted(None, None)


def extract(text: str | None, rules: Collection[str] = ANSWER_RULES, markers: Sequence[str] = ()) -> Extracted:
    """The final answer written in `text` by the first of `rules` that finds one, in
    precedence order (the module's doc), with that rule's name. `markers`, the phrases that
    end a trajectory (`search.answer_markers`), are read by the `marker` rule too where a
    sentence starts with one ("Final Answer: $x^2$"), beside "the answer is"."""
    if not text:
        return NOT_FOUND
    if "boxed" in rules:
        boxed = last_boxed(text)
        if boxed is not None:
            return Extracted(boxed, "boxed")
    candidates: list[tuple[int, str, str]] = []
    if "marker" in rules:
        for m in _PHRASE.finditer(text):
            if not _THE_ANSWER.search(text, 0, m.start()):
                continue  # "my answer is wrong so far": not the phrase that gives an answer
            value = _phrase_value(text[m.end():])
            if value is not None:
                candidates.append((m.start(), value, "marker"))
        for marker in markers:
            if marker == "####":
                continue  # the hashes rule's
            for start in _sentence_starts(text, marker):
                value = _phrase_value(text[start + len(marker):])
                if value is not None:
                    candidates.append((start, value, "marker"))
    if "hashes" in rules:
        for m in _HASHES.finditer(text):
            value = text[m.end():].split("\n", 1)[0].replace(STEP_TAG, " ").strip()
            if value:
                candidates.append((m.start(), value, "hashes"))
    if candidates:
        _, value, rule = max(candidates, key=lambda c: c[0])
        return Extracted(value, rule)
    if "last_number" in rules:
        number = last_number(text)
        if number is not None:
            return Extracted(number, "last_number")
    return NOT_FOUND


def extract_answer(text: str | None, rules: Collection[str] = ANSWER_RULES) -> str | None:
    """The final answer written in `text`, as a string, or None if there is none."""
    return extract(text, rules).answer


def last_number(text: str) -> str | None:
    """The last number in `text`, as lm-eval-harness's GSM8K "flexible-extract" finds it,
    without what its metric ignores: thousands commas, a dollar sign and a final full stop
    ("$1,234." -> "1234"). A match with no digit (an ellipsis "...") is not a number."""
    for m in reversed(list(_NUMBER.finditer(text))):
        value = m.group(0).replace(",", "").replace("$", "").rstrip(".")
        if any(ch.isdigit() for ch in value):
            return value
    return None


def starts_sentence(text: str, marker: str) -> bool:
    """Whether `marker` occurs in `text` as written, starting a sentence (at the start, after
    a line break or after `.!?:;`, Markdown marks allowed between) and ending at a word's end
    ("The answer is" is not in "The answer isn't")."""
    return next(_sentence_starts(text, marker), None) is not None


def _sentence_starts(text: str, marker: str) -> Iterator[int]:
    """Where `marker` occurs in `text` as `starts_sentence` asks, in order."""
    start = text.find(marker)
    while start != -1:
        end = start + len(marker)
        whole_word = not (marker[-1].isalnum() and end < len(text) and text[end].isalnum())
        if whole_word and _at_sentence_start(text, start):
            yield start
        start = text.find(marker, start + 1)


def is_final_step(step_text: str, markers: Sequence[str] = DEFAULT_ANSWER_MARKERS) -> bool:
    """Whether this step gives a final answer, so the search treats it as terminal: it writes
    a `\\boxed{}` (or `\\fbox`), or one of `markers` starting a sentence (`starts_sentence`;
    the marker `####` only with a number or LaTeX after it, as GSM8K writes it).

    A marker is enough (even if the step was cut before the answer was complete): a
    trajectory that has started its final answer has nothing left to reason about.
    """
    if not step_text:
        return False
    if _ANY_BOX.search(step_text):
        return True
    for marker in markers:
        if marker == "####":
            if any(_at_sentence_start(step_text, m.start()) for m in _HASHES.finditer(step_text)):
                return True
        elif starts_sentence(step_text, marker):
            return True
    return False


def _at_sentence_start(text: str, start: int) -> bool:
    before = text[:start].rstrip(_SENTENCE_LEAD)
    return not before or before[-1] in _SENTENCE_END


def reference_final(path_text: str, step_text: str) -> bool:
    """The ETS code's leaf rule (`search.compat: ets_code`): the whole text of the node, the
    prompt included, holds "The answer is" or "The final answer is:", or its newest step
    holds "Therefore, the final answer is" (anywhere, case as written). EOS alone does not
    end a trajectory there."""
    return "The answer is" in path_text or "The final answer is:" in path_text \
        or "Therefore, the final answer is" in step_text


def gsm8k_ground_truth(solution: str) -> str | None:
    """The number after `####` in a GSM8K reference solution (thousands commas dropped)."""
    m = None
    for m in _HASHES.finditer(solution or ""):
        pass
    if m is None:
        return None
    value = solution[m.end():].split("\n", 1)[0].strip().replace(",", "")
    return value or None
