"""The config boundary: each value a user gives (a YAML file, a `key=value` override, a
command-line flag) is checked for its type and range where it becomes a typed value. A bad
one ends as one line `ets: error: ...` that names the key, with exit code 2; nothing runs
and nothing is written. `ets run --check` reads and checks everything a run would, and
loads no model: each case runs it."""

import pytest

from ets.app.cli import main
from ets.config import load_config
from tests.helpers import TINY, one_line_error

HUGE = "100000000000000000000"  # 10**20: beyond the 64 bits torch and numpy keep integers in
DATA = str(TINY.parent / "data" / "tiny.jsonl")


def check(tmp_path, *args):
    """`ets run --check` of configs/tiny.yaml (or `--config FILE` among args) and overrides."""
    config = [] if "--config" in args else ["--config", str(TINY)]
    return main(["run", "--quiet", "--check", *config, f"output={tmp_path / 'r.jsonl'}", *args])


# A config of 8 lines: the lines of a file case's text are numbered from 9.
BASE = f"width: 4\npolicy:\n  model: tiny:llama\n  backend: hf\nreward:\n  model: tiny:llama\ndata:\n  path: {DATA}\n"


def config_file(tmp_path, text, name="c.yaml"):
    """BASE, then `text`, as a file."""
    path = tmp_path / name
    path.write_text(BASE + text)
    return path


# ---- values: each key's type and range, the key named ----

OVERRIDES = [
    # text where a path or name is meant
    (["policy.model=123"], "policy.model: 123 must be a string", "quote a number meant as text: '123'"),
    (["policy.model=[a]"], "policy.model: ['a'] must be a string", "e.g. 'tiny:llama'"),
    (["policy.model=null"], "policy.model: null must be a string", ""),
    (["reward.model=5"], "reward.model: 5 must be a string (or null)", ""),
    (["data.path=7"], "data.path: 7 must be a string (or null)", ""),
    (["data.hf_name=5"], "data.hf_name: 5 must be a string", ""),
    (["data.hf_split=5"], "data.hf_split: 5 must be a string", ""),
    (["data.question_field=5"], "data.question_field: 5 must be a string", ""),
    (["output=3"], "output: 3 must be a string", ""),
    (["output=[1]"], "output: [1] must be a string", ""),
    (["output=''"], "output: '' must not be empty", "e.g. 'runs/results.jsonl'"),
    # a \\u escape of a UTF-16 surrogate: YAML keeps it, and it is not text
    (['policy.prompt_template="Q: {question}\\ud800"'], "policy.prompt_template: holds \\ud800, UTF-16 surrogates",
     "its escape of \\U and 8 digits"),
    (["embedder=5"], "embedder: 5 must be a string", ""),
    (["method=[1]"], "method: [1] must be a string", "e.g. 'rebase'"),
    (["policy.step_delimiter=5"], "policy.step_delimiter: 5 must be a string", ""),
    (["policy_model_type=[1]"], "policy_model_type: [1] is not a preset", "llemma"),
    (["reward_model_type=[1]"], "reward_model_type: [1] is not a preset", "llemma"),
    # mappings
    (["reward.options=5"], "reward.options: 5 must be a mapping", ""),
    (["reward.options=[1]"], "reward.options: [1] must be a mapping", ""),
    (["reward.options=5", "reward.options.tag=x"], "reward.options is 5, not a mapping", ""),
    (["policy=5", "policy.model=x"], "policy is 5, not a mapping", ""),
    # integers: no float, no bool, no text, within 64 bits
    ([f"width={HUGE}"], f"width: {HUGE} must be below 2**63", ""),
    (["width=1:30"], "width: '1:30' must be an integer", "e.g. 16"),  # YAML 1.1 read 90 (base 60)
    ([f"max_tokens={HUGE}"], "max_tokens:", "below 2**63"),
    ([f"policy.kv_budget_tokens={HUGE}"], "policy.kv_budget_tokens:", "below 2**63"),
    ([f"concurrency={HUGE}"], "concurrency:", "below 2**63"),
    ([f"data.limit={HUGE}"], "data.limit:", "below 2**63"),
    ([f"seed=-{HUGE}"], "seed:", "at least -2**63"),
    (["torch_threads=4294967296"], "torch_threads: 4294967296 must be below 2**31", ""),
    (["width=" + "9" * 5000], "has 5,000 digits", "width="),
    # finite numbers
    (["temperature=.inf"], "temperature: inf must be a finite number", "e.g. 1.0"),
    (["temperature=1e400"], "temperature: inf must be a finite number", ""),
    (["lp_time_limit=.inf"], "lp_time_limit: inf must be a finite number", ""),
    (["lambda_s=.inf"], "lambda_s: inf must be a finite number", ""),
    (["cluster_threshold=.inf"], "cluster_threshold: inf must be a finite number", ""),
    (["top_p=nan"], "top_p: 'nan' must be a number", ""),  # text: YAML's NaN is .nan
    # true or false: text is not taken as true
    (["save_trees=yes-please"], "save_trees: 'yes-please' must be true or false", ""),
    (["save_trees='false'"], "save_trees: 'false' must be true or false", ""),
    (["save_trees=1"], "save_trees: 1 must be true or false", ""),
    (["save_trees=null"], "save_trees: null must be true or false", ""),
    (["lp_relax=1"], "lp_relax: 1 must be true or false", ""),
    # devices torch knows
    (["policy.device=banana"], "policy.device: 'banana' is not a device", "use cpu, cuda, cuda:N"),
    (["policy.device=cuda:x"], "policy.device: 'cuda:x' is not a device", "(did you mean 'cuda'?)"),
    (["policy.device=cuda:-1"], "policy.device: 'cuda:-1' is not a device", ""),
    # vLLM's options: the same rules
    (["policy.backend=vllm", "policy.vllm.gpu_memory_utilization=.nan"],
     "policy.vllm.gpu_memory_utilization: nan must be a finite number", ""),
    (["policy.backend=vllm", f"policy.vllm.tensor_parallel_size={HUGE}"],
     "policy.vllm.tensor_parallel_size:", "below 2**63"),
    # a section the run's own keys do not have
    (["run.torch_threads=1"], "override 'run.torch_threads=1'", "(torch_threads is a top-level key: torch_threads=1)"),
    (["rounds=sometimes"], "rounds: 'sometimes' is not allowed", "in_flight, whole"),
    (["policy.memory_fraction=2"], "policy.memory_fraction: 2 must be in (0, 1]", ""),
    (["policy.compile=maybe"], "policy.compile:", "auto, on, off"),
    (["policy.prepack=maybe"], "policy.prepack:", "auto, on, off"),
    (["policy.prepack=on", "policy.compile=on"], "policy.prepack=on and policy.compile=on", "use policy.prepack=auto or off"),
    (["policy.prepack=on", "policy.dtype=float16"], "policy.prepack=on: oneDNN prepacked linears run on the cpu",
     "use policy.prepack=auto or off"),
    # values YAML has that a config does not hold
    (["reward.options.x=!!binary aGk="], "reward.options.x", "tag:yaml.org,2002:binary"),
]


