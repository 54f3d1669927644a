"""The model's context and the KV pool bound what a search may ask for, and say so.

- a prompt that leaves no room in the model's context (`max_position_embeddings`, or
  `policy.max_context`) is refused naming the problem (`policy.prompt_overflow: error`), or
  cut to its last tokens with a warning (`truncate`), before any search;
- during a search no path grows past the context: new tokens are capped, and a path that
  fills the context ends its trajectory with finish "context" (one warning per problem);
- a KV pool that cannot hold one sequence (prompt + max_tokens + a step) is a one-line error
  naming `policy.kv_budget_tokens` before any search; a small but sufficient pool runs.
"""

from __future__ import annotations

import json
import logging

import pytest

from ets.config import ConfigError, PolicyConfig, SearchConfig, load_config
from ets.data import DataError, Problem
from ets.engine import Engine
from ets.loop.controller import search
from ets.models.tiny import build_tiny_model, save_tiny_model
from ets.policy.base import ExpandRequest, Prompt, PromptTooLong
from ets.policy.engine import EnginePolicy
from ets.policy.hf import HFPolicy
from ets.policy.steps import fit_prompt, question_tail
from tests.helpers import TINY, one_line_error, run_cli

CONTEXT = 48


def score(questions, trajectories):
    return [[[0.5 + 0.01 * len(s) % 0.5 for s in traj] for traj in per_q] for per_q in trajectories]


@pytest.fixture(scope="module")
def short_model():
    """A tiny model whose config says it has 48 positions."""
    model, tok = build_tiny_model("llama", seed=5)
    model.config.max_position_embeddings = CONTEXT
    return model, tok


def policies(model, tok, search_cfg, **policy_kw):
    cfg = PolicyConfig(model="tiny:llama", step_delimiter="\n", **policy_kw)
    return {"engine": EnginePolicy(Engine(model, tok, kv_budget_tokens=4096), cfg, search_cfg),
            "hf": HFPolicy(model, tok, cfg, search_cfg)}


def test_fit_prompt_refuses_or_keeps_the_end_of_the_question(short_model):
    _, tok = short_model

    def write(question):  # a frame around the question: BOS, then "Q: ", then "\nA:"
        text = f"Q: {question}\nA:"
        return text, [tok.bos_token_id, *tok(text, add_special_tokens=False)["input_ids"]]

    question = "".join(chr(ord("a") + i % 26) for i in range(60))     # one token per letter
    _, ids = write(question)
    assert len(ids) == 67                                             # against 48
    with pytest.raises(PromptTooLong, match="its prompt is 67 tokens and the model's context is 48"):
        fit_prompt(question, write, CONTEXT, "error", 8, tok)
    cut = fit_prompt(question, write, CONTEXT, "truncate", 8, tok)
    # Room for one whole step (8 tokens) is left; the frame stays whole, the question keeps its end.
    assert cut.truncated_from == 67 and len(cut.token_ids) == 40
    assert cut.question == question[-33:] and (cut.text, cut.token_ids) == write(question[-33:])
    fits = question[:40]                                              # 47 tokens: room for one
    assert fit_prompt(fits, write, CONTEXT, "error", 8, tok) == Prompt(*write(fits))
    assert fit_prompt(question, write, None, "error", 8, tok) == Prompt(*write(question))    # no context known
    with pytest.raises(PromptTooLong, match="without the question it is already 47 tokens"):
        fit_prompt(question, lambda q: write("x" * 40 + q), CONTEXT, "truncate", 8, tok)


def test_a_megabyte_question_is_cut_from_its_end_alone(short_model):
    """Only the end of a long question is tokenized again to cut it: the same cut as from
    the whole question's tokens, a frame's worth of tokens at a time."""
    _, tok = short_model
    question = "Sam counts apples in basket number 12345, then the next one. " * 20_000     # 1.2 MB
    calls = []

    def counting(text, **kwargs):
        calls.append(len(text))
        return tok(text, **kwargs)

    kept = question_tail(counting, question, 30)
    assert kept == question[-30:]  # one byte-level token per character here
    assert max(calls) < 1000       # the window, not the megabyte


