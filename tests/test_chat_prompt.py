"""Root prompts as instruct models expect them (ets/policy/chat.py): the chat template with a
system turn and the assistant turn opened, byte for byte what `apply_chat_template` writes;
raw text where there is none; a warning where an instruct model is given raw text."""

import json
import logging
from pathlib import Path

import pytest

from ets.app.cli import main
from ets.app.provenance import differences
from ets.config import ConfigError, PolicyConfig, SearchConfig, load_config
from ets.models import load_tokenizer
from ets.models.tiny import build_tiny_model
from ets.policy.chat import format_notes, messages, prompt_format, render

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
# A chat template in the shape of the common ones (ChatML-like), written with plain-text
# markers so the tiny tokenizer can read it.
TEMPLATE = ("{% for m in messages %}<<{{ m['role'] }}>>{{ m['content'] }}<</{{ m['role'] }}>>\n{% endfor %}"
            "{% if add_generation_prompt %}<<assistant>>{% endif %}")
DATED = "{{ 'date ' + date_string }}|{% for m in messages %}{{ m['content'] }}{% endfor %}"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny:llama")


@pytest.fixture
def chat_tokenizer(tokenizer):
    """The tiny tokenizer with a chat template of its own, as an instruct model's has."""
    tokenizer.chat_template = TEMPLATE
    yield tokenizer
    tokenizer.chat_template = None


def test_the_chat_prompt_is_what_apply_chat_template_writes(chat_tokenizer):
    config = PolicyConfig(model="m", system_prompt="Reason step by step.", prompt_template="Q: {question}\n")
    fmt = prompt_format(chat_tokenizer, config)
    assert fmt.chat and fmt.source == "the tokenizer's chat template"
    text, ids = render(chat_tokenizer, config, fmt, "What is 2 + 3?")
    turns = [{"role": "system", "content": "Reason step by step."}, {"role": "user", "content": "Q: What is 2 + 3?"}]
    assert messages(config, "What is 2 + 3?") == turns
    want = chat_tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
    assert text == want == ("<<system>>Reason step by step.<</system>>\n<<user>>Q: What is 2 + 3?<</user>>\n"
                            "<<assistant>>")
    # tokenized once, without special tokens added on top of the template's own
    assert ids == chat_tokenizer(want, add_special_tokens=False)["input_ids"]


def test_auto_without_a_template_is_raw_text_and_true_is_refused(tokenizer):
    assert tokenizer.chat_template is None
    config = PolicyConfig(model="m", prompt_template="{question}\n")
    fmt = prompt_format(tokenizer, config)
    assert not fmt.chat
    text, ids = render(tokenizer, config, fmt, "Q?")
    assert text == "Q?\n" and ids == tokenizer("Q?\n")["input_ids"]
    with pytest.raises(ConfigError, match="has no chat template"):
        prompt_format(tokenizer, PolicyConfig(model="m", chat_template=True))


def test_false_gives_raw_text_and_warns_for_an_instruct_model(chat_tokenizer):
    config = PolicyConfig(model="m", chat_template=False)
    fmt = prompt_format(chat_tokenizer, config)
    assert not fmt.chat
    assert render(chat_tokenizer, config, fmt, "Q?")[0] == "Q?\n"
    notes = format_notes(chat_tokenizer, config, fmt)
    assert len(notes) == 1 and "has a chat template but gets raw text" in notes[0]
    assert format_notes(chat_tokenizer, PolicyConfig(model="m"), prompt_format(chat_tokenizer, PolicyConfig(model="m"))) == []


def test_a_hand_written_chat_frame_is_not_warned_about(tokenizer):
    """The ETS code's Llama preset writes its chat turns into prompt_template itself."""
    tokenizer.chat_template = TEMPLATE
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|eot_id|>"]})
    try:
        config = PolicyConfig(model="m", chat_template=False, prompt_template="{question}<|eot_id|>")
        assert format_notes(tokenizer, config, prompt_format(tokenizer, config)) == []
    finally:
        tokenizer.chat_template = None


def test_a_system_prompt_without_a_chat_template_is_plain_text_and_said(tokenizer):
    config = PolicyConfig(model="m", system_prompt="Be brief.")
    fmt = prompt_format(tokenizer, config)
    assert render(tokenizer, config, fmt, "Q?")[0] == "Be brief.\n\nQ?\n"
    assert any("written as plain text" in n for n in format_notes(tokenizer, config, fmt))


