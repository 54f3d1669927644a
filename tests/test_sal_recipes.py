"""search-and-learn's recipes run unchanged: tests/fixtures/sal_recipes/ holds five of its
`recipes/<model>/<approach>.yaml` byte for byte; every key is understood (mapped to ours,
or named as having no effect), its defaults fill what a recipe leaves out, and ets's own
keys may stand beside them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ets.app.cli import main
from ets.config import ConfigError, config_from_dict, load_config
from ets.config.sal_recipes import SAL_DEFAULTS, SAL_KEYS, SAL_SYSTEM_PROMPT

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "tests" / "fixtures" / "sal_recipes"
DATA = ROOT / "configs" / "data" / "tiny.jsonl"
LLAMA, RLHFLOW = "meta-llama/Llama-3.2-1B-Instruct", "RLHFlow/Llama3.1-8B-PRM-Deepseek-Data"
# Tiny random models and a short search, given as search-and-learn's own keys where it has
# them (num_iterations, max_tokens): what changes is the machine, not the file.
TINY = ["policy.model=tiny:llama", "policy.chat_template=auto", "reward.name=step_tag", "reward.model=tiny:llama",
        f"data.path={DATA}", "data.limit=1", "num_iterations=2", "max_tokens=4", "concurrency=1"]


def recipe(name: str) -> Path:
    return RECIPES / f"{name}.yaml"


def test_the_fixtures_are_search_and_learns_files_verbatim():
    sizes = {name: len(recipe(name).read_bytes()) for name in (
        "Llama-3.2-1B-Instruct/best_of_n", "Llama-3.2-1B-Instruct/beam_search", "Llama-3.2-1B-Instruct/dvts",
        "Qwen2.5-1.5B-Instruct/beam_search", "AceMath-7B-Instruct/dvts")}
    assert sizes == {"Llama-3.2-1B-Instruct/best_of_n": 218, "Llama-3.2-1B-Instruct/beam_search": 213,
                     "Llama-3.2-1B-Instruct/dvts": 166, "Qwen2.5-1.5B-Instruct/beam_search": 279,
                     "AceMath-7B-Instruct/dvts": 267}
    text = recipe("Llama-3.2-1B-Instruct/beam_search").read_text()
    assert text.startswith("# refer to src/sal/config.py for more options\n") and text.endswith("seed: 0")


def test_the_table_covers_search_and_learns_config():
    """Every field of search-and-learn's Config (src/sal/config.py) is in the table, once."""
    fields = ("approach model_path gpu_memory_utilization prm_path output_dir num_proc push_to_hub hub_dataset_id "
              "hub_dataset_private overwrite_hub_revision apply_voting dataset_name dataset_config dataset_split "
              "dataset_start dataset_end num_samples system_prompt custom_chat_template n temperature top_p "
              "prm_batch_size search_batch_size seed max_tokens agg_strategy beam_width num_iterations lookahead "
              "filter_duplicates sort_completed").split()
    assert list(SAL_KEYS) == fields and set(SAL_DEFAULTS) <= set(fields)
    assert SAL_SYSTEM_PROMPT.startswith("Solve the following math problem efficiently and clearly:\n\n")


# (method, width, fixed_width, max_step_tokens, max_tokens, max_depth, filter_duplicates, model, prm, no_effect)
EXPECTED = {
    "Llama-3.2-1B-Instruct/best_of_n": ("best_of_n", 4, None, 256, 2048, 2048, False, LLAMA, RLHFLOW,
                                        {"search_batch_size": 25, "sort_completed": True, "filter_duplicates": True}),
    "Llama-3.2-1B-Instruct/beam_search": ("beam", 4, 1, 2048, 40 * 2048, 40, True, LLAMA, RLHFLOW,
                                          {"search_batch_size": 1}),
    "Llama-3.2-1B-Instruct/dvts": ("dvts", 4, 1, 2048, 40 * 2048, 40, False, LLAMA, RLHFLOW,
                                   {"search_batch_size": 25}),
    "Qwen2.5-1.5B-Instruct/beam_search": ("beam", 4, 1, 2048, 40 * 2048, 40, True, "Qwen/Qwen2.5-1.5B-Instruct",
                                          RLHFLOW, {"search_batch_size": 1}),
    "AceMath-7B-Instruct/dvts": ("dvts", 4, 1, 2048, 40 * 2048, 40, False, "nvidia/AceMath-7B-Instruct",
                                 "Qwen/Qwen2.5-Math-PRM-7B", {"search_batch_size": 25}),
}


