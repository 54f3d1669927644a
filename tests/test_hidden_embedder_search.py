"""ETS with `search.embedder: policy` and `prm`: it clusters the steps' hidden-state
embeddings, searches the demo with them, says what they cost, refuses what cannot hand
them out, and asks for a cut calibrated for them (scripts/calibrate_cluster_cut.py)."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ets.app.embedding_cost import embedding_line
from ets.app.output import config_path
from ets.app.provenance import describe
from ets.app.run import run
from ets.config import ConfigError, PolicyConfig, RunConfig, SearchConfig, load_config
from ets.data import Problem
from ets.engine import Engine
from ets.loop.controller import search
from ets.models.tiny import build_tiny_model
from ets.policy.engine import EnginePolicy
from ets.tree import SearchTree
from ets.strategies import Frontier, build
from tests.helpers import load_script, one_line_error, run_cli

DEMO = Path(__file__).resolve().parents[1] / "ets" / "demo" / "demo.yaml"


def ets_frontier(vectors) -> tuple[object, Frontier]:
    """ETS (lambda_s 3) and a frontier of four distinctly worded candidates, each carrying
    its row of `vectors` as its hidden-state embedding."""
    ets = build(SearchConfig(method="ets", width=8, embedder="policy", cluster_threshold=0.1, lambda_s=3.0))
    tree = SearchTree("Q", list(range(10)))
    candidates = []
    for i, (score, vector) in enumerate(zip([0.9, 0.8, 0.3, 0.2], vectors)):
        child = tree.add_child(tree.root, f"step {i}", [1] * 20)
        child.score, child.embedding = score, vector
        candidates.append(child)
    return ets, Frontier(tree, candidates, [], 8, 8, 1, Counter())


def test_ets_clusters_the_candidates_own_embeddings():
    apart = np.eye(4, dtype=np.float32)
    ets, frontier = ets_frontier(apart)               # four clusters: coverage keeps all four
    assert ets.step_embeddings() == "policy"
    ets.select(frontier)
    assert frontier.metrics["lp_kept"] == 4
    ets, frontier = ets_frontier([apart[0]] * 4)      # one cluster, whatever the texts say
    ets.select(frontier)
    assert frontier.metrics["lp_kept"] == 2 and frontier.metrics["lp_pruned"] == 2
    assert ets._clusterer is None                     # no sentence model was made
    ets, frontier = ets_frontier([apart[0], None, apart[1], apart[2]])
    with pytest.raises(RuntimeError, match=r"candidates \[2\] carry no embedding"):
        ets.select(frontier)


@pytest.mark.parametrize("embedder, producer, other", [("policy", "policy_stats", "reward_stats"),
                                                      ("prm", "reward_stats", "policy_stats")])
def test_ets_searches_the_demo_on_hidden_state_embeddings(tmp_path, embedder, producer, other):
    output = tmp_path / "results.jsonl"
    config = load_config(str(DEMO), ["method=ets", "width=4", "data.limit=3", f"embedder={embedder}",
                                     "cluster_threshold=0.03", f"output={output}", "concurrency=3"])
    summary = run(config, show_progress=False)
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == 3 and all(r["method"] == "ets" for r in records)
    assert sum(r["strategy_metrics"].get("lp_solves", 0) for r in records) > 0
    made = json.loads(config_path(output).read_text())["compared"]
    assert made["search.embedder"] == embedder and made["search.cluster_threshold"] == 0.03
    cost = summary["embedding"]
    assert cost["embedder"] == embedder and "no extra forward" in cost["source"]
    # every new step is embedded by its producer, and by nothing else
    assert cost["steps"] == summary[producer]["embedded_steps"] > 0 and cost["seconds"] > 0
    assert summary[other]["embedded_steps"] == 0
    assert "sentence" not in json.dumps(summary["strategy_metrics"]) and "embed_seconds" not in summary["strategy_metrics"]


def test_the_run_says_what_embedding_cost_for_every_embedder(tmp_path, capsys):
    """The tiny config (the hf policy): the hidden states against MiniLM, one line each."""
    for embedder in ("policy", "all-MiniLM-L6-v2"):
        code = run_cli("method=ets", f"embedder={embedder}", "cluster_threshold=0.05", "data.limit=2",
                       f"output={tmp_path / embedder / 'r.jsonl'}")
        out = capsys.readouterr().out
        assert code == 0
        line = next(line for line in out.splitlines() if line.startswith("embeddings: "))
        summary = json.loads((tmp_path / embedder / "r.summary.json").read_text())
        assert line == embedding_line(summary)
        assert summary["embedding"]["steps"] > 0
        source = "the policy's hidden states" if embedder == "policy" else "a sentence model"
        assert line.startswith(f"embeddings: {embedder} ({source}") and " steps in " in line


def test_a_run_that_clusters_nothing_has_no_embedding_cost(tmp_path):
    summary = run(load_config(str(DEMO), ["method=rebase", "width=2", "data.limit=1", "embedder=policy",
                                          f"output={tmp_path / 'r.jsonl'}"]), show_progress=False)
    assert "embedding" not in summary and embedding_line(summary) is None


def test_vllm_cannot_hand_out_the_policys_hidden_states(tmp_path, capsys):
    with pytest.raises(ConfigError, match="vLLM does not hand out.*embedder: prm"):
        RunConfig(search=SearchConfig(method="ets", embedder="policy", cluster_threshold=0.05),
                  policy=PolicyConfig(backend="vllm"))
    code = run_cli("policy.backend=vllm", "method=ets", "embedder=policy", "cluster_threshold=0.05",
                   f"output={tmp_path / 'r.jsonl'}")
    assert "search.embedder: policy" in one_line_error(capsys, code)
    # a sentence embedder, or another method, does not read the policy's states
    RunConfig(search=SearchConfig(method="rebase", embedder="policy"), policy=PolicyConfig(backend="vllm"))


class OwnPolicy:
    """A user's own policy, written to the Policy protocol without step embeddings."""

    def __init__(self, inner):
        self._inner = inner
        self.tokenizer, self.context_tokens = inner.tokenizer, inner.context_tokens
        for name in ("format_prompt", "expand", "release", "memory", "stats"):
            setattr(self, name, getattr(inner, name))


