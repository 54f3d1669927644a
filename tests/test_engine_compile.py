"""The compiled forward (ets/engine/compiled.py, `policy.compile`): what `auto` picks, the
row buckets, a bounded number of graphs over a run, and the batch invariance it keeps on
the CPU. (Its logits and greedy tokens against transformers: tests/test_engine_parity.py,
run both eager and compiled.)"""

import gc
import json
import weakref

import pytest
import torch

from ets.app.cli import _compile_lines
from ets.config import ConfigError, PolicyConfig
from ets.engine import Engine, compiled
from ets.models.tiny import build_tiny_model
from tests.helpers import random_tokens, run_cli


def test_policy_compile_takes_auto_on_off():
    assert PolicyConfig().compile == "auto"
    assert PolicyConfig(compile="on").compile == "on"
    # YAML reads a bare on / off as true / false
    assert PolicyConfig(compile=True).compile == "on" and PolicyConfig(compile=False).compile == "off"
    with pytest.raises(ConfigError, match=r"policy.compile: 'yes please' .*auto, on, off"):
        PolicyConfig(compile="yes please")


def test_auto_compiles_on_cuda_only():
    assert compiled.enabled("auto", torch.device("cuda")) and not compiled.enabled("auto", torch.device("cpu"))
    assert compiled.enabled("on", torch.device("cpu")) and not compiled.enabled("off", torch.device("cuda"))
    with pytest.raises(ValueError, match="auto, on or off"):
        compiled.enabled("sometimes", torch.device("cpu"))
    model, tok = build_tiny_model("llama", seed=1)
    assert Engine(model, tok, kv_budget_tokens=64).runner.compiled is None  # auto, on the CPU


def test_buckets_pad_little_and_are_few():
    sizes = [compiled.bucket(n) for n in range(1, 8193)]
    assert all(n <= b <= max(1.5 * n, 2) for n, b in enumerate(sizes, 1))
    assert sizes[:8] == [1, 2, 3, 4, 6, 6, 8, 8]
    assert len(set(sizes)) <= 2 * 13 + 1  # two a power of two up to 8192


def _model(layers: int):
    """A tiny llama of `layers` layers: a shape of its own, so its graphs are compiled
    by the test that uses it, not found already compiled by an earlier one."""
    return build_tiny_model("llama", seed=1, num_hidden_layers=layers)


def test_one_set_of_graphs_serves_every_batch_size():
    """Forwards of many row counts (prefills, chunked and not, decode of 2 to 30
    sequences, hidden states, pooled embeddings), over three rounds of other sizes,
    compile at most five graphs: the rows are a dynamic dimension, and the graphs are
    logits of all rows or of some (dynamo tells the two apart: the kept count equals the
    row count or not), each handing out the final hidden states or not, and hidden
    states. Every greedy token equals the eager engine's."""
    model, tok = _model(3)
    eager = Engine(model, tok, kv_budget_tokens=8192, compile="off")
    engine = Engine(model, tok, kv_budget_tokens=8192, compile="on", max_batch_tokens=256)
    for seed in (0, 7, 13):
        prompts = [random_tokens(n, seed=seed + n) for n in (3, 9, 17, 40, 120, 300)]
        got, want = (e.generate(prompts[: 2 + seed % 5], max_new_tokens=6, temperature=0) for e in (engine, eager))
        assert got == want
        got, want = ([c.token_ids for c in e.expand([(prompts[1], 30 - seed)], max_new_tokens=3, temperature=0,
                                                    embed=True)[0]] for e in (engine, eager))
        assert got == want
        got, want = (e.score(prompts[:3], [[0, 2]] * 3, hidden_states=True) for e in (engine, eager))
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
        assert 1 <= engine.stats()["compiled_graphs"] <= 5
    assert eager.stats()["compiled_graphs"] == 0