@pytest.mark.parametrize("name", EXPECTED)
def test_each_recipe_loads_with_every_key_understood(name):
    method, width, fixed, step, tokens, depth, dedup, model, prm, idle = EXPECTED[name]
    c = load_config(recipe(name))
    s = c.search
    assert (s.method, s.width, s.fixed_width, s.max_step_tokens, s.max_tokens, s.max_depth) == (
        method, width, fixed, step, tokens, depth)
    # lookahead 1 (its default) ranks DVTS's candidates; its beam search scores no rollout
    assert (s.temperature, s.top_p, s.seed, s.aggregation) == (0.8, 1.0, 0, "last")
    assert s.lookahead == (1 if method == "dvts" else 0)
    assert (s.filter_duplicates, s.sort_completed, s.answer_markers) == (dedup, False, [])
    assert (c.policy.model, c.reward.model) == (model, prm)
    # the presets by model name see the recipe's models: the PRM's convention comes from prm_path
    assert c.reward.name == {RLHFLOW: "chat_judgement", "Qwen/Qwen2.5-Math-PRM-7B": "token_classification"}[prm]
    # search-and-learn's prompt: its system prompt, the bare problem as the user turn of the
    # model's chat template (custom_chat_template: null, or its Llama 3 default), blank-line steps
    assert (c.policy.system_prompt, c.policy.prompt_template) == (SAL_SYSTEM_PROMPT, "{question}")
    assert (c.policy.chat_template, c.policy.step_delimiter) == (True, "\n\n")
    assert (c.data.hf_name, c.data.hf_split, c.data.limit, c.data.path) == ("HuggingFaceH4/MATH-500", "test", 10, None)
    assert c.no_effect == idle


def test_a_recipe_runs_end_to_end_on_tiny_models(tmp_path, caplog):
    out = tmp_path / "results.jsonl"
    with caplog.at_level(logging.WARNING):
        assert main(["run", "--config", str(recipe("Llama-3.2-1B-Instruct/beam_search")),
                     "--output", str(out), *TINY, "search.lookahead=1"]) == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (record["method"], record["width"]) == ("beam", 4)
    assert record["depth"] <= 2 and record["lookahead_tokens"] > 0   # num_iterations; the rollouts counted
    assert all(len(t["steps"]) <= 2 for t in record["trajectories"])
    notes = [r.getMessage() for r in caplog.records if "has no effect here" in r.getMessage()]
    assert notes == ["search_batch_size: 1 has no effect here (it set the problems of one search-and-learn batch; "
                     "`concurrency` sets the problems searched at once)"]
    made = json.loads((tmp_path / "results.config.json").read_text())
    assert made["compared"]["search.max_step_tokens"] == 4 and made["compared"]["search.fixed_width"] == 1
    assert made["recorded"]["no_effect.search_batch_size"] == 1   # recorded, never compared


def test_check_names_each_key_with_no_effect(tmp_path, capsys):
    out = tmp_path / "never.jsonl"
    assert main(["run", "--config", str(recipe("Llama-3.2-1B-Instruct/best_of_n")), "--output", str(out),
                 "--check", f"data.path={DATA}"]) == 0
    text = capsys.readouterr().out
    assert "method: best_of_n" in text and "width: 4" in text and "hf_name: null" in text
    notes = [line for line in text.splitlines() if "has no effect here" in line]
    assert notes == [
        "# search_batch_size: 25 has no effect here (it set the problems of one search-and-learn batch; "
        "`concurrency` sets the problems searched at once)",
        "# sort_completed: true has no effect here (search-and-learn reads it in beam_search only; "
        "method is best_of_n)",
        "# filter_duplicates: true has no effect here (search-and-learn reads it in beam_search only; "
        "method is best_of_n)",
    ]
    assert "# data: 4 problems" in text and not out.exists()
    # the printed settings are a config (in ets's layout) that loads to the same settings
    again = tmp_path / "resolved.yaml"
    again.write_text(text)
    assert load_config(again).to_dict() == load_config(recipe("Llama-3.2-1B-Instruct/best_of_n"),
                                                       [f"output={out}", f"data.path={DATA}"]).to_dict()