@pytest.mark.parametrize("backend", ["engine", "hf"])
def test_a_path_never_passes_the_context_and_ends_there(short_model, backend, caplog):
    model, tok = short_model
    cfg = SearchConfig(method="rebase", width=3, max_step_tokens=8, max_tokens=200, max_depth=20, temperature=1.0)
    policy = policies(model, tok, cfg)[backend]
    assert policy.context_tokens == CONTEXT
    problems = [Problem("What is 2 + 2?", "4", id="a"), Problem("What is 3 + 5?", "8", id="b")]
    with caplog.at_level(logging.WARNING, logger="ets.loop.controller"):
        records = search(problems, policy, score, cfg, concurrency=2)
    for r in records:
        for t in r["trajectories"]:
            assert r["prompt_tokens"] + t["tokens"] <= CONTEXT
        assert any(t["finish"] == "context" for t in r["trajectories"])
    # Every trajectory ended: on an EOS, at the context, never past it.
    assert {t["finish"] for r in records for t in r["trajectories"]} <= {"context", "eos", "answer"}
    warned = [rec.getMessage() for rec in caplog.records if "reached the model's context" in rec.getMessage()]
    assert len(warned) == 2 and "problem 'a'" in warned[0] + warned[1] and "(48 tokens)" in warned[0]


def test_both_backends_cap_alike(short_model):
    model, tok = short_model
    cfg = SearchConfig(method="beam", width=4, max_step_tokens=8, max_tokens=200, max_depth=20, temperature=0)
    problems = [Problem("What is 2 + 2?", "4", id="a")]
    got = {name: search(problems, p, score, cfg) for name, p in policies(model, tok, cfg).items()}
    assert got["engine"][0]["trajectories"] == got["hf"][0]["trajectories"]


@pytest.mark.parametrize("backend", ["engine", "hf"])
def test_a_request_at_the_context_decodes_nothing(short_model, backend):
    model, tok = short_model
    policy = policies(model, tok, SearchConfig(max_step_tokens=8))[backend]
    steps = policy.expand([ExpandRequest("full", [tok.bos_token_id] * CONTEXT, 2, seed=1),
                           ExpandRequest("near", [tok.bos_token_id] * (CONTEXT - 3), 1, seed=2)])
    assert [(s.token_ids, s.finish) for s in steps[0]] == [([], "context")] * 2
    assert len(steps[1][0].token_ids) <= 3 and steps[1][0].finish in ("context", "eos")
    policy.release([s.handle for per in steps for s in per])


LONG = "Sam counts the apples in every basket of the market, one basket after another. " * 2


@pytest.mark.parametrize("backend", ["engine", "hf"])
def test_a_long_prompt_is_refused_naming_the_problem_before_any_search(short_model, backend):
    model, tok = short_model
    cfg = SearchConfig(method="rebase", width=2, max_step_tokens=8)
    policy = policies(model, tok, cfg)[backend]
    problems = [Problem("What is 1 + 1?", "2", id="short"), Problem(LONG, "3", id="long-one")]
    n = len(tok(LONG + "\n")["input_ids"])
    with pytest.raises(DataError, match=rf"^problem 'long-one': its prompt is {n} tokens and the model's context "
                                        r"is 48 .*policy.prompt_overflow=truncate"):
        search(problems, policy, score, cfg)
    assert policy.stats()["expand_calls"] == 0   # refused before the short problem was searched


