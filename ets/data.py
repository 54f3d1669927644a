"""Problems: load a benchmark into `Problem`s, from a JSONL file or a Hugging Face dataset.

Layouts understood (`DataConfig.format`):

    gsm8k    {"question": ..., "answer": "<worked solution> #### 42"}  -> ground truth "42"
    math500  {"problem": ..., "solution": ..., "answer": "\\frac{1}{2}", "unique_id": ...}
             (full MATH, without `answer`: the last \\boxed{} of `solution`)
    fields   any records; `question_field` and `answer_field` name the two fields
    auto     gsm8k or math500, told apart by the first record's keys

Which problems: `data.start` / `data.end` take the slice [start, end) of the records in
file order (one job of an array searches one slice; a slice that starts past the last
record is a DataError, one that ends past it ends there), then `data.limit` the first N
of it (`selected`).

A problem's id comes from the data, never from its position, so a results file stays
valid when lines are added, removed or reordered: the record's `unique_id` or `id` field
if it has one, else `q-` and the first 12 hex digits of the SHA-256 of the question text.
Two problems with one id are an error naming both lines.

Every error a user can cause is a `DataError` whose one-line message names the file, the
line and the fix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, TypeVar

from ets.answers.extract import gsm8k_ground_truth, last_boxed
from ets.config import DataConfig
from ets.config.checks import did_you_mean, surrogates
from ets.paths import special_kind


T = TypeVar("T")
log = logging.getLogger(__name__)


class DataError(ValueError):
    """The problems could not be loaded; the message names the file, the line and the fix."""


class _Fields(NamedTuple):
    question: str
    answer: str | None          # the ground truth, ready for `ets.answers.grading.is_equivalent`;
                                # None: unknown (the problem is searched, and graded as unknown)
    id: str                     # names the problem in its result record
    raw: dict[str, Any]         # the record as read, for anything a caller needs beyond these
    fields: dict[str, Any]      # the record's other short fields (MATH500's level and subject),
                                # kept in the problem's result record: `ets eval --by level`


class Problem(_Fields):
    """One problem to search: its question, its ground truth if known, its id.

        ets.Problem("What is 2 + 3?")                 # no ground truth: its record's `correct` is None
        ets.Problem("What is 2 + 3?", answer="5", id="add-1", fields={"level": 1})

    An id not given is `question_id(question)`, a hash of the question text, as a data file's
    record without an id gets: a problem keeps its id (and its samples: the search's seeds
    are drawn from the id and the question) wherever it stands in a list, and the same
    question searched from Python and by `ets run` has the same id, so their results
    compare. A number as the answer is graded as its text; a GSM8K worked solution as its
    `####` number. `fields` (numbers, true/false, short text) go into its result record,
    where `ets eval --by NAME` groups the accuracy by one of them."""

    __slots__ = ()

    def __new__(cls, question: str, answer: str | int | float | None = None, id: str | None = None,
                raw: dict[str, Any] | None = None, fields: Mapping[str, Any] | None = None) -> "Problem":
        if not isinstance(question, str) or not question.strip():
            raise DataError(f"Problem: the question must be a non-empty string, got {str(question)[:60]!r}")
        answer = solution_number(ground_truth(answer, "answer", "Problem"), "answer", "Problem")
        if isinstance(answer, str) and not answer.strip():
            raise DataError(f"Problem {question[:40]!r}: the answer is empty; give answer=None for a problem "
                            "whose ground truth is not known")
        # an id is text, as a data file's is read (a number given is its text); none, or a
        # blank one, is the question's hash
        id = question_id(question) if id is None or not str(id).strip() else str(id)
        return super().__new__(cls, question, None if answer is None else str(answer).strip(), id,
                               {} if raw is None else raw, _checked_fields(fields, question))


# The longest text a problem's field keeps in its result record: a label or a name, not a
# worked solution or a passage (a data record's longer fields stay in `Problem.raw` only).
FIELD_TEXT_CHARS = 200


def _checked_fields(fields: Mapping[str, Any] | None, question: str) -> dict[str, Any]:
    """`Problem(fields=...)` as a plain dict: text keys, values a result record can hold."""
    if fields is None:
        return {}
    if not isinstance(fields, Mapping):
        raise DataError(f"Problem {question[:40]!r}: fields must be a dict of name -> value, got "
                        f"{type(fields).__name__}")
    for key, value in fields.items():
        if not isinstance(key, str) or not _kept(value):
            raise DataError(f"Problem {question[:40]!r}: field {key!r} = {str(value)[:40]!r}: a field is a "
                            f"name and a number, true/false or text of at most {FIELD_TEXT_CHARS} characters")
    return dict(fields)


def _kept(value: Any) -> bool:
    """Whether a data record's field goes into the result record (see FIELD_TEXT_CHARS)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (bool, int)) or (isinstance(value, str) and 0 < len(value) <= FIELD_TEXT_CHARS)


