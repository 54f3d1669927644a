"""Loading problems: the layouts, and one error per kind of bad input."""

import builtins
import json
import logging

import pytest

from ets.config import DataConfig
from ets.data import DataError, Problem, as_problem, as_problems, load_problems, question_id

GSM = {"question": "Janet has 3 eggs and buys 2. How many?", "answer": "3 + 2 = 5\n#### 5"}
MATH = {"problem": "What is $1/2$?", "solution": "It is $\\boxed{\\frac12}$.", "answer": "\\frac12",
        "unique_id": "test/algebra/1.json"}


def write(tmp_path, lines, name="p.jsonl"):
    path = tmp_path / name
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))
    return str(path)


def test_gsm8k_layout_detected(tmp_path):
    big = {"question": "q", "answer": "... = 70,000\n#### 70,000"}
    problems = load_problems(DataConfig(path=write(tmp_path, [GSM, big])))
    assert problems[0] == Problem(id=question_id(GSM["question"]), question=GSM["question"], answer="5", raw=GSM)
    assert problems[1].answer == "70000" and problems[1].id == question_id("q")


def test_math500_layout_detected(tmp_path):
    (p,) = load_problems(DataConfig(path=write(tmp_path, [MATH])))
    assert (p.id, p.question, p.answer) == ("test/algebra/1.json", MATH["problem"], "\\frac12")


def test_full_math_without_answer_field_uses_the_last_box(tmp_path):
    record = {"problem": "q", "solution": "first \\boxed{1}, finally \\boxed{2}"}
    assert load_problems(DataConfig(path=write(tmp_path, [record])))[0].answer == "2"


def test_field_mapping(tmp_path):
    record = {"prompt": "2+2?", "target": 4, "id": "x1"}
    cfg = DataConfig(path=write(tmp_path, [record]), format="fields", question_field="prompt", answer_field="target")
    (p,) = load_problems(cfg)
    assert (p.id, p.question, p.answer) == ("x1", "2+2?", "4")


def test_limit_and_blank_lines(tmp_path):
    path = write(tmp_path, [GSM, "", {**GSM, "id": 2}, {**GSM, "id": 3}])
    assert len(load_problems(DataConfig(path=path, limit=2))) == 2
    assert len(load_problems(DataConfig(path=path))) == 3


def test_start_and_end_slice_in_file_order_before_the_limit(tmp_path):
    path = write(tmp_path, [{**GSM, "id": i} if i != 2 else "" for i in range(7)])  # ids 0, 1, 3, 4, 5, 6
    ids = lambda **kw: [p.id for p in load_problems(DataConfig(path=path, **kw))]  # noqa: E731
    assert ids(start=1, end=4) == ["1", "3", "4"]          # records 1..3: a blank line is no record
    assert ids(start=1, end=4, limit=2) == ["1", "3"]      # the limit counts within the slice
    assert ids(start=4) == ["5", "6"] and ids(end=2) == ["0", "1"]
    assert ids(start=0, end=6) == ids()                    # the whole file: [0, its length)
    # slices of an array cover the file once, in order
    assert ids(start=0, end=3) + ids(start=3, end=6) == ids()


def test_a_slice_that_starts_beyond_the_data_is_named(tmp_path):
    path = write(tmp_path, [{**GSM, "id": i} for i in range(6)])
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=path, start=6))
    for w in ["data.start: 6", "beyond the 6 problems", "p.jsonl", "[0, 6)"]:
        assert w in one_line(e)


def test_a_slice_that_ends_beyond_the_data_ends_with_it(tmp_path, caplog):
    """The last job of an array: its end is past the last problem."""
    path = write(tmp_path, [{**GSM, "id": i} for i in range(6)])
    with caplog.at_level(logging.WARNING, logger="ets.data"):
        assert [p.id for p in load_problems(DataConfig(path=path, start=4, end=8))] == ["4", "5"]
    assert "data.end: 8 is past the 6 problems of data file" in caplog.text