@pytest.mark.parametrize("overrides, words, more", OVERRIDES, ids=[" ".join(o)[:60] for o, _, _ in OVERRIDES])
def test_a_bad_value_is_one_line_naming_its_key(tmp_path, capsys, overrides, words, more):
    msg = one_line_error(capsys, check(tmp_path, *overrides))
    assert words in msg and more in msg, msg
    assert not any(tmp_path.iterdir())


# Refused before these checks existed, and still refused, each naming its key.
ALREADY_REFUSED = [
    ("width=1e3", "width: 1000.0 must be an integer"),
    ("width=true", "width: true must be an integer"),
    ("width=10**20", "width: '10**20' must be an integer"),
    ("seed=2**63", "seed: '2**63' must be an integer"),
    ("seed=9223372036854775808", "seed: 9223372036854775808 must be below 2**63"),
    ("temperature=nan", "temperature: 'nan' must be a number"),
    ("temperature=.nan", "temperature: nan must be a finite number"),
    ("lambda_c=-1", "lambda_c: -1 must be a number >= 0"),
    ("concurrency=0", "concurrency: 0 must be an integer >= 1"),
    ("torch_threads=-1", "torch_threads: -1 must be an integer >= 1"),
    ("data.start=-1", "data.start: -1 must be an integer >= 0"),
    ("search.answer_markers=[1]", "answer_markers: [1] must be a list of strings"),
    ("policy.chat_template_kwargs=5", "policy.chat_template_kwargs: 5 must be a mapping"),
    ("policy.vllm=5", "policy.vllm: 5 must be a mapping"),
    ("search=[1]", "section 'search' must be a mapping"),
    ("reward.name=[1]", "reward.name: [1] must be a string"),
]


