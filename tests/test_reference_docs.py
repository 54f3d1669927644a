"""docs/cli.md and docs/config.md are what scripts/make_reference_docs.py writes from the
code: the parsers of ets/app/cli.py, the config dataclasses and ets/config/key_docs.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ets.app.cli import build_parser
from ets.config import ANSWER_RULES, COSTS, DataConfig, PolicyConfig, SearchConfig, config_from_dict
from ets.config.key_docs import KEY_DOCS, RECIPE_KEY_DOCS
from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gen():
    return load_script("make_reference_docs")


@pytest.mark.parametrize("page", ["docs/cli.md", "docs/config.md"])
def test_committed_page_is_what_the_code_writes(gen, page):
    written = gen.PAGES[page]()
    committed = (ROOT / page).read_text(encoding="utf-8")
    assert committed == written, f"{page} is out of date with the code; regenerate it: {gen.REGENERATE}"


def test_every_config_key_has_a_description_and_every_description_a_key(gen):
    problems = gen.description_problems()
    assert not problems, "\n".join(problems) + "\n(descriptions live in ets/config/key_docs.py)"


def test_a_missing_or_stale_description_is_named(gen, monkeypatch):
    monkeypatch.delitem(KEY_DOCS["search"], "width")
    monkeypatch.setitem(KEY_DOCS["data"], "gone_key", "a key that was removed")
    problems = gen.description_problems()
    assert any("search.width has no description" in p for p in problems), problems
    assert any("'gone_key'" in p and "DataConfig has no field" in p for p in problems), problems


def test_the_generator_refuses_to_write_without_a_description(gen, monkeypatch, capsys):
    before = {page: (ROOT / page).read_text(encoding="utf-8") for page in gen.PAGES}
    monkeypatch.delitem(KEY_DOCS["policy"], "device")
    assert gen.main() == 2
    assert "policy.device has no description" in capsys.readouterr().err
    assert {page: (ROOT / page).read_text(encoding="utf-8") for page in gen.PAGES} == before


def _field(cls, name):
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def test_allowed_values_are_read_from_the_checks(gen):
    assert gen.probed_choices(SearchConfig, _field(SearchConfig, "cost")) == list(COSTS)
    assert gen.probed_choices(SearchConfig, _field(SearchConfig, "answer_extraction")) == list(ANSWER_RULES)
    # choices written inline in the check, not as a constant
    assert gen.probed_choices(DataConfig, _field(DataConfig, "format")) == ["auto", "gsm8k", "math500", "fields"]
    assert gen.probed_choices(PolicyConfig, _field(PolicyConfig, "prompt_overflow")) == ["error", "truncate"]
    # free text, and a number, have no list of values
    assert gen.probed_choices(PolicyConfig, _field(PolicyConfig, "model")) is None
    assert gen.probed_choices(SearchConfig, _field(SearchConfig, "width")) is None


def test_every_recipe_key_described_is_read(gen):
    for key in RECIPE_KEY_DOCS:
        config_from_dict({key: "runs/recipe"})  # an unknown key would be a ConfigError
    assert config_from_dict({"store_path": "runs/recipe"}).output == "runs/recipe/results.jsonl"


def test_the_cli_page_has_every_command_and_every_option():
    gen = load_script("make_reference_docs")
    parser = build_parser()
    page = gen.cli_page(parser)
    for name, _, sub in gen._subcommands(parser):
        assert f"## `ets {name}`" in page
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}`" in page, f"{option} of ets {name} is not on the page"
    assert "95% bootstrap" in page  # argparse's %% as --help shows it


def test_markdown_cells_keep_angle_brackets_and_pipes(gen):
    cell = gen.md("files <method>_w<width>.jsonl, `<kept>` or a | b")
    assert cell == r"files \<method\>_w\<width\>.jsonl, `<kept>` or a \| b"
    assert gen.md("see docs/rewards.md") == "see [rewards.md](rewards.md)"