def test_a_slice_of_a_hub_dataset(monkeypatch):
    import sys
    import types

    rows = [{**GSM, "id": i} for i in range(5)]
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name, split: rows
    monkeypatch.setitem(sys.modules, "datasets", fake)
    problems = load_problems(DataConfig(hf_name="some/set", start=1, end=3))
    assert [p.id for p in problems] == ["1", "2"]
    with pytest.raises(DataError, match=r"data.start: 5 is beyond the 5 problems of dataset 'some/set' split 'test'"):
        load_problems(DataConfig(hf_name="some/set", start=5, end=9))


@pytest.mark.parametrize("kw, words", [
    ({"start": -1}, ["data.start", ">= 0"]),
    ({"end": 0}, ["data.end", ">= 1"]),
    ({"start": 3, "end": 3}, ["data.end: 3 must be above data.start (3)"]),
    ({"start": "1"}, ["data.start", "integer"]),
])
def test_bad_slices_are_config_errors(kw, words):
    from ets.config import ConfigError

    with pytest.raises(ConfigError) as e:
        DataConfig(path="x.jsonl", **kw)
    for w in words:
        assert w in str(e.value)


def test_each_slice_writes_its_own_output():
    from ets.config import RunConfig

    c = RunConfig(data=DataConfig(start=50, end=100), output="runs/r.jsonl")
    assert c.output == "runs/r.50-100.jsonl"
    assert RunConfig(data=DataConfig(start=50), output="runs/r.jsonl").output == "runs/r.50-end.jsonl"
    # a name that carries its slice already keeps it (a resolved config loaded again)
    assert RunConfig(data=DataConfig(start=50, end=100), output=c.output).output == c.output
    assert RunConfig(output="runs/r.jsonl").output == "runs/r.jsonl"


def test_forced_format_overrides_detection(tmp_path):
    # a MATH-like record read as GSM8K needs `question`: the error names it and the fix
    with pytest.raises(DataError, match=r"p\.jsonl:1: record has no field 'question'.*data\.format=fields"):
        load_problems(DataConfig(path=write(tmp_path, [MATH]), format="gsm8k"))


# ---- ids come from the data, never from the line position ----

def test_ids_are_the_id_field_or_a_hash_of_the_question(tmp_path):
    other = {"question": "Two plus two?", "answer": "#### 4"}
    records = [{**GSM, "id": 7}, other, {**GSM, "question": "Three?", "id": None}]
    ids = [p.id for p in load_problems(DataConfig(path=write(tmp_path, records)))]
    assert ids == ["7", question_id("Two plus two?"), question_id("Three?")]
    assert question_id("Two plus two?") == question_id("Two plus two?") != question_id("Two plus three?")
    (p,) = load_problems(DataConfig(path=write(tmp_path, [MATH])))
    assert p.id == MATH["unique_id"]


def test_ids_do_not_move_when_a_line_is_prepended(tmp_path):
    lines = [{"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"} for i in range(3)]
    before = [p.id for p in load_problems(DataConfig(path=write(tmp_path, lines)))]
    new = {"question": "What is 10 + 1?", "answer": "#### 11"}
    after = [p.id for p in load_problems(DataConfig(path=write(tmp_path, [new, *lines])))]
    assert after[1:] == before and after[0] not in before


def test_duplicate_ids_name_both_lines(tmp_path):
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=write(tmp_path, [GSM, {**GSM, "question": "other"}, "", GSM])))
    msg = one_line(e)
    assert "p.jsonl:1 and " in msg and "p.jsonl:4 have the same problem id" in msg and "same question text" in msg
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=write(tmp_path, [{**GSM, "id": "a"}, {**GSM, "question": "x", "id": "a"}])))
    assert "p.jsonl:1 and " in one_line(e) and "p.jsonl:2 have the same problem id 'a'" in str(e.value)
    assert "distinct 'id' field" in str(e.value)


def test_path_and_hub_name_together_are_refused(tmp_path):
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=write(tmp_path, [GSM]), hf_name="openai/gsm8k"))
    assert "data.path" in one_line(e) and "data.hf_name" in str(e.value) and "both set" in str(e.value)