@pytest.mark.parametrize("backend", ["engine", "hf"])
def test_a_long_prompt_is_truncated_when_configured(short_model, backend, caplog):
    model, tok = short_model
    cfg = SearchConfig(method="rebase", width=2, max_step_tokens=8, max_depth=3)
    policy = policies(model, tok, cfg, prompt_overflow="truncate")[backend]
    n = len(tok(LONG + "\n")["input_ids"])
    with caplog.at_level(logging.WARNING, logger="ets.loop.controller"):
        record = search([Problem(LONG, "3", id="long-one")], policy, score, cfg)[0]
    assert record["prompt_truncated_from"] == n and record["prompt_tokens"] == CONTEXT - 8
    assert all(record["prompt_tokens"] + t["tokens"] <= CONTEXT for t in record["trajectories"])
    lines = [r.getMessage() for r in caplog.records if "does not fit the model's context" in r.getMessage()]
    assert lines == [f"problem 'long-one': its prompt of {n} tokens does not fit the model's context of 48; kept "
                     f"the end of its question, in a prompt of 40 tokens (policy.prompt_overflow=truncate)"]


def test_max_context_overrides_the_models_positions(short_model):
    model, tok = short_model
    policy = policies(model, tok, SearchConfig(), max_context=32)["engine"]
    assert policy.context_tokens == 32
    with pytest.raises(ConfigError, match="policy.max_context"):
        PolicyConfig(max_context=1)
    with pytest.raises(ConfigError, match="policy.prompt_overflow"):
        PolicyConfig(prompt_overflow="drop")


# ---- through `ets run`: one line, exit 2, nothing left behind ----

def test_ets_run_refuses_a_prompt_longer_than_max_context(tmp_path, capsys):
    out = tmp_path / "r" / "results.jsonl"
    msg = one_line_error(capsys, run_cli("policy.max_context=40", f"output={out}"))
    assert "problem 'q-" in msg and "its prompt is " in msg and "the model's context is 40" in msg
    assert "policy.prompt_overflow=truncate" in msg
    assert not out.exists()


def test_ets_run_reads_the_context_from_the_models_config(tmp_path, capsys):
    folder = save_tiny_model(tmp_path / "short", "llama", seed=0)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 40
    (folder / "config.json").write_text(json.dumps(config))
    out = tmp_path / "r" / "results.jsonl"
    msg = one_line_error(capsys, run_cli(f"policy.model={folder}", "policy.backend=engine", f"output={out}"))
    assert "the model's context is 40" in msg and not out.exists()
    # Truncated instead: the run goes through, each record saying so.
    assert run_cli(f"policy.model={folder}", "policy.prompt_overflow=truncate", "data.limit=2", f"output={out}") == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["prompt_tokens"] == 40 - 8 and r["prompt_truncated_from"] > 40 for r in records)


@pytest.mark.parametrize("budget", [64, 95])
def test_ets_run_refuses_a_pool_too_small_for_one_sequence(tmp_path, capsys, budget):
    out = tmp_path / "r" / "results.jsonl"
    msg = one_line_error(capsys, run_cli("policy.backend=engine", f"policy.kv_budget_tokens={budget}", f"output={out}"))
    assert msg.startswith(f"ets: error: policy.kv_budget_tokens: the policy's KV pool of {budget} tokens cannot hold "
                          "one sequence of problem ")
    assert "(max_depth 4 x max_step_tokens 8) need 96; set policy.kv_budget_tokens >= 96 or lower max_depth" in msg
    assert not out.exists()
    need = 96
    # Exactly one sequence's worth runs: far less than one search's tree (the engine evicts).
    assert run_cli("policy.backend=engine", f"policy.kv_budget_tokens={need}", f"output={out}") == 0
    summary = json.loads((out.parent / "results.summary.json").read_text())
    assert summary["problems"] == 4 and summary["policy_memory"]["capacity_tokens"] == need
    assert summary["policy_stats"]["evicted_tokens"] + summary["policy_stats"]["spilled_handles"] > 0
    # ... and says so, with what it cost and the fix.
    stats = summary["policy_stats"]
    out = capsys.readouterr().out  # the note wrapped within 100 columns, its later lines indented
    line = " ".join(out[out.index("KV pool full: "):].split("\n  ")).splitlines()[0]
    assert f"{stats['preempted']:,} sequences preempted, {stats['spilled_handles']:,} locks spilled" in line
    assert f"(the pool holds {need:,}; a search peaked at " in line and "a larger policy.kv_budget_tokens" in line
    # A pool that holds the searches says nothing of the kind.
    roomy = tmp_path / "roomy" / "results.jsonl"
    assert run_cli("policy.backend=engine", f"output={roomy}") == 0
    assert "KV pool full" not in capsys.readouterr().out