@pytest.mark.parametrize("override, words", ALREADY_REFUSED)
def test_values_refused_before_stay_refused(tmp_path, capsys, override, words):
    assert words in one_line_error(capsys, check(tmp_path, override))


def test_every_field_of_every_section_is_checked():
    """The typed check has a rule for each field's annotation (a field of a new type makes
    it raise TypeError: a bug, found here), and a wrong type in any field is refused."""
    import dataclasses

    from ets.config import ConfigError, DataConfig, PolicyConfig, RewardConfig, RunConfig, SearchConfig

    for cls in (SearchConfig, PolicyConfig, RewardConfig, DataConfig, RunConfig):
        for f in dataclasses.fields(cls):
            with pytest.raises(ConfigError, match=f.name):
                cls(**{f.name: object()})


def test_yaml_numbers_and_dates_read_as_written():
    """YAML 1.1 read `010` as 8 and a date as a datetime (which no JSON can hold): here 010
    is ten and a date is text; hex and scientific floats stay numbers."""
    config = load_config(None, ["seed=010", "policy.chat_template_kwargs.date_string=2024-07-26",
                                "max_step_tokens=0x10", "lp_time_limit=1e-6", "policy.system_prompt=''"])
    assert config.search.seed == 10 and config.search.max_step_tokens == 16
    assert config.policy.chat_template_kwargs == {"date_string": "2024-07-26"}
    assert config.search.lp_time_limit == 1e-6
    assert config.policy.system_prompt == ""  # an empty system turn is a choice of its own