def test_a_dropped_compiled_engine_frees_its_model():
    """The graphs a compiled forward leaves in torch's caches hold no reference to the
    model's weights, so a process that builds one engine after another (a sweep) does not
    keep every model it compiled. (inductor's weight freezing would: compiled.py.)"""
    model, tok = _model(5)
    weight = weakref.ref(model.model.layers[0].mlp.up_proj.weight)
    engine = Engine(model, tok, kv_budget_tokens=4096, compile="on")
    engine.generate([random_tokens(n, seed=n) for n in (5, 11)], max_new_tokens=3, temperature=0)
    assert engine.runner.compiled.graphs >= 1
    del engine, model
    gc.collect()
    assert weight() is None


def test_static_shapes_compile_a_graph_per_bucket(monkeypatch):
    """With the rows static (as CUDA graphs want), forwards are padded to `bucket` sizes:
    one graph per bucket met, reused by every forward of its size, and the padding rows
    change no logit."""
    monkeypatch.setattr(compiled, "DYNAMIC", False)
    model, tok = _model(2)
    engine = Engine(model, tok, kv_budget_tokens=4096, compile="on")
    eager = Engine(model, tok, kv_budget_tokens=4096, compile="off")
    assert engine.runner.compiled.rows(17) == 24 and eager.runner._rows(17) == 17
    for lengths in ((17,), (20,), (30,), (19,)):  # 24, 24, 32, 24 rows; one position kept
        seqs = [random_tokens(n, seed=n) for n in lengths]
        got, want = (e.score(seqs, [[n - 1 for n in lengths]]) for e in (engine, eager))
        torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=0)
        engine.evict(), eager.evict()
    assert engine.stats()["compiled_graphs"] == 2


def test_compiled_scores_do_not_depend_on_the_batch():
    """On the CPU the compiled forward keeps the engine's batch invariance
    (invariant.py): a sequence's logits alone and among 40 others, and its greedy tokens
    alone and beside 20 others, bit for bit (the rows are never fewer than MIN_ROWS, and
    the compiled kernels compute a row the same way whatever the row count)."""
    model, tok = build_tiny_model("llama", seed=1)
    target, positions = random_tokens(60, seed=3), [5, 30, 59]
    lengths = torch.randint(5, 120, (40,), generator=torch.Generator().manual_seed(20)).tolist()
    others = [random_tokens(n, seed=21 + i) for i, n in enumerate(lengths)]

    def engine() -> Engine:
        return Engine(model, tok, kv_budget_tokens=1 << 14, compile="on")

    (alone,) = engine().score([target], [positions])
    among = engine().score([target, *others], [positions, *[[len(o) - 1] for o in others]])[0]
    assert torch.equal(among, alone)
    decoded = engine().generate([target], max_new_tokens=10, temperature=0)[0]
    assert engine().generate([target, *others[:20]], max_new_tokens=10, temperature=0)[0] == decoded


def _cannot_compile(gm, example_inputs):
    """A torch.compile backend that fails as a missing compiler or an inductor error does."""
    raise RuntimeError("no compiler for this device\n(details, many lines of them)")


def test_auto_runs_eagerly_where_the_forward_cannot_be_compiled(monkeypatch, caplog):
    """compile="auto" (here made to compile on the CPU) on a device where compiling fails:
    the engine says why, once, and runs eagerly from that first forward on, with the
    eager engine's tokens; "on" raises, naming the cause and the setting that avoids it."""
    monkeypatch.setattr(compiled, "enabled", lambda mode, device: mode in ("auto", "on"))
    monkeypatch.setattr(compiled, "BACKEND", _cannot_compile)
    model, tok = _model(2)
    prompts = [random_tokens(n, seed=n) for n in (5, 11, 23)]
    want = Engine(model, tok, kv_budget_tokens=4096, compile="off").generate(prompts, max_new_tokens=6, temperature=0)
    engine = Engine(model, tok, kv_budget_tokens=4096, compile="auto")
    assert engine.runner.compiled is not None
    with caplog.at_level("WARNING", logger="ets.engine.runner"):
        assert engine.generate(prompts, max_new_tokens=6, temperature=0) == want
        assert engine.generate(prompts[:1], max_new_tokens=6, temperature=0) == want[:1]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "RuntimeError: no compiler for this device" in warned[0]
    assert "policy.compile: off" in warned[0]
    assert engine.stats()["compile_failed"] == 1 and engine.stats()["compiled_graphs"] == 0
    engine.check()
    with pytest.raises(RuntimeError, match=r"compile=on: .*\(RuntimeError: no compiler for this device\); "
                                           r"set policy.compile: off"):
        Engine(model, tok, kv_budget_tokens=4096, compile="on").generate(prompts, max_new_tokens=6, temperature=0)


