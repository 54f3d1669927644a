"""Every user error of the commands: one line `ets: error: ...`, exit 2, and no empty or
corrupt file left behind. Plus --version, --log-level and --quiet."""

import json
import logging
import os
from pathlib import Path

import pytest

from ets.app.cli import main
from tests.helpers import one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"


def tree(folder):
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))


@pytest.fixture
def finished(tmp_path):
    """A finished 3-problem output."""
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", "data.limit=3") == 0
    return out


# ---- the results file ----

@pytest.mark.parametrize("bad, words", [
    ("{not json", "not a JSON line"),
    ("[1, 2]", "a list, not a result object"),
    ('{"question": "q"}', "has no 'id'"),
])
def test_a_broken_middle_line_is_corruption(finished, capsys, bad, words):
    lines = finished.read_text().splitlines()
    lines[1] = bad
    finished.write_text("\n".join(lines) + "\n")
    before = finished.read_text()
    msg = one_line_error(capsys, run_cli(f"output={finished}", "data.limit=3"))
    assert "r.jsonl:2: " in msg and words in msg and "delete that line" in msg
    assert finished.read_text() == before
    assert "r.jsonl" in one_line_error(capsys, main(["eval", str(finished)]))


def test_a_problem_twice_in_the_results_is_corruption(finished, capsys):
    lines = finished.read_text().splitlines()
    finished.write_text("\n".join([*lines, lines[0]]) + "\n")
    msg = one_line_error(capsys, run_cli(f"output={finished}", "data.limit=3"))
    assert "lines 1 and 4 both hold problem" in msg


def test_a_torn_last_line_is_dropped_and_recomputed(finished, caplog):
    lines = finished.read_text().splitlines()
    finished.write_text("\n".join(lines[:2]) + "\n" + lines[2][:30])
    # a reader counts the complete lines, and says one was left out
    with caplog.at_level(logging.WARNING, logger="ets.app.jsonl"):
        assert main(["eval", str(finished), "--json"]) == 0
    assert "its last line is incomplete (a run still writing it, or one stopped mid-line)" in caplog.text
    assert run_cli(f"output={finished}", "data.limit=3") == 0
    assert [json.loads(l)["id"] for l in finished.read_text().splitlines()] == [json.loads(l)["id"] for l in lines]


