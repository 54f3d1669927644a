"""The engine computes what the model computes: logits, hidden states, greedy tokens.

ETS_TEST_DEVICE=cuda runs them on a GPU (scripts/gpu_check.sh); the default is the CPU.
ETS_TEST_COMPILE picks the forwards (compile_mode below)."""

import os

import pytest
import torch

from ets.engine import Engine
from ets.models.tiny import ARCHS, build_tiny_model
from tests.helpers import cluster_table, random_tokens

TOL = 1e-4
DEVICE = os.environ.get("ETS_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module", params=ARCHS)
def model_tok(request):
    model, tok = build_tiny_model(request.param, seed=1)
    return model.to(DEVICE), tok


@pytest.fixture(params=os.environ.get("ETS_TEST_COMPILE", "off,on").split(","))
def compile_mode(request):
    """Each test below runs on the eager forward and on the compiled one (compiled.py): the
    same tolerances, the same greedy tokens. ETS_TEST_COMPILE=off (or on) runs one of them
    (scripts/gpu_check.sh: compiling on a GPU takes most of a part's time)."""
    return request.param


def _t(tokens: list[int]) -> torch.Tensor:
    """A [1, T] batch on the test device."""
    return torch.tensor([tokens], device=DEVICE)


def _greedy(model, prompt: list[int], n: int) -> list[int]:
    """transformers' own greedy continuation of `prompt`."""
    ids = _t(prompt)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


@torch.no_grad()
def _reference(model, tokens: list[int]) -> torch.Tensor:
    return model(_t(tokens)).logits[0]


def test_single_and_packed_logits(model_tok, compile_mode):
    model, tok = model_tok
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=512)
    seqs = [random_tokens(n, seed=n) for n in (1, 13, 40, 7)]
    for s in seqs[:1]:  # one sequence alone
        (out,) = engine.score([s], [list(range(len(s)))])
        engine.check()
        torch.testing.assert_close(out, _reference(model, s), atol=TOL, rtol=0)
    engine.evict()
    outs = engine.score(seqs, [list(range(len(s))) for s in seqs])  # packed, different lengths
    engine.check()
    for s, out in zip(seqs, outs):
        torch.testing.assert_close(out, _reference(model, s), atol=TOL, rtol=0)


def test_resume_from_cached_prefix(model_tok, compile_mode):
    model, tok = model_tok
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=512)
    prefix = random_tokens(30, seed=3)
    engine.score([prefix], [[29]])
    engine.check()
    longer = [prefix + random_tokens(9, seed=4), prefix[:20] + random_tokens(5, seed=5)]  # full and partial hit
    positions = [list(range(30, 39)), list(range(20, 25))]
    outs = engine.score(longer, positions)
    engine.check()
    assert engine.stats()["cache_hit_tokens"] == 30 + 20
    for s, pos, out in zip(longer, positions, outs):
        torch.testing.assert_close(out, _reference(model, s)[pos], atol=TOL, rtol=0)


def test_chunked_prefill_and_hidden_states(model_tok, compile_mode):
    model, tok = model_tok
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=512, max_batch_tokens=7)
    seqs = [random_tokens(25, seed=6), random_tokens(11, seed=7)]
    positions = [[24, 3, 10, 3], [0, 10]]  # any order, repeats allowed
    hidden = engine.score(seqs, positions, hidden_states=True)
    engine.check()
    for s, pos, out in zip(seqs, positions, hidden):
        ref = model.base_model(_t(s)).last_hidden_state[0]
        torch.testing.assert_close(out, ref[pos], atol=TOL, rtol=0)


def test_greedy_generate_matches_transformers(model_tok, compile_mode):
    model, tok = model_tok
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=1024)
    base = random_tokens(12, seed=8)
    prompts = [base + random_tokens(5, seed=9), base, random_tokens(3, seed=10)]  # shared prefix, lengths differ
    outs = engine.generate(prompts, max_new_tokens=16, temperature=0)
    engine.check()
    for prompt, out in zip(prompts, outs):
        assert out == _greedy(model, prompt, 16)
    # again, now from the cache: same tokens
    assert engine.generate(prompts, max_new_tokens=16, temperature=0) == outs
    assert engine.stats()["cache_hit_tokens"] > 0
    engine.check()