def _fails_at_call(n: int):
    """A torch.compile backend whose graph runs as traced but fails at its nth call
    between the first layer's attention and the second's, as a CUDA graph of the piece
    between them can fail to record: that forward has written the first layer's K/V and
    moved its kept decode buffers on, the other layers' not."""
    calls = []

    def midway(out):
        if len(calls) == n:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return out

    def backend(gm, example_inputs):
        first = next(node for node in gm.graph.nodes if "paged_attention" in str(node.target))
        with gm.graph.inserting_after(first):
            checked = gm.graph.call_function(midway, (first,))
        first.replace_all_uses_with(checked, delete_user_cb=lambda user: user is not checked)
        gm.recompile()

        def run(*args):
            calls.append(n)
            return gm(*args)
        return run
    return backend


def _expansions(engine: Engine, prompts: list[list[int]]) -> list[list[list[int]]]:
    """Per prompt, 3 siblings (cascade decode) and a single path (plain decode); the second
    prompt's end 5 tokens before the others', so the kept buffers of both kinds are
    reused, then compacted in the middle."""
    tickets = [engine.submit([(prompts[i], 3, i), (prompts[i + 3][:-1], 1, 9 + i)], max_new_tokens=n,
                             temperature=0.9, ignore_eos=True) for i, n in enumerate((9, 4, 9))]
    while not all(t.done for t in tickets):
        engine.step()
    return [[c.token_ids for c in conts] for t in tickets for conts in engine.collect(t)]


@pytest.mark.parametrize("fails_at", [2, 3, 6])
def test_auto_runs_eagerly_where_a_compiled_forward_fails_after_some_layers_ran(monkeypatch, caplog, fails_at):
    """A compiled forward that fails midway, its K/V written and kept buffers moved on
    (a CUDA graph that cannot be recorded): under compile="auto" that forward runs again
    eagerly, packed afresh, and so does every one after it; the sampled tokens are the
    eager engine's. (Failing at forward 6, the compaction: without the fresh packing, the
    first layer's kept buffers would be compacted twice.)"""
    monkeypatch.setattr(compiled, "enabled", lambda mode, device: mode in ("auto", "on"))
    model, tok = _model(2)
    prompts = [random_tokens(n, seed=n) for n in (6, 12, 19, 9, 15, 7)]
    want = _expansions(Engine(model, tok, kv_budget_tokens=4096, compile="off"), prompts)
    monkeypatch.setattr(compiled, "BACKEND", _fails_at_call(fails_at))
    torch._dynamo.reset()  # a graph of this model's shapes compiled by the backend above, not found cached
    engine = Engine(model, tok, kv_budget_tokens=4096, compile="auto")
    with caplog.at_level("WARNING", logger="ets.engine.runner"):
        assert _expansions(engine, prompts) == want
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "operation not permitted when stream is capturing" in warned[0]
    assert engine.stats()["compile_failed"] == 1
    engine.check()