def record_fields(record: Mapping[str, Any], read: Iterable[str]) -> dict[str, Any]:
    """A data record's fields besides those `read` (its question, answer and id) that a
    result record keeps."""
    read = set(read)
    return {k: v for k, v in record.items() if k not in read and isinstance(k, str) and _kept(v)}


# The keys of a problem given as a dict (`as_problem`): the question, the ground truth (the
# first of ANSWER_KEYS present; a results record's `answer` is the answer it chose, its
# `ground_truth` the truth), and the id. Other keys are kept in `Problem.raw`.
QUESTION_KEYS = ("question", "problem")
ANSWER_KEYS = ("ground_truth", "answer")
ID_KEYS = ("unique_id", "id")
PROBLEM_KEYS = (*QUESTION_KEYS, *ANSWER_KEYS, "solution", *ID_KEYS)


def as_problem(item: Problem | str | Mapping[str, Any], index: int) -> Problem:
    """A `Problem` from what a Python caller of `ets.search` may pass: a Problem, a bare
    question string (no ground truth), or a dict with `question` (or `problem`) and,
    optionally, its ground truth (`ground_truth` or `answer`: a GSM8K solution's `####`
    number, as a GSM8K file gives it; without either, a MATH `solution`'s last box) and
    `id` (or `unique_id`). Without an id, the problem's is a hash of its question (see
    `Problem`). A key that looks like a misspelt one of these is refused (its answer would
    be lost silently); `index` names the item in errors."""
    if isinstance(item, Problem):
        return item
    if isinstance(item, str) and item.strip():
        return Problem(item)
    if isinstance(item, Mapping):
        where = f"problem {index}"
        for key in item:
            if key not in PROBLEM_KEYS and (hint := did_you_mean(key, PROBLEM_KEYS)):
                raise DataError(f"{where}: unknown key {key!r}{hint}; a problem's keys are question (or problem), "
                                "ground_truth or answer (or a MATH solution) and id")
        question = next((item[k] for k in QUESTION_KEYS if k in item), None)
        if isinstance(question, str) and question.strip():
            # A results record's `ground_truth` is the truth even when null (ungraded): its
            # `answer` is the answer the search chose, never a truth.
            key = "ground_truth" if "ground_truth" in item else "answer" if item.get("answer") is not None else None
            answer = None if key is None else ground_truth(item[key], key, where)
            if key is None and isinstance(item.get("solution"), str):
                answer = last_boxed(item["solution"])
            answer = solution_number(answer, key, where)
            return Problem(question, answer, _record_id(item, question), dict(item),
                           record_fields(item, PROBLEM_KEYS))
    raise DataError(f"problem {index}: expected a Problem, a question string or a dict with a 'question' "
                    f"string, got {type(item).__name__} {str(item)[:60]!r}")