# ---- bad input: one-line errors naming the file, the line and the fix ----

def one_line(exc_info):
    assert "\n" not in str(exc_info.value)
    return str(exc_info.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=str(tmp_path / "nope.jsonl")))
    assert "nope.jsonl" in one_line(e) and "does not exist" in str(e.value) and "data.path" in str(e.value)


def test_empty_file(tmp_path):
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=write(tmp_path, ["", "  "])))
    assert "is empty" in one_line(e)


def test_line_not_json(tmp_path):
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=write(tmp_path, [GSM, "{not json"])))
    assert "p.jsonl:2: not valid JSON" in one_line(e) and "one JSON object per line" in str(e.value)


def test_a_lone_surrogate_escape_is_refused_and_a_whole_pair_read(tmp_path):
    lone = '{"question": "What is \\ud800 2 + 2?", "answer": "#### 4"}'
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=write(tmp_path, [GSM, lone])))
    assert "p.jsonl:2: holds \\ud800, half of a UTF-16 surrogate pair" in one_line(e)
    pair = '{"question": "Smile \\ud83d\\ude00: 2 + 2?", "answer": "#### 4"}'
    assert load_problems(DataConfig(path=write(tmp_path, [pair])))[0].question == "Smile \U0001f600: 2 + 2?"


def test_a_key_twice_in_one_record_is_refused(tmp_path):
    twice = '{"question": "What is 2 + 2?", "answer": "#### 4", "answer": "#### 5"}'
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=write(tmp_path, [GSM, twice])))
    assert "p.jsonl:2: key 'answer' is given twice in one object" in one_line(e)


def test_record_not_an_object(tmp_path):
    with pytest.raises(DataError, match=r"p\.jsonl:1: .*JSON object"):
        load_problems(DataConfig(path=write(tmp_path, ["[1, 2]"]), format="gsm8k"))


def test_unknown_layout(tmp_path):
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=write(tmp_path, [{"prompt": "q", "target": "1"}])))
    assert "p.jsonl:1: cannot tell the layout" in one_line(e) and "data.format=fields" in str(e.value)


def test_record_missing_field_later_in_the_file(tmp_path):
    with pytest.raises(DataError) as e:
        load_problems(DataConfig(path=write(tmp_path, [GSM, {"question": "q"}])))
    assert "p.jsonl:2: record has no field 'answer'" in one_line(e)


def test_gsm8k_answer_without_marker(tmp_path):
    with pytest.raises(DataError, match=r"p\.jsonl:1: .*'#### <number>'"):
        load_problems(DataConfig(path=write(tmp_path, [{"question": "q", "answer": "5"}])))


def test_empty_question_or_answer(tmp_path):
    with pytest.raises(DataError, match=r"p\.jsonl:1: field 'problem' must be a non-empty string"):
        load_problems(DataConfig(path=write(tmp_path, [{**MATH, "problem": " "}])))
    with pytest.raises(DataError, match=r"p\.jsonl:1: field 'answer' is empty"):
        load_problems(DataConfig(path=write(tmp_path, [{**MATH, "answer": ""}])))


def test_not_utf8(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"question": "\xff\xfe", "answer": "#### 1"}\n')
    with pytest.raises(DataError, match="not UTF-8"):
        load_problems(DataConfig(path=str(path)))


def test_nothing_configured():
    with pytest.raises(DataError, match="set data.path"):
        load_problems(DataConfig())