# ---------------------------------------------------------------- the mapping, key by key
def sal(**keys):
    return {"approach": "beam_search", **keys}


def test_max_tokens_means_what_each_approach_reads():
    assert config_from_dict(sal(max_tokens=300, num_iterations=5)).search.max_step_tokens == 300  # a step
    best = config_from_dict({"approach": "best_of_n", "max_tokens": 300}).search               # a solution
    assert (best.max_tokens, best.max_depth, best.max_step_tokens) == (300, 300, 256)
    dvts = config_from_dict({"approach": "dvts", "max_tokens": 300, "num_iterations": 5})
    assert (dvts.search.max_step_tokens, dvts.search.max_tokens) == (2048, 5 * 2048)  # DVTS's fixed 2048
    assert dvts.no_effect == {"max_tokens": 300}


def test_beam_width_is_the_children_of_each_kept_beam():
    assert config_from_dict(sal(n=16, beam_width=4)).search.fixed_width == 4     # 16 // 4 beams kept
    assert config_from_dict({"approach": "dvts", "n": 16, "beam_width": 2}).search.fixed_width == 8  # subtrees
    with pytest.raises(ConfigError, match=r"n: 6 is not a multiple of beam_width \(4\)"):
        config_from_dict({"approach": "dvts", "n": 6})
    with pytest.raises(ConfigError, match="beam_width: 8 is more than n"):
        config_from_dict(sal(n=4, beam_width=8))
    assert config_from_dict({"approach": "best_of_n", "beam_width": 2}).no_effect == {"beam_width": 2}
    # n as resolved: an ets width given over it
    assert config_from_dict(sal(n=4), ["width=16"]).search.fixed_width == 4


def test_data_output_and_template_keys():
    c = config_from_dict(sal(dataset_name="AI-MO/aimo-validation-aime", dataset_split="train", dataset_start=50,
                             dataset_end=100, num_samples=5, output_dir="data/run", custom_chat_template="{{ x }}",
                             system_prompt=None, agg_strategy="prod", lookahead=2, approach="dvts"))
    assert (c.data.hf_name, c.data.hf_split, c.data.start, c.data.end, c.data.limit) == (
        "AI-MO/aimo-validation-aime", "train", 50, 100, 5)
    assert c.output == "data/run/results.50-100.jsonl"          # the output folder, one file per slice
    assert (c.policy.chat_template, c.policy.system_prompt) == ("{{ x }}", None)
    assert (c.search.aggregation, c.search.lookahead) == ("prod", 2)
    # its beam search generates the rollouts but ranks by each candidate's own step
    c = config_from_dict(sal(lookahead=2))
    assert (c.search.lookahead, c.no_effect) == (0, {"lookahead": 2})
    # search-and-learn slices only with both ends
    c = config_from_dict(sal(dataset_start=50))
    assert (c.data.start, c.no_effect) == (None, {"dataset_start": 50})


def test_gpu_memory_utilization_is_vllms():
    c = config_from_dict(sal(gpu_memory_utilization=0.7, policy={"backend": "vllm"}))
    assert c.policy.vllm["gpu_memory_utilization"] == 0.7
    assert config_from_dict(sal(policy={"backend": "vllm"})).policy.vllm == {"gpu_memory_utilization": 0.5}
    c = config_from_dict(sal(gpu_memory_utilization=0.7))
    assert c.policy.vllm == {} and c.no_effect == {"gpu_memory_utilization": 0.7}
    from ets.app.run import inert_keys_notes

    assert inert_keys_notes(c) == ["gpu_memory_utilization: 0.7 has no effect here (it sizes vLLM's share of the "
                                   "GPU; policy.backend is engine, which reads no such setting)"]