@pytest.mark.parametrize("cascade", [True, False])
def test_shared_prefix_decode_matches_transformers(model_tok, monkeypatch, cascade, compile_mode):
    """Samples of one path decode with cascade attention (the path read once), or, with
    the engine's cascade off, each over its whole context plainly: greedy tokens equal
    transformers' either way."""
    from ets.engine import cascade as cascade_module

    built = []
    real = cascade_module.build
    monkeypatch.setattr(cascade_module, "build", lambda *a, **k: built.append(1) or real(*a, **k))
    model, tok = model_tok
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=1024, cascade=cascade)
    prompts = [random_tokens(20, seed=11), random_tokens(7, seed=12)]
    conts = engine.expand([(prompts[0], 3), (prompts[1], 2)], max_new_tokens=10, temperature=0)
    engine.check()
    for prompt, group in zip(prompts, conts):
        assert [c.token_ids for c in group] == [_greedy(model, prompt, 10)] * len(group)
    # continue every sample by one more expansion: clusters now sit deeper in the tree
    paths = [p + c.token_ids for p, group in zip(prompts, conts) for c in group]
    more = engine.expand([(p, 2) for p in paths], max_new_tokens=4, temperature=0)
    engine.check()
    for p, group in zip(paths, more):
        ref = _greedy(model, p, 4)
        assert [c.token_ids for c in group] == [ref, ref]
    assert bool(built) == cascade


@pytest.mark.parametrize("shared", [False, True])
def test_kept_decode_buffers_follow_the_group(model_tok, shared, compile_mode):
    """Decode reuses its gathered contexts while the group is the same sequences one step
    further (workspace.DecodeKV), and rebuilds when one finishes or a row runs past the
    buffers' headroom: every token still equals transformers' greedy choice."""
    model, tok = model_tok
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=2048)
    prompts = [random_tokens(9, seed=20), random_tokens(4, seed=21), random_tokens(15, seed=22)]
    refs = [_greedy(model, p, 40) for p in prompts]  # 40 new tokens: past the headroom (16)
    stop = refs[1][6]  # the second prompt stops early at this token (the group changes)
    outs = engine.expand([(p, 2 if shared else 1) for p in prompts], max_new_tokens=40, temperature=0,
                         stop=[stop], ignore_eos=True)
    engine.check()
    for ref, group in zip(refs, outs):
        cut = ref[: ref.index(stop) + 1] if stop in ref else ref
        assert [c.token_ids for c in group] == [cut] * len(group)


def test_cascade_gathers_its_prefixes_once_while_its_samples_grow(model_tok, monkeypatch, compile_mode):
    """Samples decoding past their buffers' columns (twice in 40 tokens) gather only their
    own columns anew, wider: the prefixes, unchanged, are gathered by the first forward
    alone (once per layer), and every token still equals transformers' greedy choice."""
    from ets.engine import cascade

    model, tok = model_tok
    prefix_gathers = []
    real_take_keys = cascade.take_keys
    monkeypatch.setattr(cascade, "take_keys", lambda *a: prefix_gathers.append(1) or real_take_keys(*a))
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=2048)
    prompts = [random_tokens(9, seed=20), random_tokens(15, seed=22)]
    outs = engine.expand([(p, 2) for p in prompts], max_new_tokens=40, temperature=0, ignore_eos=True)
    engine.check()
    for prompt, group in zip(prompts, outs):
        assert [c.token_ids for c in group] == [_greedy(model, prompt, 40)] * 2
    assert len(prefix_gathers) == model.config.num_hidden_layers