def not_a_model(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # a folder, but not a model: fails when loaded
    return model


def test_only_a_torn_line_leaves_no_empty_file(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    out.write_text('{"id": "x", "quest')
    code = run_cli(f"output={out}", f"policy.model={not_a_model(tmp_path)}")
    assert code == 2, capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("content", ["", '{"problems": 3, "accur'])
def test_an_empty_or_truncated_summary_is_rebuilt(finished, capsys, content):
    summary = finished.with_name("r.summary.json")
    summary.write_text(content)
    capsys.readouterr()
    assert run_cli(f"output={finished}", "data.limit=3") == 0
    assert "n/a tokens/s" in capsys.readouterr().out       # not 0, not nan: unknown
    rebuilt = json.loads(summary.read_text())
    assert rebuilt["problems"] == 3 and rebuilt["tokens_per_s"] is None and rebuilt["problems_per_s"] is None
    assert run_cli(f"output={finished}", "data.limit=3") == 0  # and every later rerun works


def test_eval_of_an_empty_results_file_is_an_error(tmp_path, capsys):
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    assert "holds no results" in one_line_error(capsys, main(["eval", str(empty)]))
    empty.write_text('{"id": "a", "traj')  # only a torn line
    assert "holds no results" in one_line_error(capsys, main(["eval", str(empty)]))


# ---- overrides ----

def test_scientific_float_override_is_a_float(tmp_path):
    out = tmp_path / "r.jsonl"
    assert run_cli(f"output={out}", "data.limit=1", "lp_time_limit=1e-6", "lambda_c=2E0") == 0
    made = json.loads((tmp_path / "r.config.json").read_text())["compared"]
    assert made["search.lp_time_limit"] == 1e-6 and made["search.lambda_c"] == 2.0


def test_scientific_float_in_a_config_file_is_a_float(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(TINY.read_text().replace("./data/tiny.jsonl", str(ROOT / "configs/data/tiny.jsonl"))
                   + "lp_time_limit: 1e-6\nlambda_c: 5E-1\n")
    assert main(["run", "--quiet", "--config", str(cfg), f"output={tmp_path / 'r.jsonl'}", "data.limit=1"]) == 0
    made = json.loads((tmp_path / "r.config.json").read_text())["compared"]
    assert made["search.lp_time_limit"] == 1e-6 and made["search.lambda_c"] == 0.5


@pytest.mark.parametrize("override", ["width=[1", "reward.options={a: 1", 'policy.model="tiny'])
def test_an_override_that_is_not_yaml(tmp_path, capsys, override):
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", override))
    assert "not valid YAML" in msg and "quote it" in msg
    assert tree(tmp_path) == []


def test_path_and_hub_name_together(tmp_path, capsys):
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", "data.hf_name=openai/gsm8k"))
    assert "both set" in msg
    assert tree(tmp_path) == []


def test_unknown_method_is_a_config_error_not_a_key_error(tmp_path, capsys):
    out = tmp_path / "sw"
    msg = one_line_error(capsys, main(["sweep", "--quiet", "--config", str(TINY), "--methods", "beam,mcts",
                                       "--out", str(out)]))
    assert "unknown search strategy 'mcts'" in msg and not out.exists()


@pytest.mark.parametrize("command", ["sweep", "demo"])
def test_a_method_or_width_twice_is_refused(tmp_path, capsys, command):
    out = tmp_path / "o"
    base = ["sweep", "--config", str(TINY)] if command == "sweep" else ["demo"]
    msg = one_line_error(capsys, main([*base, "--quiet", "--methods", "beam,rebase,beam_search", "--out", str(out)]))
    assert "--methods names 'beam' twice" in msg
    if command == "sweep":
        msg = one_line_error(capsys, main([*base, "--quiet", "--widths", "2,4,2", "--out", str(out)]))
        assert "--widths names 2 twice" in msg
    assert not out.exists()


# ---- output paths: checked before anything is made ----

def test_output_is_a_folder(tmp_path, capsys):
    msg = one_line_error(capsys, run_cli(f"output={tmp_path}"))
    assert "is a folder" in msg and "results.jsonl" in msg
    assert tree(tmp_path) == []


def test_output_parent_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'f' / 'sub' / 'r.jsonl'}"))
    assert "is a file, not a folder" in msg
    msg = one_line_error(capsys, main(["sweep", "--quiet", "--config", str(TINY), "--out", str(tmp_path / "f")]))
    assert "is a file, not a folder" in msg
    assert tree(tmp_path) == ["f"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_output_folder_read_only(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert "read-only" in one_line_error(capsys, run_cli(f"output={ro / 'r.jsonl'}"))
        assert tree(ro) == []
    finally:
        ro.chmod(0o700)


def test_output_that_cannot_be_written_is_one_line(tmp_path, capsys, monkeypatch):
    """What a read-only folder does to a process that os.access lets through (e.g. root
    on some file systems): the results file cannot be made."""
    import ets.app.lock as lock

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(lock.os, "open", refuse)
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'sub' / 'r.jsonl'}"))
    assert "cannot write there (Permission denied)" in msg
    assert tree(tmp_path) == []  # the folder made for it is gone again


@pytest.mark.parametrize("bad", ["data.path=/nope/data.jsonl", "policy.model=/nope/model", "method=alphazero",
                                 "reward.model=/nope/prm"])
def test_no_output_is_made_before_the_inputs_validate(tmp_path, capsys, bad):
    one_line_error(capsys, run_cli(f"output={tmp_path / 'runs' / 'r.jsonl'}", bad))
    assert tree(tmp_path) == []


def test_a_model_that_fails_to_load_leaves_no_file(tmp_path, capsys):
    code = run_cli(f"output={tmp_path / 'runs' / 'r.jsonl'}", f"policy.model={not_a_model(tmp_path)}")
    assert code == 2, capsys.readouterr().err
    assert tree(tmp_path) == ["model", "model/config.json"]


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    import ets.app.run as run_module

    def broken(*args, **kwargs):
        raise KeyError("internal")

    monkeypatch.setattr(run_module, "run", broken)
    with pytest.raises(KeyError):
        run_cli(f"output={tmp_path / 'r.jsonl'}")


# ---- --version, --log-level, --quiet ----

def test_version(capsys):
    import ets

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"ets {ets.__version__}"


def test_log_level_and_quiet(tmp_path, capsys):
    from transformers.utils import logging as hf_logging

    root = logging.getLogger()
    saved = root.level
    try:
        empty = tmp_path / "e.jsonl"
        empty.write_text("")
        main(["eval", "--log-level", "debug", str(empty)])
        assert root.level == logging.DEBUG
        main(["--log-level", "INFO", "eval", str(empty)])
        assert root.level == logging.INFO
        with pytest.raises(SystemExit):
            main(["eval", "--log-level", "LOUD", str(empty)])
        capsys.readouterr()

        out = tmp_path / "r.jsonl"
        assert run_cli(f"output={out}", "data.limit=1") == 0       # run_cli passes --quiet
        assert root.level == logging.ERROR
        assert not hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == logging.ERROR
        assert capsys.readouterr().err == ""
        # Without --quiet, loading models is still quiet (its bars would cut through the run's)...
        assert main(["run", "--config", str(TINY), f"output={out}", "data.limit=1"]) == 0
        assert not hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == logging.ERROR
        assert root.level == logging.WARNING
        # ... unless asked for with DEBUG
        assert main(["run", "--log-level", "DEBUG", "--config", str(TINY), f"output={out}", "data.limit=1"]) == 0
        assert hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == logging.DEBUG
    finally:
        root.setLevel(saved)
        hf_logging.set_verbosity_warning()


def test_dvts_with_more_subtrees_than_width_is_refused(tmp_path, capsys):
    """fixed_width > width gave every DVTS subtree 0 of the width: no trajectory at all."""
    msg = one_line_error(capsys, run_cli(f"output={tmp_path / 'r.jsonl'}", "method=dvts", "width=4", "fixed_width=8"))
    assert "fixed_width" in msg and "<= width" in msg
    assert tree(tmp_path) == []


def test_overrides_after_a_flag_are_taken_in_order(tmp_path, capsys):
    """argparse alone takes only the key=value overrides before the first flag after them."""
    out = tmp_path / "r.jsonl"
    code = main(["run", "--config", str(TINY), "width=2", "--check", "data.limit=1", f"output={out}", "width=3"])
    printed = capsys.readouterr().out
    assert code == 0 and "\n  limit: 1\n" in printed and "\n  width: 3\n" in printed
    with pytest.raises(SystemExit) as stopped:
        main(["run", "--config", str(TINY), "--bogus", "width=2"])
    assert "unrecognized arguments: --bogus (see ets run --help)" in one_line_error(capsys, stopped.value.code)


@pytest.mark.parametrize("command", ["eval", "diagnose"])
def test_a_reader_given_what_is_not_results_is_not_told_to_overwrite(capsys, command):
    """eval, compare and diagnose have no --overwrite, and a config is not a corrupt results file."""
    msg = one_line_error(capsys, main([command, str(TINY)]))
    assert "not a JSON line" in msg and "is it the results of an `ets run`? If so it is corrupt" in msg
    assert "--overwrite" not in msg


@pytest.mark.parametrize("argv, words", [
    (["sweep", "--methods", "rebase", "--widths", "2", "width=4"], "'width=4' and --widths both set the width"),
    (["sweep", "--methods", "rebase", "search.select_method=beam"], "'search.select_method=beam' and --methods both"),
    (["sweep", "--seeds", "0,1", "seed=3"], "'seed=3' and --seeds both set the seed"),
    (["sweep", "--out", "sw", "output=o.jsonl"], "'output=o.jsonl' and --out both set the output"),
    (["run", "--output", "a.jsonl", "output=b.jsonl"], "'output=b.jsonl' and --output both set the output"),
])
def test_a_key_set_by_its_flag_and_an_override_is_refused(tmp_path, capsys, monkeypatch, argv, words):
    """One of the two was dropped without a word."""
    monkeypatch.chdir(tmp_path)
    command, *rest = argv
    assert words in one_line_error(capsys, main([command, "--config", str(TINY), *rest]))
    assert not any(tmp_path.iterdir())


def test_a_hub_warning_prints_once_and_not_under_quiet(capfd):
    """The hub's logger has a stderr handler of its own (and sets its own level): its
    retries of an unreachable hub must print once, in the command's form, and not at all
    under --quiet."""
    from ets.app.cli import configure_logging

    root, hub = logging.getLogger(), logging.getLogger("huggingface_hub.utils._http")
    saved = root.level
    try:
        configure_logging(None, quiet=False, models=True)
        hub.warning("Retrying in 1s [Retry 1/5].")
        assert capfd.readouterr().err.splitlines() == [
            "ets: WARNING: huggingface_hub.utils._http: Retrying in 1s [Retry 1/5]."]
        configure_logging(None, quiet=True, models=True)
        hub.warning("Retrying in 2s [Retry 2/5].")
        assert capfd.readouterr().err == ""
    finally:
        configure_logging(logging.getLevelName(saved), quiet=False, models=False)


def test_ctrl_c_while_the_libraries_load_is_one_line(tmp_path, capsys, monkeypatch):
    """An interrupt in configure_logging's imports (torch, transformers: the first seconds
    of a command) ends as any other: one line, exit 130."""
    import ets.app.cli as cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "configure_logging", interrupted)
    assert main(["run", "--config", str(TINY), f"output={tmp_path / 'r.jsonl'}"]) == 130
    assert capsys.readouterr().err.splitlines() == [
        "ets: interrupted; finished problems are saved, rerun the same command to resume"]


@pytest.mark.parametrize("argv", [["run", "--output", ""], ["sweep", "--methods", ""]])
def test_an_option_given_empty_is_refused_not_taken_as_unset(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as stop:
        main([argv[0], "--config", str(TINY), *argv[1:]])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"ets: error: {argv[1]} is empty; give it a value or leave it out (see ets {argv[0]} --help)"]


def test_check_refuses_a_hub_dataset_without_the_package_to_read_it(tmp_path, capsys):
    """--check reads no hub dataset, but refuses as the run would where `datasets` is missing."""
    try:
        import datasets  # noqa: F401
        pytest.skip("reason: `datasets` is installed here")
    except ImportError:
        pass
    msg = one_line_error(capsys, main(["run", "--check", "--config", str(TINY), "data.path=null",
                                       "data.hf_name=openai/gsm8k"]))
    assert "data.hf_name='openai/gsm8k' needs the `datasets` package" in msg
