"""A decode forward of the same sequences one token further moves the last forward's
packing and attention metadata on (runner.ModelRunner._advance) instead of planning it
afresh: the same tokens, bit for bit, and most forwards of a long decode."""

import pytest
import torch

from ets.engine import Engine
from ets.models.tiny import build_tiny_model, build_tokenizer, tiny_config
from tests.helpers import random_tokens


@pytest.fixture(scope="module", params=["llama", "sliding window"])
def model_tok(request):
    """A tiny Llama; a tiny Mistral whose layers attend the last 8 positions (they gather
    each context afresh at every step, from the group's slot rows)."""
    if request.param == "llama":
        return build_tiny_model("llama", seed=1)
    from transformers import AutoModelForCausalLM

    tok = build_tokenizer()
    torch.manual_seed(0)
    config = tiny_config("mistral", vocab_size=len(tok), sliding_window=8, eos_token_id=tok.eos_token_id)
    return AutoModelForCausalLM.from_config(config).eval(), tok


def _expand(model, tok, advance: bool, embed: bool = False, pool: int = 4096):
    """Paths alone (plain decode) and with siblings (the cascade), short and long (rows
    past their columns: rebuilds and growths), sampled, some stopping early (their rows
    compacted away): the continuations and the engine's stats."""
    engine = Engine(model, tok, kv_budget_tokens=pool, advance=advance)
    prompts = [random_tokens(n, seed=60 + n) for n in (5, 30, 120, 11, 140)]
    requests = list(zip(prompts, [1, 1, 3, 4, 2]))
    outs = engine.expand(requests, max_new_tokens=40, temperature=1.0, seed=3, stop=[7, 11], ignore_eos=True,
                         embed=embed)
    engine.check()
    return outs, engine.stats()


@pytest.mark.parametrize("embed", [False, True])
def test_advanced_forwards_decode_the_same_tokens(model_tok, embed):
    model, tok = model_tok
    planned, planned_stats = _expand(model, tok, advance=False, embed=embed)
    advanced, stats = _expand(model, tok, advance=True, embed=embed)
    assert [[c.token_ids for c in g] for g in advanced] == [[c.token_ids for c in g] for g in planned]
    assert {c.finish for g in advanced for c in g} == {"stop", "length"}  # some stopped early
    if embed:  # pooled from the same forwards' hidden states
        assert all(a.embedding.equal(p.embedding) for ga, gp in zip(advanced, planned) for a, p in zip(ga, gp))
    assert planned_stats["advanced_steps"] == 0 and stats["steps"] == planned_stats["steps"]
    assert stats["advanced_steps"] > stats["steps"] // 2


@pytest.mark.parametrize("pool", [300, 400, 500])
def test_a_pool_too_small_to_keep_the_decode_buffers_decodes_the_same_tokens(model_tok, pool):
    """In a pool nearly full of live tokens, the decode groups' buffers are not kept per
    layer (workspace.DecodeGroups.keep): every layer gathers its contexts from the pool,
    at slots that must include the tokens decoded since the group was built. Sequences
    are evicted and preempted too; the tokens are those of a pool that holds everything."""
    model, tok = model_tok
    roomy, _ = _expand(model, tok, advance=False)
    tight, stats = _expand(model, tok, advance=True, pool=pool)
    assert [[c.token_ids for c in g] for g in tight] == [[c.token_ids for c in g] for g in roomy]
    assert stats["evicted_tokens"] > 0 and stats["advanced_steps"] > 0


def _search(model, tok, pool: int, rounds: int = 8, keep: int = 3, samples: int = 3) -> list[list[list[int]]]:
    """A beam-like search on the engine alone: each round every kept path of 3 problems
    is expanded into `samples` sampled steps, the old handles released, and each
    problem's `keep` longest paths kept (the rest released). Its kept paths."""
    engine = Engine(model, tok, kv_budget_tokens=pool)
    live = [[(random_tokens(n, seed=70 + n), None)] for n in (40, 90, 25)]
    for r in range(rounds):
        requests = [(path, samples) for paths in live for path, _ in paths]
        owners = [q for q, paths in enumerate(live) for _ in paths]
        outs = engine.expand(requests, max_new_tokens=12, temperature=1.0, seed=r, stop=[7], ignore_eos=True)
        engine.release([h for paths in live for _, h in paths if h is not None])
        grown = [[] for _ in live]
        for (path, _), q, continuations in zip(requests, owners, outs):
            grown[q] += [(path + list(c.token_ids), c.handle) for c in continuations]
        for paths in grown:
            paths.sort(key=lambda x: (-len(x[0]), x[0]))
            engine.release([h for _, h in paths[keep:]])
            del paths[keep:]
        live = grown
        engine.check()
    return [[path for path, _ in paths] for paths in live]


@pytest.mark.parametrize("pool", [300, 800])
def test_a_search_in_a_tight_pool_keeps_the_paths_of_a_roomy_one(model_tok, pool):
    """Round after round of sibling samples (the cascade) in a pool that evicts, preempts
    and spills (300) or only evicts (800): the same paths as in a pool that holds all."""
    model, tok = model_tok
    assert _search(model, tok, pool) == _search(model, tok, 1 << 16)


def test_expansions_in_flight_together_decode_the_same_tokens(model_tok):
    """Submitted expansions under different settings (greedy, sampled, stop strings) share
    their forwards: a decode run samples and stops each call's rows by its own rule."""
    model, tok = model_tok

    def decode(advance: bool):
        engine = Engine(model, tok, kv_budget_tokens=4096, advance=advance)
        calls = [dict(temperature=0, max_new_tokens=30), dict(temperature=1.0, seed=5, max_new_tokens=40, stop=[7, 11, 13]),
                 dict(temperature=0.8, top_k=20, seed=6, max_new_tokens=35, stop=["a", "e", " "], embed=True)]
        tickets = [engine.submit([(random_tokens(n, seed=n), 3)], ignore_eos=True, **kw)
                   for n, kw in zip((9, 40, 21), calls)]
        while not all(t.done for t in tickets):
            engine.step()
        outs = [engine.collect(t) for t in tickets]
        engine.check()
        return outs, engine.stats()

    planned, planned_stats = decode(False)
    advanced, stats = decode(True)
    assert [[[c.token_ids for c in g] for g in o] for o in advanced] == [[[c.token_ids for c in g] for g in o] for o in planned]
    assert all(a.embedding.equal(p.embedding) for a, p in zip(advanced[2][0], planned[2][0]))
    assert {c.finish for o in advanced for g in o for c in g} >= {"stop", "length"}
    assert stats["advanced_steps"] > stats["steps"] // 2