def test_hub_without_datasets_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("No module named 'datasets'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(DataError, match=r"pip install ets\[hub\]"):
        load_problems(DataConfig(hf_name="openai/gsm8k"))


def test_as_problem_for_python_callers():
    p = Problem("q", "1", id="a")
    assert as_problem(p, 0) is p
    # without an id, the hash of the question, as a data file's record without one gets
    assert as_problem("What is 2+2?", 3) == Problem("What is 2+2?", id=question_id("What is 2+2?"))
    assert as_problem({"question": "q", "answer": 4, "id": 9}, 0)[:3] == ("q", "4", "9")
    assert as_problem({"question": "q"}, 0)[1:3] == (None, question_id("q"))
    assert as_problem(MATH, 0)[:3] == (MATH["problem"], "\\frac12", "test/algebra/1.json")
    with pytest.raises(DataError, match="problem 2: expected a Problem"):
        as_problem({"prompt": "q"}, 2)


def test_a_problem_needs_only_its_question():
    """`Problem(question, answer=None, id=None)`: the id a hash of the question (the same
    wherever it stands in a list, and the one `ets run` gives it), a number as its text."""
    p = Problem("What is 2 + 3?")
    assert (p.question, p.answer, p.id, p.raw) == ("What is 2 + 3?", None, question_id("What is 2 + 3?"), {})
    assert Problem("What is 2 + 3?", 5).answer == "5" and Problem("q", "7", "mine").id == "mine"
    assert Problem(*Problem("q", "7", "mine")) == Problem("q", "7", "mine")  # as pickle rebuilds it
    with pytest.raises(DataError, match="non-empty string"):
        Problem("  ")
    with pytest.raises(DataError, match="answer=None"):
        Problem("q", "")
    with pytest.raises(DataError, match="JSON list"):
        Problem("q", [1, 2])


def test_the_same_question_twice_is_refused_naming_both():
    """Same question, same id, same draws: the second search would repeat the first."""
    with pytest.raises(DataError, match=r"problem 0 and problem 2 have the same problem id .*Problem\(question, id=\.\.\.\)"):
        as_problems(["What is 1 + 1?", "What is 2 + 2?", {"question": "What is 1 + 1?"}])
    assert [p.id for p in as_problems(["q", Problem("q", id="again")])] == [question_id("q"), "again"]


@pytest.mark.parametrize("value, text", [(0.00001, "0.00001"), (1e16, "10000000000000000"), (2.5, "2.5"), (7, "7")])
def test_a_number_ground_truth_is_graded_as_written_not_in_exponent_form(tmp_path, value, text):
    """Python writes 0.00001 as 1e-05, which the grader reads as Euler's e minus 5."""
    (p,) = load_problems(DataConfig(path=write(tmp_path, [{"problem": "q", "answer": value}])))
    assert p.answer == text == Problem("q", answer=value).answer


def test_a_ground_truth_that_is_not_finite_is_refused(tmp_path):
    with pytest.raises(DataError, match="field 'answer' is nan, not a finite number"):
        load_problems(DataConfig(path=write(tmp_path, ['{"problem": "q", "answer": NaN}'])))


def test_a_results_record_with_a_null_ground_truth_stays_ungraded():
    """Its `answer` is the answer the search chose: graded against, it would always be right."""
    assert as_problem({"question": "q", "ground_truth": None, "answer": "7"}, 0).answer is None


def test_a_worked_solution_in_a_named_field_gives_its_number(tmp_path):
    path = write(tmp_path, [{"q": "2+2?", "a": "2 + 2 = 4\n#### 4"}])
    assert load_problems(DataConfig(path=path, question_field="q", answer_field="a"))[0].answer == "4"
    assert Problem("2+2?", answer="2 + 2 = 4\n#### 4").answer == "4"


def test_a_byte_order_mark_is_not_part_of_the_first_record(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_text(json.dumps(GSM) + "\n", encoding="utf-8-sig")
    assert load_problems(DataConfig(path=str(path)))[0].answer == "5"


@pytest.mark.parametrize("text, words", [
    (json.dumps([GSM, GSM]), "a JSON array, not an object"),
    (json.dumps([GSM], indent=1), "it starts a JSON array: the file is JSON, not JSONL"),
])
def test_a_json_array_file_is_named_as_one(tmp_path, text, words):
    path = tmp_path / "p.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(DataError, match=words):
        load_problems(DataConfig(path=str(path)))


def test_a_null_answer_is_called_null(tmp_path):
    with pytest.raises(DataError, match="field 'answer' is null; every problem needs a ground-truth answer"):
        load_problems(DataConfig(path=write(tmp_path, [{"question": "q", "answer": None}])))