def solution_number(answer: Any, key: str | None, where: str) -> Any:
    """A GSM8K-style worked solution given as a ground truth ("... #### 42"): its final
    number, wherever the layout that read it (a dict problem, `format: fields`)."""
    if not isinstance(answer, str) or "####" not in answer:
        return answer
    number = gsm8k_ground_truth(answer)
    if number is None:
        raise DataError(f"{where}: {key!r} has a '####' line without a number after it; write the number there, "
                        "or give the bare answer")
    return number


def as_problems(items: Iterable[Problem | str | Mapping[str, Any]]) -> list[Problem]:
    """`as_problem` of each item, ids checked distinct: the same question twice would be
    searched with the same draws (and share one line of a results file). A single problem
    (a string, a dict, a Problem) is refused: iterated, it would be searched character by
    character, or key by key."""
    if isinstance(items, (str, Mapping, Problem)):
        raise DataError(f"problems: give a list of problems, not one {type(items).__name__} "
                        f"({str(items)[:40]!r}); wrap it: [problem]")
    problems = [as_problem(item, index) for index, item in enumerate(items)]
    _check_unique(problems, [f"problem {index}" for index in range(len(problems))])
    return problems


def detect_format(record: dict[str, Any]) -> str | None:
    """gsm8k or math500 from a record's keys; None if it looks like neither."""
    if "problem" in record and ("answer" in record or "solution" in record):
        return "math500"
    if "question" in record and "answer" in record:
        return "gsm8k"
    return None


def _fields(data: DataConfig, fmt: str) -> tuple[str, str]:
    if fmt == "gsm8k":
        return "question", "answer"
    if fmt == "math500":
        return "problem", "answer"
    return data.question_field, data.answer_field  # fields: DataConfig checked both are set


def question_id(question: str) -> str:
    """The id of a problem whose record has none: a stable hash of its question text."""
    return "q-" + hashlib.sha256(question.encode("utf-8")).hexdigest()[:12]


def _record_id(record: dict[str, Any], question: str) -> str:
    for key in ("unique_id", "id"):
        value = record.get(key)
        if value is not None and str(value).strip():
            return str(value)
    return question_id(question)


def _check_unique(problems: list[Problem], places: list[str]) -> None:
    """Two problems with one id would share one line of the results file: refuse them."""
    seen: dict[str, str] = {}
    for problem, where in zip(problems, places):
        if problem.id in seen:
            how = ("the same question text" if problem.id == question_id(problem.question)
                   else "the same 'unique_id'/'id' field")
            raise DataError(
                f"{seen[problem.id]} and {where} have the same problem id {problem.id!r} ({how}); "
                "give each record a distinct 'id' field (in Python: Problem(question, id=...)), or remove the duplicate"
            )
        seen[problem.id] = where


def _to_problem(record: Any, fmt: str, data: DataConfig, where: str) -> Problem:
    if not isinstance(record, dict):
        raise DataError(f"{where}: a record must be a JSON object, got {type(record).__name__}; write one object per line")
    raw = record
    q_key, a_key = _fields(data, fmt)
    if fmt == "math500" and a_key not in record and isinstance(record.get("solution"), str):
        # Full MATH has no `answer` field: its ground truth is the solution's last box.
        record = {**record, a_key: last_boxed(record["solution"])}
    missing = [k for k in (q_key, a_key) if k not in record]
    if missing:
        hint = ("set data.format=fields with data.question_field and data.answer_field"
                if data.format != "fields" else "fix data.question_field / data.answer_field")
        raise DataError(
            f"{where}: record has no field {', '.join(map(repr, missing))} (format {fmt}; its keys: "
            f"{', '.join(sorted(record)) or 'none'}); {hint}"
        )
    question, answer = record[q_key], ground_truth(record[a_key], a_key, where)
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: field {q_key!r} must be a non-empty string")
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        raise DataError(f"{where}: field {a_key!r} is {'null' if answer is None else 'empty'}; every problem needs "
                        "a ground-truth answer")
    if fmt == "gsm8k":
        answer = gsm8k_ground_truth(str(answer))
        if answer is None:
            raise DataError(f"{where}: GSM8K answer has no '#### <number>' line; fix the record or use data.format=fields")
    answer = solution_number(answer, a_key, where)
    return Problem(question, str(answer).strip(), _record_id(raw, question), raw,
                   record_fields(raw, (q_key, a_key, "solution", *ID_KEYS)))