def test_every_hub_key_is_named_as_having_no_effect():
    keys = dict(push_to_hub=True, hub_dataset_id="me/x", hub_dataset_private=True, overwrite_hub_revision=True,
                apply_voting=False, num_proc=4, dataset_config="main", prm_batch_size=8, search_batch_size=1)
    c = config_from_dict(sal(**keys))
    assert c.no_effect == keys
    from ets.app.run import inert_keys_notes

    assert len(inert_keys_notes(c)) == len(keys)


# ---------------------------------------------------------------- mixing with ets's keys
def test_the_command_line_wins_over_the_file_in_either_layout():
    path = recipe("Qwen2.5-1.5B-Instruct/beam_search")
    c = load_config(path, ["policy.model=tiny:llama", "width=8", "search.temperature=0.5"])
    assert (c.policy.model, c.search.width, c.search.temperature) == ("tiny:llama", 8, 0.5)
    c = load_config(path, ["n=16", "model_path=tiny:qwen2", "approach=dvts"])
    assert (c.search.width, c.policy.model, c.search.method, c.search.fixed_width) == (16, "tiny:qwen2", "dvts", 4)
    # a search-and-learn key on the command line over an ets key in the file
    c = config_from_dict(sal(search={"width": 4, "method": "beam"}), ["n=8", "approach=dvts"])
    assert (c.search.width, c.search.method) == (8, "dvts")
    # an ets method over the approach: the keys mean what they mean for that method
    c = load_config(path, ["method=rebase"])
    assert c.search.method == "rebase" and c.no_effect == {"filter_duplicates": True, "search_batch_size": 1}


def test_ets_keys_given_beside_agree_or_are_named():
    c = config_from_dict(sal(n=8, width=8, search={"seed": 0}, seed=0))
    assert (c.search.width, c.search.seed) == (8, 0)
    with pytest.raises(ConfigError) as err:
        config_from_dict(sal(n=4, search={"width": 8}))
    assert str(err.value) == ("n (search-and-learn's) and search.width both set search.width in the config, to 4 and "
                              "8; give one of them")
    with pytest.raises(ConfigError, match="model_path .* and policy.model both set policy.model on the command line"):
        load_config(recipe("Llama-3.2-1B-Instruct/dvts"), ["model_path=a", "policy.model=b"])
    # what search-and-learn's code decides without a key gives way to ets's keys
    c = config_from_dict(sal(policy={"prompt_template": "Q: {question}\n"}, search={"max_tokens": 100}))
    assert (c.policy.prompt_template, c.search.max_tokens) == ("Q: {question}\n", 100)


def test_a_data_file_given_replaces_the_default_dataset():
    c = load_config(recipe("Llama-3.2-1B-Instruct/dvts"), [f"data.path={DATA}"])
    assert (c.data.path, c.data.hf_name) == (str(DATA), None)
    c = config_from_dict(sal(data={"path": str(DATA)}), ["dataset_name=some/set"])   # and the other way round
    assert (c.data.path, c.data.hf_name) == (None, "some/set")


@pytest.mark.parametrize("raw, words", [
    (sal(approach="beam"), ["approach: 'beam'", "best_of_n, beam_search, dvts"]),
    (sal(beam_widht=4), ["unknown key 'beam_widht'", "did you mean 'beam_width'"]),
    ({"n": 4, "width": 4, "method": "beam"}, []),   # `n` alone makes it search-and-learn's layout: fine
    ({"method": "beam", "search": {"width": 4}, "beam_width": 2}, []),
    (sal(output_dir=""), ["output_dir", "folder"]),
])
def test_bad_recipe_keys_are_named(raw, words):
    if not words:
        config_from_dict(raw)
        return
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    for w in words:
        assert w in str(err.value)


def test_keys_both_have_leave_an_ets_config_in_its_layout():
    c = config_from_dict({"method": "beam", "lookahead": 1, "temperature": 0.5, "max_tokens": 64})
    assert (c.search.lookahead, c.search.temperature, c.search.max_tokens) == (1, 0.5, 64)
    assert (c.policy.model, c.data.hf_name, c.no_effect) == ("tiny:llama", None, {})  # no search-and-learn defaults


def test_a_search_and_learn_key_in_an_ets_config_says_where_it_belongs():
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs" / "tiny.yaml", ["n=8"])
    assert "'n' is a search-and-learn key" in str(err.value) and "here write search.width" in str(err.value)
