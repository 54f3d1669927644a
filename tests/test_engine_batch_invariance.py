"""A sequence's numbers do not depend on its batch-mates, bit for bit (on the CPU).

Float sums round by the order they run in, and a kernel's order can follow the shape of
the whole batch: a 1-row matmul, a different count of padded keys, one query alone. The
engine shapes every forward so that a sequence's logits are the same whatever else is in
it (ets/engine/invariant.py): a search's records then depend only on its problem
and seed, not on which problems ran beside it. Compared here with `torch.equal`.
"""

import pytest
import torch

from ets.engine import Engine
from ets.engine.invariant import KEY_BLOCK, VALUE_BLOCK, attend_values, value_block
from ets.engine.groups import prefill_groups
from ets.engine.runner import ModelRunner
from ets.models.tiny import ARCHS, build_tiny_model
from tests.helpers import random_tokens


@pytest.fixture(scope="module", params=[(arch, prepack) for arch in (*ARCHS, "llama-mha") for prepack in ("on", "off")],
                ids=lambda p: f"{p[0]}-{'prepacked' if p[1] == 'on' else 'torch'}-linears")
def model_tok(request):
    """The tiny models, and a llama whose every query head has its own K/V (as the demo
    models): a product's row count is then its own queries' or samples' alone, and BLAS
    computes 1-3 rows another way than 4 or more (an AVX2 CPU's MKL); each with its linears
    on oneDNN's prepacked weights and on torch's own (ets/engine/linears.py)."""
    arch, prepack = request.param
    if arch == "llama-mha":
        return (*build_tiny_model("llama", seed=1, num_key_value_heads=4), prepack)
    return (*build_tiny_model(arch, seed=1), prepack)


def _engine(model_tok, **kw) -> Engine:
    model, tok, prepack = model_tok
    return Engine(model, tok, kv_budget_tokens=1 << 14, prepack=prepack, **kw)