def ground_truth(value: Any, field: str, where: str) -> Any:
    """A ground truth as the data gives it: a string or a number (graded as its text, a
    float's written out in full), or null (refused below as missing). A list, an object or
    true/false is refused: the grader compares one answer, and such a value could mean one
    answer (a tuple, an interval) or several accepted ones; graded as its Python text it
    would match neither."""
    if value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DataError(f"{where}: field {field!r} is {value}, not a finite number; write the ground truth as text")
        # Positional, as the number was written: Python writes 0.00001 as 1e-05, which the
        # grader reads as Euler's e minus 5.
        return format(Decimal(repr(value)), "f")
    kind = {list: "a JSON list", dict: "a JSON object", bool: "a JSON boolean"}.get(type(value), type(value).__name__)
    raise DataError(f"{where}: field {field!r} is {kind}, {json.dumps(value)[:60]}, not a string or a number: a "
                    "ground truth is one answer, written as a string (e.g. \"(1, 2)\" for a pair; a list of "
                    "accepted answers is not supported)")


def selected(items: Iterable[T], data: DataConfig, source: str) -> Iterator[T]:
    """The items `data` selects, in order: the slice [data.start, data.end), then its first
    `data.limit`. A slice that starts past the last item is a DataError naming `source`;
    one that ends past it ends there, with a warning (the last job of an array). Read
    lazily: the items after the slice are never read."""
    start, end = data.start or 0, data.end
    count = taken = 0
    for item in items:
        if end is not None and count >= end:
            return
        count += 1
        if count <= start:
            continue
        yield item
        taken += 1
        if data.limit is not None and taken >= data.limit:
            return
    if data.sliced and count <= start:
        raise DataError(f"data.start: {start} is beyond the {count} problem{'' if count == 1 else 's'} of {source}; "
                        f"the slice [data.start, data.end) must start within [0, {count})")
    if end is not None and count < end:  # the last job of an array: its slice ends with the data
        log.warning("data.end: %d is past the %d problems of %s; the slice ends at the last", end, count, source)


def _read_jsonl(path: Path) -> Iterable[tuple[int, Any]]:
    """(line number, parsed record) for each non-blank line."""
    with path.open(encoding="utf-8-sig") as f:  # a byte-order mark, as some editors write, is not data
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line, object_pairs_hook=_one_value_per_key)
            except _RepeatedKey as exc:
                raise DataError(f"{path}:{lineno}: key {exc.args[0]!r} is given twice in one object; keep the one "
                                "meant (JSON readers differ on which they take)") from None
            except json.JSONDecodeError as exc:
                array = " (it starts a JSON array: the file is JSON, not JSONL)" if line.lstrip()[:1] == "[" else ""
                raise DataError(
                    f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno}){array}; "
                    "the file must hold one JSON object per line (JSONL)"
                ) from None
            if isinstance(record, list):
                raise DataError(f"{path}:{lineno}: a JSON array, not an object: the file must hold one JSON object "
                                "per line (JSONL), not an array of them")
            if "\\u" in line and (found := surrogates(record)):  # only an escape can make a surrogate
                raise DataError(f"{path}:{lineno}: holds {found[1]}, half of a UTF-16 surrogate pair without its other "
                                "half, which is not text; write the character itself, or both escapes of its pair")
            yield lineno, record


class _RepeatedKey(ValueError):
    """A key twice in one JSON object (`_one_value_per_key`); its message is the key."""


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) < len(pairs):
        raise _RepeatedKey(next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1))
    return record