def test_decode_groups_keep_their_buffers_apart(model_tok, monkeypatch, compile_mode):
    """Decode cut into several groups of each kind (ets/engine/groups.py; every cut taken
    here), their kept buffers side by side in shared arenas: short and long paths, alone and
    with siblings, some stopping early (their rows compacted away), all running past their
    columns (rebuilds; the cascade's growths). Every token equals transformers' greedy
    choice, and forwards did reuse several groups' buffers at once."""
    from ets.engine import groups
    from ets.engine.runner import ModelRunner

    monkeypatch.setattr(groups, "DECODE_SPLIT_MIN_SCORES", 0)
    seen = []  # per forward and kind: (groups, how many reused their buffers)
    real, real_advance = ModelRunner._decode_groups, ModelRunner._advance

    def recording(runner, chunks, shared):
        out = real(runner, chunks, shared)
        seen.append((len(out), sum(not g.decode.fresh for _, g, _ in out)))
        return out

    def advancing(runner, chunks):  # the same groups one token further: every group reuses
        packed = real_advance(runner, chunks)
        if packed is not None:
            seen.append((len(packed.groups), len(packed.groups)))
        return packed

    monkeypatch.setattr(ModelRunner, "_decode_groups", recording)
    monkeypatch.setattr(ModelRunner, "_advance", advancing)
    model, tok = model_tok
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=4096)
    prompts = [random_tokens(n, seed=30 + n) for n in (5, 8, 120, 150, 11, 140)]
    samples = [1, 1, 1, 1, 3, 3]
    refs = [_greedy(model, p, 40) for p in prompts]
    stop = refs[0][10]  # the first path (and any other that makes this token) stops early
    outs = engine.expand(list(zip(prompts, samples)), max_new_tokens=40, temperature=0, stop=[stop], ignore_eos=True)
    engine.check()
    for ref, group, n in zip(refs, outs, samples):
        cut = ref[: ref.index(stop) + 1] if stop in ref else ref
        assert [c.token_ids for c in group] == [cut] * n
    assert max(n for n, _ in seen) > 1
    assert any(reused > 1 for _, reused in seen)


def test_newcomers_to_plain_decode_gather_only_their_own_contexts(model_tok, monkeypatch, compile_mode):
    """Prefills chunked so that paths start decoding one forward after another: each
    newcomer joins as a group of its own beside the kept groups (runner._append), which
    keep their buffers. Every token equals transformers' greedy choice, and once the
    arenas have room (a first call grew them), each path's context is gathered once,
    where every newcomer rebuilding every group (MAX_KEPT_GROUPS 0) gathers the running
    paths' again."""
    from ets.engine import runner as runner_module

    model, tok = model_tok
    lens = (12, 40, 40, 40, 40)
    warm_up = [random_tokens(n, seed=50 + k) for k, n in enumerate(lens)]
    prompts = [random_tokens(n, seed=40 + k) for k, n in enumerate(lens)]
    refs = [_greedy(model, p, 8) for p in prompts]  # no row runs past its columns

    def run(max_kept: int) -> tuple[int, int]:
        monkeypatch.setattr(runner_module, "MAX_KEPT_GROUPS", max_kept)
        gathered, mixed = [0], [0]  # rows of fresh plain groups; forwards with fresh and kept ones
        real = runner_module.ModelRunner._decode_groups

        def recording(runner, chunks, shared):
            out = real(runner, chunks, shared)
            if not shared:
                fresh = [len(g.decode.rows) for _, g, _ in out if g.decode.fresh]
                gathered[0] += sum(fresh)
                mixed[0] += bool(fresh) and len(fresh) < len(out)
            return out

        engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=4096, max_batch_tokens=40)
        engine.expand([(p, 1) for p in warm_up], max_new_tokens=8, temperature=0, ignore_eos=True)
        monkeypatch.setattr(runner_module.ModelRunner, "_decode_groups", recording)
        outs = engine.expand([(p, 1) for p in prompts], max_new_tokens=8, temperature=0, ignore_eos=True)
        engine.check()
        assert [group[0].token_ids for group in outs] == refs
        monkeypatch.setattr(runner_module.ModelRunner, "_decode_groups", real)
        return gathered[0], mixed[0]

    appended, mixed = run(runner_module.MAX_KEPT_GROUPS)
    rebuilt, never = run(0)
    assert mixed > 0 and never == 0
    assert appended == len(prompts) < rebuilt