def test_yaml_aliases_and_merges_still_work(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("search:\n  <<: &common {width: 8, seed: 3}\n  seed: 5\n"
                    "policy:\n  chat_template_kwargs: *common\n")
    config = load_config(path)
    assert config.search.width == 8 and config.search.seed == 5  # a merge's key may be given beside it
    assert config.policy.chat_template_kwargs == {"width": 8, "seed": 3}


# ---- files ----

FILES = [
    ("not UTF-8", b"width: 4\nmethod: 'caf\xe9'\n", "is not UTF-8 text (byte 0xe9 at offset", "save it as UTF-8"),
    ("a key twice", b"width: 8\n", "line 9, column 1: key 'width' is given twice (first on line 1)", "keep one"),
    ("a section twice", b"policy:\n  model: tiny:llama\n", "line 9, column 1: key 'policy' is given twice "
                                                            "(first on line 2)", ""),
    ("a key twice in a section", b"search:\n  seed: 1\n  seed: 2\n", "line 11, column 3: key 'seed' is given twice",
     ""),
    ("a tab", b"search:\n\tseed: 1\n", "line 10, column 1:", "indent with spaces"),
    ("a bad indentation", b"search:\n  seed: 1\n   top_k: 0\n", "line 11, column 9: mapping values are not allowed",
     "a key is indented more than the one above it"),
    ("a recursive alias", b"no_effect:\n  a: &a [*a]\n", "line 10, column 6: an alias inside the value of its own "
                                                         "anchor", ""),
    ("a billion laughs", b"no_effect:\n" + b"".join(
        b"  k%d: &k%d [%s]\n" % (i, i, b", ".join([b"*k%d" % (i - 1) if i else b"x"] * 10)) for i in range(9)),
     "line 14, column 7: this value holds more than 100,000 values once its aliases are expanded", ""),
    ("a set", b"no_effect:\n  a: !!set {x}\n", "a value tagged tag:yaml.org,2002:set", ""),
    ("a tag its text is not", b"search:\n  seed: !!int abc\n", "line 10, column 9: 'abc' is not an integer", ""),
    ("a deep nesting", b"no_effect:\n  a: " + b"[" * 2000 + b"]" * 2000 + b"\n", "values nested more than 100 deep",
     ""),
]


@pytest.mark.parametrize("case, text, words, more", FILES, ids=[case for case, *_ in FILES])
def test_a_bad_config_file_is_one_line_naming_it(tmp_path, capsys, case, text, words, more):
    path = tmp_path / "c.yaml"
    path.write_bytes(text if case == "not UTF-8" else BASE.encode() + text)
    msg = one_line_error(capsys, check(tmp_path, "--config", str(path)))
    assert f"config file '{path}'" in msg and words in msg and more in msg, msg


def test_a_config_path_that_is_a_folder(tmp_path, capsys):
    msg = one_line_error(capsys, check(tmp_path, "--config", str(tmp_path)))
    assert f"config file '{tmp_path}' is a folder; give the path of a YAML file" in msg


def test_a_config_file_that_cannot_be_read(tmp_path, capsys, monkeypatch):
    """What a file without read permission does (root reads every file, so it is simulated)."""
    import pathlib

    path = config_file(tmp_path, "")
    real_open = pathlib.Path.open

    def refuse(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", refuse)
    msg = one_line_error(capsys, check(tmp_path, "--config", str(path)))
    assert f"config file '{path}' cannot be read (Permission denied)" in msg


@pytest.mark.parametrize("text, words", [
    ("- 1\n- 2\n", "must hold a mapping of keys to values"),
    ("hello\n", "must hold a mapping of keys to values"),
    ("policy:\n  - model\n", "section 'policy' must be a mapping of keys to values"),
    ("width: [1,\n", "is not valid YAML"),
])
def test_files_refused_before_stay_refused(tmp_path, capsys, text, words):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert words in one_line_error(capsys, check(tmp_path, "--config", str(path)))


def test_a_quoted_false_in_a_file_is_not_true(tmp_path, capsys):
    path = config_file(tmp_path, "save_trees: 'false'\n")
    msg = one_line_error(capsys, check(tmp_path, "--config", str(path)))
    assert "save_trees: 'false' must be true or false (unquoted)" in msg
    assert check(tmp_path, "--config", str(config_file(tmp_path, "save_trees: false\n"))) == 0


# ---- search-and-learn's recipes: a bad value named by the recipe's key ----

@pytest.mark.parametrize("text, words", [
    ("num_iterations: x\n", "num_iterations: 'x' must be an integer"),
    ("model_path: 5\n", "model_path: 5 must be a string"),
    ("custom_chat_template: 5\n", "custom_chat_template: 5 must be true or false (unquoted) or a string"),
    ("dataset_start: a\ndataset_end: 3\n", "dataset_start: 'a' must be an integer"),
    ("approach: [1]\n", "approach: [1] is not one of search-and-learn's"),
])
def test_a_bad_recipe_value_names_the_recipe_key(tmp_path, capsys, text, words):
    path = tmp_path / "recipe.yaml"
    defaults = {"approach": "approach: beam_search\n", "model_path": "model_path: tiny:llama\n"}
    given = "".join(line for key, line in defaults.items() if not text.startswith(key))
    path.write_text(f"{given}n: 4\nprm_path: tiny:llama\n{text}")
    assert words in one_line_error(capsys, check(tmp_path, "--config", str(path)))


# ---- command-line arguments: the same one line, no usage block ----

ARGUMENTS = [
    (["sweep", "--config", str(TINY), "--jobs", "0"], "argument --jobs: give a whole number >= 1, not '0'", "ets sweep"),
    (["sweep", "--jobs", "2"], "the following arguments are required: --config", "ets sweep"),
    (["run"], "the following arguments are required: --config", "ets run"),
    (["run", "--config", str(TINY), "--bogus"], "unrecognized arguments: --bogus", "ets run"),
    (["bogus"], "argument command: invalid choice: 'bogus'", "ets"),
    (["eval"], "the following arguments are required: file", "ets eval"),
    (["eval", "r.jsonl", "--agg", "nope"], "argument --agg: invalid choice: 'nope'", "ets eval"),
    (["demo", "--width", "abc"], "argument --width: give a whole number >= 1, not 'abc'", "ets demo"),
    (["demo", "--problems", "0"], "argument --problems: give a whole number >= 1, not '0'", "ets demo"),
    (["--log-level", "LOUD", "eval", "r.jsonl"], "argument --log-level: invalid choice: 'LOUD'", "ets"),
]


@pytest.mark.parametrize("argv, words, command", ARGUMENTS, ids=[" ".join(a)[:50] for a, _, _ in ARGUMENTS])
def test_an_argument_error_is_one_line(capsys, argv, words, command):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"ets: error: {words}") and err[0].endswith(f"(see {command} --help)"), err


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["sweep", "--help"]])
def test_help_still_prints_usage(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    out = capsys.readouterr()
    assert exit_.value.code == 0 and out.out.startswith(f"usage: {' '.join(['ets', *argv[:-1]])}") and out.err == ""
