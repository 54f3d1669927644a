"""A Jinja chat template that does not compile or cannot render, given to the policy
(`policy.chat_template`) or to a chat-framed PRM (`reward.options.chat_template` of
`chat_judgement` and `token_classification`): one line `ets: error: ...` at `ets run --check`
and at `ets run`, before any problem is searched; one that fails only on some text fails
mid-run as one line naming the question and trajectory."""

from __future__ import annotations

import json

import pytest

from tests import tiny_prms
from tests.helpers import one_line_error, run_cli

SYNTAX_ERROR = "{% for %}"   # overrides are YAML: quoted as JSON strings below
RAISES = "{{ raise_exception('this template needs a system turn') }}"


@pytest.fixture(scope="module")
def prms(tmp_path_factory):
    root = tmp_path_factory.mktemp("prms")
    return {"chat_judgement": tiny_prms.chat_judge(root / "judge"),
            "token_classification": tiny_prms.token_classifier(root / "classifier", chat_template=tiny_prms.QWEN_CHAT)}


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
@pytest.mark.parametrize("backend", ["engine", "hf"])
def test_a_policy_template_that_does_not_compile_is_one_line(tmp_path, capsys, backend, check):
    out = tmp_path / "r.jsonl"
    msg = one_line_error(capsys, run_cli(f"output={out}", f"policy.chat_template={json.dumps(SYNTAX_ERROR)}",
                                         f"policy.backend={backend}", *(["--check"] if check else [])))
    assert ("policy.chat_template (inline Jinja) could not render a prompt: TemplateSyntaxError: Expected an "
            "expression, got 'end of statement block'; fix the template or set policy.chat_template: false") in msg
    assert not out.exists()


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
@pytest.mark.parametrize("reward", ["chat_judgement", "token_classification"])
def test_a_prm_template_that_does_not_compile_is_one_line(tmp_path, capsys, prms, reward, check):
    out = tmp_path / "r.jsonl"
    msg = one_line_error(capsys, run_cli(f"output={out}", f"reward.name={reward}", f"reward.model={prms[reward]}",
                                         f"reward.options.chat_template={json.dumps(SYNTAX_ERROR)}", *(["--check"] if check else [])))
    assert msg == (f"ets: error: reward {reward!r}: option 'chat_template' is not a valid Jinja template: "
                   "TemplateSyntaxError: Expected an expression, got 'end of statement block' (template line 1)")
    assert not out.exists()


@pytest.mark.parametrize("reward", ["chat_judgement", "token_classification"])
def test_a_prm_template_that_cannot_render_fails_when_the_prm_is_built(tmp_path, capsys, prms, reward):
    out = tmp_path / "r.jsonl"
    msg = one_line_error(capsys, run_cli(f"output={out}", f"reward.name={reward}", f"reward.model={prms[reward]}",
                                         f"reward.options.chat_template={json.dumps(RAISES)}"))
    assert msg == (f"ets: error: reward {reward!r}: the chat template could not render the conversation: "
                   "TemplateError: this template needs a system turn; fix the template (reward.options.chat_template)")
    assert not out.exists()


def test_a_prm_template_that_fails_on_some_text_fails_mid_run_naming_it(tmp_path, capsys, prms):
    """Rendered fine when the PRM was built, it raises on one problem's text: the line names
    the question and trajectory of the round, and finished problems stay."""
    template = tiny_prms.LLAMA3_CHAT.replace(
        "{% for m in messages %}", "{% for m in messages %}{% if 'box' in m['content'] %}"
                                   "{{ raise_exception('no boxes') }}{% endif %}")
    out = tmp_path / "r.jsonl"
    msg = one_line_error(capsys, run_cli(f"output={out}", "reward.name=chat_judgement",
                                         f"reward.model={prms['chat_judgement']}", "concurrency=1",
                                         f"reward.options.chat_template={json.dumps(template)}"))
    assert msg.startswith("ets: error: reward 'chat_judgement', question 0 trajectory 0: the chat template could not "
                          "render the conversation: TemplateError: no boxes")
    assert "box" not in out.read_text() and out.read_text().count("\n") >= 1