def test_a_template_inline_or_from_a_file(tokenizer, tmp_path):
    path = tmp_path / "chat.jinja"
    path.write_text(TEMPLATE)
    for setting, source in ((TEMPLATE, "inline Jinja"), (str(path), f"file {path}")):
        config = PolicyConfig(model="m", chat_template=setting)
        fmt = prompt_format(tokenizer, config)
        assert fmt.template == TEMPLATE and source in fmt.source
        assert render(tokenizer, config, fmt, "Q?")[0] == "<<user>>Q?<</user>>\n<<assistant>>"
    with pytest.raises(ConfigError, match="neither a Jinja template"):
        prompt_format(tokenizer, PolicyConfig(model="m", chat_template=str(tmp_path / "missing.jinja")))
    with pytest.raises(ConfigError, match="could not render"):
        config = PolicyConfig(model="m", chat_template="{% for m in messages %}{{ m.nope() }}{% endfor %}")
        render(tokenizer, config, prompt_format(tokenizer, config), "Q?")


def test_chat_template_kwargs_reach_the_template(tokenizer):
    config = load_config(None, [f"policy.chat_template={json.dumps(DATED)}",
                                "policy.chat_template_kwargs.date_string=26 Jul 2024"]).policy
    assert render(tokenizer, config, prompt_format(tokenizer, config), "Q?")[0] == "date 26 Jul 2024|Q?"


@pytest.mark.parametrize("backend", ["engine", "hf"])
def test_a_search_starts_from_the_chat_prompt(backend, tmp_path):
    """End to end: the root of the saved tree is the chat-rendered prompt, on both backends."""
    out = tmp_path / "r.jsonl"
    assert main(["run", "--quiet", "--config", str(TINY), f"output={out}", "data.limit=1", "width=2",
                 "save_trees=true", f"policy.backend={backend}", "policy.system_prompt=Be brief.",
                 f"policy.chat_template={json.dumps(TEMPLATE)}"]) == 0
    record = json.loads(out.read_text().splitlines()[0])
    question = record["question"]
    assert record["tree"]["nodes"][0]["text"] == (
        f"<<system>>Be brief.<</system>>\n<<user>>{question}<</user>>\n<<assistant>>")


def test_a_run_warns_when_an_instruct_model_gets_raw_text(caplog):
    from ets.engine import Engine
    from ets.policy.engine import EnginePolicy

    model, tok = build_tiny_model("llama", seed=0)
    tok.chat_template = TEMPLATE
    policy = EnginePolicy(Engine(model, tok, kv_budget_tokens=256), PolicyConfig(model="tiny:llama", chat_template=False),
                          SearchConfig())
    with caplog.at_level(logging.WARNING):
        policy.format_prompt("Q?")
        policy.format_prompt("Q2?")
    warned = [r for r in caplog.records if "gets raw text" in r.getMessage()]
    assert len(warned) == 1  # once per policy, not once per problem


def test_check_prints_the_exact_first_prompt(tmp_path, capsys):
    assert main(["run", "--config", str(TINY), "--check", "policy.system_prompt=Be brief.",
                 f"policy.chat_template={json.dumps(TEMPLATE)}"]) == 0
    out = capsys.readouterr().out
    first = json.loads((TINY.parent / "data" / "tiny.jsonl").read_text().splitlines()[0])["question"]
    assert "# first prompt (" in out and "policy.chat_template (inline Jinja)" in out
    assert f"# | <<system>>Be brief.<</system>>\n# | <<user>>{first}<</user>>\n# | <<assistant>>\n" in out


def test_check_refuses_a_device_this_machine_lacks(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["run", "--config", str(TINY), "--check", "policy.device=cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ets: error: device 'cuda' asked for") and "policy.device=cpu" in err


def test_dtype_auto_is_bfloat16_on_cuda_and_float32_on_cpu():
    assert PolicyConfig(device="cuda").dtype == "bfloat16"
    assert PolicyConfig(device="cuda:1").dtype == "bfloat16"
    assert PolicyConfig().dtype == "float32"
    assert PolicyConfig(device="cuda", dtype="float16").dtype == "float16"


def test_an_output_made_before_chat_templates_is_not_resumed_with_one():
    """Older outputs hold raw-text prompts: resuming them with chat prompts would mix two formats."""
    old = {"policy.backend": "engine"}
    assert differences(old, {"policy.chat_template": "auto"}) == ["policy.chat_template: False -> 'auto'"]
    assert differences(old, {"policy.chat_template": False}) == []
