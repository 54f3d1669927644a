"""K/V stored narrower than the model computes (`Engine(kv_dtype=...)`, `policy.kv_dtype`):
half the bytes per token, logits within that dtype's precision, every attention path."""

import json

import pytest
import torch

from ets.engine import Engine
from ets.engine.pool import KVPool, kv_storage_dtype
from ets.models.tiny import ARCHS, build_tiny_model
from tests.helpers import cluster_table, one_line_error, random_tokens, run_cli

# The tiny models' logits are about 0.6 in size; bfloat16 keeps 8 bits of mantissa (~4e-3
# relative), which moves them by ~1e-3 after a few layers.
CLOSE = 1e-2


@pytest.mark.parametrize("arch", ARCHS)
def test_bfloat16_kv_halves_the_pool_and_keeps_the_logits_close(arch):
    model, tok = build_tiny_model(arch, seed=1)
    seq = random_tokens(30, seed=13)
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0]
    wide, narrow = Engine(model, tok, kv_budget_tokens=512), Engine(model, tok, kv_budget_tokens=512, kv_dtype="bfloat16")
    assert narrow.pool.k[0].dtype == narrow.pool.v[-1].dtype == torch.bfloat16
    assert narrow.stats()["pool_kv_bytes"] * 2 == wide.stats()["pool_kv_bytes"]
    (out,) = narrow.score([seq], [list(range(30))])
    diff = (out - ref).abs().max().item()
    assert 1e-5 < diff < CLOSE  # stored narrower (not the float32 logits), and only by its rounding


def _rounded(pool: torch.Tensor) -> torch.Tensor:
    return pool.to(torch.bfloat16).float()


@pytest.mark.parametrize("narrow", [True, False])
@pytest.mark.parametrize("layout", ["cascade", "plain"])
def test_decode_attention_over_a_bfloat16_pool(layout, narrow, monkeypatch):
    """The decode paths (shared-prefix cascade, and plain over kept buffers) on a bfloat16
    pool against float32 SDPA over the same rounded K/V: multiplied in bfloat16 (as large
    buffers are) they agree to its precision, queries and scores being rounded too; widened
    (small CPU buffers, pool.operands), to float32's."""
    from ets.engine import pool
    monkeypatch.setattr(pool, "NARROW_MIN_ELEMENTS", 0 if narrow else 1 << 30)
    from ets.engine import cascade
    from ets.engine.attention import AttentionGroup, DecodeMeta, _attend_decode, _attend_group
    from ets.engine.workspace import DecodeKV, Workspace

    gen = torch.Generator().manual_seed(0)
    kv_heads, heads, dim, n_slots = 2, 4, 16, 400
    shared, ends = [40, 40, 40, 25, 0, 0], [45, 41, 52, 30, 7, 12]
    cluster_of, member_of = [0, 0, 0, 1, 2, 2], [0, 1, 2, 0, 0, 1]
    table = cluster_table(shared, cluster_of, n_slots, gen)
    k32, v32 = (torch.randn(kv_heads, n_slots, dim, generator=gen) for _ in range(2))
    k16, v16 = k32.to(torch.bfloat16), v32.to(torch.bfloat16)
    q = torch.randn(6, heads, dim, generator=gen)
    reference = AttentionGroup(table[:, : max(ends)], torch.tensor(ends)[:, None] - 1, None, 6)
    if layout == "cascade":
        meta = cascade.build(torch.arange(6), table, shared, cluster_of, member_of, ends, "cpu")
        got = cascade.attend(meta, q, k16, v16, 0.3)
    else:
        cap = max(ends)
        kv = DecodeKV(Workspace(torch.bfloat16, "cpu"))
        decode = DecodeMeta(kv, fresh=True, per_layer=True, cap=cap, slots=table[:, :cap],
                            cols=torch.tensor(ends) - 1, rows=torch.arange(6))
        group = AttentionGroup(table[:, :cap], torch.tensor(ends)[:, None] - 1, None, 6, decode=decode)
        got = _attend_decode(group, q, None, k16, v16, 0, 0.3, None)
    assert got.dtype == torch.float32
    rounded = _attend_group(reference, q, _rounded(k32), _rounded(v32), 0.3, None)
    if narrow:
        torch.testing.assert_close(got, rounded, atol=2e-2, rtol=0)
        assert (got - rounded).abs().max() > 1e-5  # it did multiply in bfloat16
    else:
        torch.testing.assert_close(got, rounded, atol=1e-5, rtol=0)


def test_a_search_runs_on_a_bfloat16_cache(tmp_path):
    out = tmp_path / "results.jsonl"
    assert run_cli("method=beam", "policy.backend=engine", "policy.kv_dtype=bfloat16", "data.limit=2",
                   f"output={out}") == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 and all(r["generated_tokens"] > 0 for r in records)


def test_kv_dtype_names():
    assert kv_storage_dtype(None, torch.float16) == torch.float16
    assert kv_storage_dtype("bfloat16", torch.float32) == kv_storage_dtype(torch.bfloat16, torch.float32)
    with pytest.raises(ValueError, match="kv_dtype must be one of float32, bfloat16, float16"):
        kv_storage_dtype("fp8", torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_pool_is_zeros_on_a_cache_line_and_costs_nothing_until_written(dtype):
    import resource

    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    pool = KVPool(4, 1 << 19, 4, 32, dtype, "cpu")  # 2 GiB in float32, 1 GiB narrow
    # torch.zeros would touch every page (~260K faults a GiB); fresh pages come on first write
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults < 5000
    for t in pool.k + pool.v:
        assert t.dtype == dtype and t.shape == (4, (1 << 19) + 1, 32) and t.is_contiguous()
        assert t.data_ptr() % 64 == 0  # a cache line
    small = KVPool(2, 37, 2, 8, dtype, "cpu")
    assert all(not t.any() for t in small.k + small.v)
    small.k[1][0, 3] = 1.5  # writable, and one slot is one row
    assert small.k[1].sum().item() == 12 and small.k[0].sum().item() == 0


@pytest.mark.parametrize("backend, hint", [("hf", "the engine backend"), ("vllm", "policy.vllm.kv_cache_dtype")])
def test_kv_dtype_is_an_engine_option(capsys, tmp_path, backend, hint):
    code = run_cli(f"policy.backend={backend}", "policy.kv_dtype=bfloat16", f"output={tmp_path / 'r.jsonl'}")
    err = one_line_error(capsys, code)
    assert "policy.kv_dtype" in err and hint in err
    assert not (tmp_path / "r.jsonl").exists()