def text_score(questions, trajectories):
    return [[[0.5 for _ in steps] for steps in trajs] for trajs in trajectories]


def test_a_policy_or_reward_without_hidden_states_is_refused_before_the_search():
    model, tok = build_tiny_model("llama", seed=1)
    config = SearchConfig(method="ets", width=2, max_step_tokens=4, max_depth=2, embedder="policy",
                          cluster_threshold=0.05)
    engine_policy = EnginePolicy(Engine(model, tok, kv_budget_tokens=2048), PolicyConfig(step_delimiter="a"), config)
    problems = [Problem("0", "What is 1 + 1?", "2", {})]
    with pytest.raises(ConfigError, match="the policy OwnPolicy does not hand out; use embedder: prm"):
        search(problems, OwnPolicy(engine_policy), text_score, config)
    prm_config = dataclasses.replace(config, embedder="prm")
    with pytest.raises(ConfigError, match="reward 'text_score' does not hand out; use embedder: policy"):
        search(problems, engine_policy, text_score, prm_config)
    assert len(search(problems, engine_policy, text_score, config)) == 1    # the engine does hand them out


def test_hidden_state_embedders_need_a_cut_of_their_own():
    assert SearchConfig().cluster_threshold == 0.05                        # a sentence model: the paper's cut
    assert SearchConfig(embedder="static:all-MiniLM-L6-v2").cluster_threshold == 0.05
    with pytest.raises(ConfigError, match=r"embedder 'policy' has no default cut .*calibrate_cluster_cut.py"):
        SearchConfig(method="ets", embedder="policy")
    assert SearchConfig(method="rebase", embedder="prm").cluster_threshold is None   # nothing clusters
    assert SearchConfig(method="ets", embedder="prm", lambda_s=0).cluster_threshold is None
    # one config holds each embedder's cut; the embedder picks its own
    cuts = {"static:all-MiniLM-L6-v2": 0.1, "policy": 0.03}
    assert SearchConfig(method="ets", embedder="policy", cluster_threshold=cuts).cluster_threshold == 0.03
    assert SearchConfig(method="ets", embedder="static:all-MiniLM-L6-v2", cluster_threshold=cuts).cluster_threshold == 0.1
    assert SearchConfig(method="ets", embedder="all-MiniLM-L6-v2", cluster_threshold=cuts).cluster_threshold == 0.05
    with pytest.raises(ConfigError, match=r"it gives cuts for 'static:all-MiniLM-L6-v2', 'policy' only"):
        SearchConfig(method="ets", embedder="prm", cluster_threshold=cuts)
    with pytest.raises(ConfigError, match="cluster_threshold.policy: -1 must be a number >= 0"):
        SearchConfig(method="ets", embedder="policy", cluster_threshold={"policy": -1})
    # what a run records is the cut it used (as before the mapping, for a sentence model)
    assert describe(RunConfig())["compared"]["search.cluster_threshold"] == 0.05


def test_the_calibration_measures_the_hidden_state_embedders(capsys):
    script = load_script("calibrate_cluster_cut")
    script.main(["--problems", "1", "--wordings", "2", "--embedder", "policy", "--embedder", "prm"])
    out = capsys.readouterr().out
    for name in ("policy", "prm"):
        block = out[out.index(f"{name}, 1 problems"):]
        assert "different quantities:" in block and "one number wrong (spoiled):" in block
        assert f"cluster_threshold: {{{name}: " in block or "suggested cut: none" in block