def test_an_error_of_the_attention_op_is_not_a_compile_failure(monkeypatch):
    """An error raised by the attention op inside a compiled forward (an eager forward
    would raise it too) reaches the caller as it is: no fallback, no warning."""
    monkeypatch.setattr(compiled, "enabled", lambda mode, device: mode in ("auto", "on"))
    monkeypatch.setattr(compiled, "BACKEND", lambda gm, example_inputs: gm.forward)

    def broken(*args):
        raise IndexError("a slot past the pool")

    model, tok = _model(2)
    engine = Engine(model, tok, kv_budget_tokens=4096, compile="auto")
    monkeypatch.setattr(compiled.attention, "attend", broken)
    with pytest.raises(IndexError, match="a slot past the pool"):
        engine.generate([random_tokens(5, seed=5)], max_new_tokens=2, temperature=0)
    assert not engine.stats()["compile_failed"]


def test_the_cuda_graph_forward_runs_its_host_side_on_the_cpu(monkeypatch):
    """The compiled forward as CUDA gets it (compiled.cudagraph_options: the graph
    partitioned at the attention op, rows padded to buckets, each step marked, outputs
    copied out), run on the CPU, where inductor partitions the graph but records no CUDA
    graph: its tokens and scores are the eager engine's, and the engine counts the graphs
    that ran without CUDA graphs."""
    cuda_options = compiled.cudagraph_options(torch.device("cuda"))  # (worked out from torch's config: no GPU needed)
    assert cuda_options["graph_partition"] and cuda_options["triton.cudagraphs"]
    monkeypatch.setattr(compiled, "cudagraph_options", lambda device: cuda_options)
    model, tok = _model(4)
    engine = Engine(model, tok, kv_budget_tokens=4096, compile="on")
    eager = Engine(model, tok, kv_budget_tokens=4096, compile="off")
    assert engine.runner.compiled.cudagraphs and engine.runner.compiled.rows(5) == 6
    prompts = [random_tokens(n, seed=n) for n in (4, 13, 29)]
    got, want = (e.generate(prompts, max_new_tokens=8, temperature=0) for e in (engine, eager))
    assert got == want
    got, want = (e.score(prompts, [[n - 1] for n in (4, 13, 29)], hidden_states=True) for e in (engine, eager))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    assert engine.stats()["compiled_graphs"] >= 1
    assert engine.stats()["cudagraph_skips"] >= engine.stats()["compiled_graphs"]  # none recorded on the CPU
    assert eager.stats()["cudagraph_skips"] == 0


def test_on_cuda_only_decode_sized_forwards_are_padded_and_graphed(monkeypatch):
    """With CUDA's options (run on the CPU, as above), forwards of up to
    CUDAGRAPH_MAX_ROWS rows are padded to buckets and run the graphed functions; larger
    ones (here the prefills) run the plain compiled ones, unpadded. Tokens: eager's."""
    cuda_options = compiled.cudagraph_options(torch.device("cuda"))
    monkeypatch.setattr(compiled, "cudagraph_options", lambda device: cuda_options)
    monkeypatch.setattr(compiled, "CUDAGRAPH_MAX_ROWS", 16)
    model, tok = _model(3)
    engine = Engine(model, tok, kv_budget_tokens=4096, compile="on")
    eager = Engine(model, tok, kv_budget_tokens=4096, compile="off")
    cm = engine.runner.compiled
    assert cm.rows(5) == 6 and cm.rows(15) == 16 and cm.rows(17) == 17 and cm.rows(40) == 40
    rows = {"graphed": [], "plain": []}

    def recording(kind, fn):
        def call(model, input_ids, *args):
            rows[kind].append(input_ids.shape[1])
            return fn(model, input_ids, *args)
        return call

    cm._logits, cm._logits_graphed = recording("plain", cm._logits), recording("graphed", cm._logits_graphed)
    prompts = [random_tokens(n, seed=n) for n in (9, 21, 30)]
    got, want = (e.generate(prompts, max_new_tokens=5, temperature=0) for e in (engine, eager))
    assert got == want
    assert rows["plain"] and all(r > 16 for r in rows["plain"])      # the prefills, as they are
    assert rows["graphed"] and all(r == compiled.bucket(r) <= 16 for r in rows["graphed"])  # decode, padded
    assert engine.stats()["cudagraph_skips"] >= 1  # the graphed graphs, on the CPU