@pytest.mark.parametrize("layout", ["uneven", "even"])
def test_cascade_equals_plain_attention(layout):
    """The shared-prefix decode path against plain SDPA on the same gathered context: with
    clusters of unequal size (the zero-padded cluster layout) and of equal size (no
    scatter), and for several layers in one forward (the padded scratch is shared)."""
    from ets.engine import cascade
    from ets.engine.attention import AttentionGroup, _attend_group

    gen = torch.Generator().manual_seed(0)
    kv_heads, heads, dim, n_slots = 2, 6, 16, 400
    if layout == "uneven":
        # 3 samples on a 40-token prefix, 1 on a 25-token prefix, 2 with no shared prefix
        shared, ends = [40, 40, 40, 25, 0, 0], [45, 41, 52, 30, 7, 12]
        cluster_of, member_of = [0, 0, 0, 1, 2, 2], [0, 1, 2, 0, 0, 1]
    else:  # 2 samples on each of three prefixes (40, 25 and 33 tokens)
        shared, ends = [40, 40, 25, 25, 33, 33], [45, 41, 30, 27, 40, 34]
        cluster_of, member_of = [0, 0, 1, 1, 2, 2], [0, 1, 0, 1, 0, 1]
    table = cluster_table(shared, cluster_of, n_slots, gen)
    rows = torch.arange(6)
    meta = cascade.build(rows, table, shared, cluster_of, member_of, ends, "cpu")
    assert meta.identity == (layout == "even")
    plain = AttentionGroup(table[:, : max(ends)], torch.tensor(ends)[:, None] - 1, None, 6)
    for _layer in range(2):
        k_pool, v_pool = (torch.randn(kv_heads, n_slots, dim, generator=gen) for _ in range(2))
        q = torch.randn(6, heads, dim, generator=gen)
        got = cascade.attend(meta, q, k_pool, v_pool, 0.3)
        torch.testing.assert_close(got, _attend_group(plain, q, k_pool, v_pool, 0.3, None), atol=1e-5, rtol=0)


def test_sliding_window_model(compile_mode):
    from transformers import AutoModelForCausalLM

    from ets.models.tiny import build_tokenizer, tiny_config

    tok = build_tokenizer()
    config = tiny_config("mistral", vocab_size=len(tok), sliding_window=8, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval().to(DEVICE)
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=512)
    seq = random_tokens(30, seed=13)
    (out,) = engine.score([seq], [list(range(30))])
    torch.testing.assert_close(out, _reference(model, seq), atol=TOL, rtol=0)
    (conts,) = engine.expand([(seq, 2)], max_new_tokens=8, temperature=0)
    ref = _greedy(model, seq, 8)
    assert [c.token_ids for c in conts] == [ref, ref]
    engine.check()


def test_sampling_streams_are_the_same_on_the_device_as_on_the_cpu():
    """The streams are integer arithmetic (int64 products that wrap, logical shifts): the
    device computes the CPU's uniforms bit for bit, and so draws the CPU's tokens."""
    from ets.engine.sampling import SamplingParams, sample, uniforms

    seeds = torch.tensor([0, 1, 2**62 + 5, 2**63 - 1, 123456789 * 1_000_003] * 13)
    positions = torch.arange(seeds.numel()) * 37
    cpu = uniforms(seeds, positions)
    assert torch.equal(uniforms(seeds.to(DEVICE), positions.to(DEVICE)).cpu(), cpu)
    logits = torch.randn(seeds.numel(), 500, generator=torch.Generator().manual_seed(0)) * 2
    params = SamplingParams(temperature=0.9, top_k=50, top_p=0.95)
    args = (params, seeds.tolist(), positions.tolist())
    assert sample(logits.to(DEVICE), *args) == sample(logits, *args)


@pytest.mark.parametrize("fused", [False, True])
def test_fused_decode_matches_transformers(model_tok, monkeypatch, fused, compile_mode):
    """Plain decode as one SDPA call (attention.FUSED_DECODE; a GPU's default) or as the
    CPU's batched matmuls: either way greedy tokens equal transformers', across rebuilds
    and reused buffers, with contexts of different lengths in one group."""
    from ets.engine import attention

    monkeypatch.setattr(attention, "FUSED_DECODE", fused)
    calls = []
    real = attention._fused_decode
    monkeypatch.setattr(attention, "_fused_decode", lambda *a: calls.append(1) or real(*a))
    model, tok = model_tok
    engine = Engine(model, tok, compile=compile_mode, kv_budget_tokens=2048)
    prompts = [random_tokens(9, seed=30), random_tokens(23, seed=31), random_tokens(4, seed=32)]
    outs = engine.generate(prompts, max_new_tokens=24, temperature=0, ignore_eos=True)
    engine.check()
    for prompt, out in zip(prompts, outs):
        assert out == _greedy(model, prompt, 24)
    assert bool(calls) == fused