def test_a_pool_size_on_the_hf_backend_is_named_as_having_no_effect(tmp_path, caplog):
    """The hf backend keeps no pool: a config written for the engine still runs as its
    baseline, with one warning that `policy.kv_budget_tokens` does nothing there."""
    from ets.app.cli import main

    def run(*argv):  # not --quiet: that shows errors alone
        with caplog.at_level(logging.WARNING):
            return main(["run", "--config", str(TINY), *argv])

    out = tmp_path / "results.jsonl"
    assert run("policy.backend=hf", "policy.kv_budget_tokens=96", f"output={out}") == 0
    notes = [r.getMessage() for r in caplog.records if "kv_budget_tokens" in r.getMessage()]
    assert len(notes) == 1 and notes[0].startswith("policy.kv_budget_tokens: 96 has no effect on the hf backend")
    summary = json.loads((tmp_path / "results.summary.json").read_text())
    assert summary["problems"] == 4 and summary["policy_memory"]["capacity_tokens"] is None
    # the engine reads it: no such note
    caplog.clear()
    assert run("policy.backend=engine", "policy.kv_budget_tokens=96", f"output={tmp_path / 'e.jsonl'}") == 0
    assert not [r for r in caplog.records if "has no effect" in r.getMessage()]


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_the_engines_forward_settings_are_named_as_having_no_effect_on_another_backend(backend):
    """policy.compile and policy.max_batch_tokens set the engine's forward alone: set on
    another backend, `ets run` and `--check` say they do nothing; left as they are, nothing."""
    from ets.app.run import check_config, inert_keys_notes

    config = load_config(str(TINY), [f"policy.backend={backend}", "policy.compile=on", "policy.max_batch_tokens=512"])
    [note] = inert_keys_notes(config)
    assert note.startswith(f"policy.compile: on and policy.max_batch_tokens: 512 have no effect on the {backend} "
                           "backend: the engine's forward reads them")
    assert ("policy.vllm" in note) == (backend == "vllm")
    if backend == "hf":  # (--check on vLLM refuses tiny:llama first)
        assert f"# {note}" in check_config(config)
    assert inert_keys_notes(load_config(str(TINY), [f"policy.backend={backend}", "policy.compile=auto"])) == []
    assert inert_keys_notes(load_config(str(TINY), ["policy.backend=engine", "policy.compile=off",
                                                    "policy.max_batch_tokens=512"])) == []


def test_the_pool_check_counts_the_depth_and_the_context():
    from ets.loop.controller import SearchLoop as Loop

    class Fake:
        tokenizer = None
        context_tokens = 100

        def format_prompt(self, q):
            return Prompt(q, [1] * 30)

    cfg = SearchConfig(max_tokens=1000, max_step_tokens=16, max_depth=4)
    loop = Loop([], Fake(), score, cfg)
    assert loop.sequence_tokens(30) == 30 + 4 * 16           # max_depth steps of max_step_tokens
    assert Loop([], Fake(), score, SearchConfig(max_tokens=20, max_step_tokens=16)).sequence_tokens(30) == 30 + 19 + 16
    assert Loop([], Fake(), score, SearchConfig(max_tokens=1000, max_step_tokens=16)).sequence_tokens(30) == 100