def load_jsonl(data: DataConfig) -> list[Problem]:
    path = Path(data.path)
    kind = special_kind(path)
    if kind == "a folder":
        raise DataError(f"data.path {str(path)!r} is a folder; set data.path to a JSONL file (one problem per line)")
    if kind is not None:
        raise DataError(f"data file {str(path)!r} is {kind}, not a regular file; save the problems to a JSONL "
                        "file and set data.path to it")
    if not path.is_file():
        raise DataError(f"data file {str(path)!r} does not exist; set data.path to a JSONL file")
    try:
        problems: list[Problem] = []
        places: list[str] = []
        fmt = data.format
        for lineno, record in selected(_read_jsonl(path), data, f"data file {str(path)!r}"):
            where = f"{path}:{lineno}"
            if fmt == "auto":
                fmt = detect_format(record) if isinstance(record, dict) else None
                if fmt is None:
                    keys = ", ".join(sorted(record)) if isinstance(record, dict) else type(record).__name__
                    raise DataError(
                        f"{where}: cannot tell the layout from the keys ({keys}); expected GSM8K "
                        "(question, answer) or MATH500 (problem, answer), or set data.format=fields "
                        "with data.question_field and data.answer_field"
                    )
            problems.append(_to_problem(record, fmt, data, where))
            places.append(where)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason}); save the file as UTF-8 JSONL") from None
    if not problems:
        raise DataError(f"data file {str(path)!r} is empty; it needs one JSON object per line")
    _check_unique(problems, places)
    return problems


def hub_datasets(data: DataConfig):
    """The `datasets` package that reads `data.hf_name`, or a DataError saying how to get it
    (`ets run --check` asks too, before a run would load its models)."""
    try:
        import datasets  # optional: only hub users need it
    except ImportError:
        raise DataError(
            f"data.hf_name={data.hf_name!r} needs the `datasets` package; install it with "
            "`pip install ets[hub]`, or set data.path to a local JSONL file"
        ) from None
    return datasets


def load_hub(data: DataConfig) -> list[Problem]:
    """A Hugging Face `datasets` name, for machines that can reach a hub (or its cache)."""
    datasets = hub_datasets(data)
    try:
        rows = datasets.load_dataset(data.hf_name, split=data.hf_split)
    except Exception as exc:  # noqa: BLE001 - network, auth and name errors all land here
        raise DataError(f"cannot load dataset {data.hf_name!r} split {data.hf_split!r}: {exc}") from None
    problems: list[Problem] = []
    places: list[str] = []
    fmt = data.format
    for index, record in selected(enumerate(rows), data, f"dataset {data.hf_name!r} split {data.hf_split!r}"):
        where = f"{data.hf_name}[{data.hf_split}] row {index}"
        if fmt == "auto":
            fmt = detect_format(record)
            if fmt is None:
                raise DataError(f"{where}: cannot tell the layout from the keys; set data.format=fields "
                                "with data.question_field and data.answer_field")
        problems.append(_to_problem(dict(record), fmt, data, where))
        places.append(where)
    if not problems:
        raise DataError(f"dataset {data.hf_name!r} split {data.hf_split!r} is empty")
    _check_unique(problems, places)
    return problems


def load_problems(data: DataConfig) -> list[Problem]:
    """The problems `data` names: from `data.path` (JSONL) or from `data.hf_name`, never both."""
    if data.path and data.hf_name:
        raise DataError(f"data.path={data.path!r} and data.hf_name={data.hf_name!r} are both set; "
                        "set one of them (data.hf_name=null to read the file)")
    if data.path:
        return load_jsonl(data)
    if data.hf_name:
        return load_hub(data)
    raise DataError("no problems configured; set data.path to a JSONL file (or data.hf_name to a hub dataset), "
                    "or from Python pass them to ets.search")