def _others(n: int, seed: int, shared: list[int] | None = None, longest: int = 120) -> list[list[int]]:
    """n random sequences of 5..longest tokens (starting with `shared` when given)."""
    lengths = torch.randint(5, longest, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    return [(shared or []) + random_tokens(k, seed=seed + 1 + i) for i, k in enumerate(lengths)]


@pytest.mark.parametrize("length", [60, 700])
def test_scored_logits_do_not_depend_on_the_batch(model_tok, length):
    target = random_tokens(length, seed=3)
    positions = [5, length // 2, length - 1]
    (alone,) = _engine(model_tok).score([target], [positions])
    batches = {
        "one more": _others(1, 10),
        "forty more": _others(40, 20),
        "sharing its first 20 tokens": _others(6, 30, shared=target[:20]),
        "longer ones (more keys and queries than its own)": _others(3, 40, longest=1500),
    }
    for name, others in batches.items():
        out = _engine(model_tok).score([target, *others], [positions, *[[len(o) - 1] for o in others]])[0]
        assert torch.equal(out, alone), name
    # computed in chunks of 7 tokens (the forwards' boundaries fall elsewhere in it)
    (chunked,) = _engine(model_tok, max_batch_tokens=7).score([target], [positions])
    assert torch.equal(chunked, alone)
    # its first 40 tokens cached by an earlier call: only the rest computed now; and all but
    # its last 1, 2 or 3 tokens, which then go through the model alone (1-3 query rows)
    # (asked for its last row only: the engine recomputes from the first position asked for)
    for cached in (40, length - 1, length - 2, length - 3):
        engine = _engine(model_tok)
        engine.score([target[:cached]], [[cached - 1]])
        assert torch.equal(engine.score([target], [[length - 1]])[0], alone[-1:]), f"{length - cached} tokens computed"


class DecodeRows:
    """The logits each decode step of the first request's samples gave, by (sample, position)."""

    def __init__(self, monkeypatch):
        self.rows: list[tuple[int, int, torch.Tensor]] = []
        forward = ModelRunner.forward

        def recording(runner, chunks, hidden=False):
            out = forward(runner, chunks, hidden)
            self.rows += [(c.uid, c.start, out[i][-1].clone()) for i, c in enumerate(chunks) if c.decode]
            return out

        monkeypatch.setattr(ModelRunner, "forward", recording)

    def run(self, engine: Engine, requests: list, first_len: int, n: int) -> dict:
        self.rows.clear()
        engine.expand(requests, max_new_tokens=20, temperature=1.0, ignore_eos=True)
        # the first request's samples: admitted first; their first decode step reads the path's
        # last token (n > 1: the path was prefilled) or the first new one (n = 1: computed with it)
        uids = sorted({u for u, start, _ in self.rows if start in (first_len - 1, first_len)})[:n]
        return {(uids.index(u), start): row for u, start, row in self.rows if u in uids}


@pytest.mark.parametrize("length", [70, 400])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_decode_logits_do_not_depend_on_the_batch(model_tok, monkeypatch, n, length):
    """n samples of a path, alone and among other paths: distinct ones, and others with
    siblings of their own (clusters of 2 or 8, which change the cascade's layout), some
    longer than it (more columns than its own)."""
    target = random_tokens(length, seed=5)
    record = DecodeRows(monkeypatch)
    alone = record.run(_engine(model_tok), [(target, n, 7)], len(target), n)
    assert len(alone) >= 19 * n
    for siblings in (1, 2, 8):
        others = [o for o in _others(12, 40 + siblings, longest=900) if len(o) not in (len(target), len(target) + 1)]
        got = record.run(_engine(model_tok), [(target, n, 7), *[(o, siblings, 100 + i) for i, o in enumerate(others)]],
                         len(target), n)
        assert got.keys() == alone.keys()
        assert all(torch.equal(got[k], alone[k]) for k in alone), f"among paths with {siblings} samples each"


def test_decode_groups_change_no_number(model_tok, monkeypatch):
    """A path's decode logits alone and among paths of very different lengths, with and
    without siblings, the decode cut into groups by every saving (ets/engine/groups.py):
    bit for bit the same, whichever group it lands in."""
    from ets.engine import groups, runner

    monkeypatch.setattr(groups, "DECODE_SPLIT_MIN_SCORES", 0)
    cuts = []  # groups per decode cut
    for name in ("plain_decode_groups", "cascade_decode_groups"):
        real = getattr(groups, name)
        monkeypatch.setattr(runner, name, lambda *a, real=real, **k: cuts.append(len(out := real(*a, **k))) or out)
    target = random_tokens(90, seed=8)
    record = DecodeRows(monkeypatch)
    for n in (1, 3):
        alone = record.run(_engine(model_tok), [(target, n, 7)], len(target), n)
        others = [o for o in _others(10, 80, longest=700) if len(o) not in (len(target), len(target) + 1)]
        requests = [(target, n, 7), *[(o, 1 + i % 3, 100 + i) for i, o in enumerate(others)]]
        cuts.clear()
        got = record.run(_engine(model_tok), requests, len(target), n)
        assert max(cuts) > 1
        assert got.keys() == alone.keys() and all(torch.equal(got[k], alone[k]) for k in alone), f"{n} samples"


def test_prefill_groups_cut_the_padding_and_change_no_number(model_tok):
    """A forward's prefill chunks are attended in groups of like lengths (runner.py
    `prefill_groups`): short steps over short histories no longer pad to the longest. A
    sequence scored beside others of very different lengths, so in a group of its own
    kind, has the numbers it has alone."""
    lens = [10, 12, 11, 9, 200, 180, 190, 210]
    parts = prefill_groups(lens, [20, 25, 30, 22, 600, 580, 610, 590])
    assert sorted(map(sorted, parts)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert prefill_groups([10, 12], [20, 600]) == [[0, 1]]  # too little to save: one group
    target = random_tokens(40, seed=7)
    positions = [3, 20, 39]
    (alone,) = _engine(model_tok).score([target], [positions])
    others = _others(4, 60, longest=12) + _others(4, 70, longest=900)
    assert len(prefill_groups([40] + [len(o) for o in others], [40] + [len(o) for o in others])) > 1
    engine = _engine(model_tok)
    built, group = [], engine.runner._prefill_group
    engine.runner._prefill_group = lambda chunks: built.append(len(chunks)) or group(chunks)
    out = engine.score([target, *others], [positions, *[[len(o) - 1] for o in others]])[0]
    assert len(built) > 1  # the forward attended its prefill chunks in several groups
    assert torch.equal(out, alone)


def test_the_padding_can_be_switched_off(model_tok):
    """batch_invariant=False runs small forwards as they are: faster at a few sequences,
    and then a sequence scored alone rounds otherwise than among many (torch's linears:
    BLAS multiplies a few rows another way; oneDNN's prepacked ones, one row only)."""
    if model_tok[2] == "on":
        pytest.skip("prepacked linears compute 9 rows as among more: the padding is not what keeps them equal")
    target = random_tokens(9, seed=3)
    others = _others(20, 50)
    outs = []
    for invariant in (True, False):
        engine = _engine(model_tok, batch_invariant=invariant)
        alone = engine.score([target], [[8]])[0]
        engine.evict()
        among = engine.score([target, *others], [[8], *[[len(o) - 1] for o in others]])[0]
        outs.append(torch.equal(alone, among))
        torch.testing.assert_close(alone, among, atol=1e-5, rtol=0)
    assert outs == [True, False]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_value_products_do_not_depend_on_the_padded_width(dtype):
    """attend_values: a row's product with the values is the same over its own keys and
    padded to any longer width (zero probabilities, stale values), for products of 1 to 64
    rows; the block it sums by is measured on this CPU (an AVX2 one splits a sum of more
    than 128 keys, where 256 had been assumed)."""
    gen = torch.Generator().manual_seed(0)
    for rows in (1, 2, 4, 16, 64):
        for keys in (16, 112, 144, 240, 400):
            probs = torch.rand(3, rows, keys, generator=gen).to(dtype)
            values = torch.randn(3, keys, 32, generator=gen).to(dtype)
            alone = attend_values(probs, values)
            for width in (keys + 16, 256, 512, 1024):
                if width < keys:
                    continue
                padded = torch.zeros(3, rows, width, dtype=dtype)
                padded[..., :keys] = probs
                stale = torch.randn(3, width, 32, generator=gen).to(dtype)
                stale[:, :keys] = values
                assert torch.equal(attend_values(padded, stale), alone), (rows, keys, width)
    assert KEY_BLOCK <= value_block(dtype, 32) <= VALUE_BLOCK