def test_a_prms_own_engine_compiles_as_its_option_says():
    """`reward.options.compile` is the PRM's own engine's `policy.compile`: auto (eager on
    the CPU), on, off; its scores compiled are the eager ones within 1e-4."""
    from ets.api import build_reward
    from ets.config import load_config
    from ets.policy.build import build_policy
    from ets.rewards.options import parse_options
    from ets.rewards.step_tag import StepTagOptions
    from tests.helpers import TINY

    scores = {}
    for mode in ("auto", "on", "off"):
        config = load_config(TINY, ["policy.backend=engine", "reward.options.backend=engine",
                                    f"reward.options.compile={mode}"])
        reward = build_reward(config, build_policy(config.policy, config.search))
        assert (reward.backend.engine.runner.compiled is not None) == (mode == "on")
        [per_path] = reward.score(["What is 2 + 3?"], [[["2 + 3 = 5", "The answer is 5"], ["2 + 3 = 6"]]])
        scores[mode] = [s for path in per_path for s in path]
    torch.testing.assert_close(torch.tensor(scores["on"]), torch.tensor(scores["off"]), atol=1e-4, rtol=0)
    assert scores["auto"] == scores["off"]
    assert parse_options(StepTagOptions, {"compile": True}, "step_tag").compile == "on"  # YAML's bare on
    with pytest.raises(ConfigError, match="option 'compile' = 'sometimes' is not allowed; choose one of: auto, on, off"):
        parse_options(StepTagOptions, {"compile": "sometimes"}, "step_tag")


def test_the_run_line_says_when_cuda_graphs_were_skipped():
    stats = {"compiled_graphs": 2, "steps": 1452, "compile_seconds": 61.04}
    [line] = _compile_lines({"policy_stats": stats})
    assert line == "policy forward compiled: 2 graphs over 1,452 forwards, 61.0 s in the forwards that compiled them"
    [line] = _compile_lines({"policy_stats": {**stats, "cudagraph_skips": 1}})
    assert line.endswith("compiled them; CUDA graphs skipped 1 time, those forwards ran as plain compiled kernels "
                         "(TORCH_LOGS=cudagraphs says why)")


def test_a_run_says_what_compiling_cost_and_auto_finishes_eagerly_where_it_cannot_compile(monkeypatch, tmp_path,
                                                                                          capsys):
    """`ets run` with the forward compiled ends with a line of its graphs and compile time;
    with compile auto where the forward cannot be compiled, the run finishes eagerly, says
    so, and writes the records of an eager run."""
    small = ["policy.backend=engine", "data.limit=2", "width=2", "max_depth=2"]
    torch._dynamo.reset()  # as in a fresh process: no graph of an earlier test's model to reuse
    assert run_cli(*small, "policy.compile=on", f"output={tmp_path / 'on.jsonl'}") == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if "forward compiled" in x]
    assert line.startswith("policy forward compiled: 1 graph over ") and "s in the forwards that compiled them" in line

    def records(name: str) -> list[dict]:
        rows = [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]
        return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]

    # eager on torch's linears, as a compiled engine's are when it falls back
    assert run_cli(*small, "policy.compile=off", "policy.prepack=off", f"output={tmp_path / 'off.jsonl'}") == 0
    capsys.readouterr()
    monkeypatch.setattr(compiled, "enabled", lambda mode, device: mode in ("auto", "on"))
    monkeypatch.setattr(compiled, "BACKEND", _cannot_compile)
    assert run_cli(*small, "policy.compile=auto", f"output={tmp_path / 'auto.jsonl'}") == 0
    assert "policy forward: compiled, it failed and ran eagerly" in capsys.readouterr().out
    assert records("auto.jsonl") == records("off.jsonl")
