"""The engine's linear layers on oneDNN prepacked weights (ets/engine/linears.py): the
same numbers as torch's linears to float rounding, the model left as it was outside the
engine's forwards, and the switch's refusals. (That they keep the engine batch invariant:
tests/test_engine_batch_invariance.py, run with both.)"""

import pytest
import torch

from ets.engine import Engine
from ets.engine import linears
from ets.models.tiny import build_tiny_model
from tests.helpers import random_tokens

pytestmark = pytest.mark.skipif(not linears.available(), reason="this torch has no oneDNN prepacked linear")


@pytest.fixture(scope="module")
def model_tok():
    return build_tiny_model("llama", seed=3)


def test_routed_linears_compute_what_torchs_do_and_leave_the_model_as_it_was(model_tok, monkeypatch):
    model, _ = model_tok
    ids = torch.tensor([random_tokens(30, seed=1)])
    calls = []
    packed_linear = linears._linear
    monkeypatch.setattr(linears, "_linear", lambda *a, **kw: calls.append(1) or packed_linear(*a, **kw))
    with torch.inference_mode():
        before = model(input_ids=ids).logits
        packed = linears.PackedLinears(model)
        n_linear = sum(type(m) is torch.nn.Linear for m in model.modules())
        assert len(packed.layers) == n_linear > 0
        with packed.routed():
            routed = model(input_ids=ids).logits
        assert len(calls) == n_linear  # every linear of the forward ran on its packed weight
        after = model(input_ids=ids).logits
    assert len(calls) == n_linear     # and none once the forward is done
    torch.testing.assert_close(routed, before, atol=1e-4, rtol=1e-4)
    assert torch.equal(after, before)
    assert not any("forward" in vars(m) for m in model.modules())


def test_an_engine_scores_alike_with_and_without_and_its_model_stays_plain(model_tok):
    model, tok = model_tok
    ids = torch.tensor([random_tokens(20, seed=2)])
    with torch.inference_mode():
        before = model(input_ids=ids).logits
    target = random_tokens(50, seed=4)
    outs = {}
    for prepack in ("on", "off"):
        engine = Engine(model, tok, kv_budget_tokens=1 << 12, prepack=prepack)
        assert (engine.linears is not None) == (prepack == "on")
        (outs[prepack],) = engine.score([target], [[10, 30, 49]])
    torch.testing.assert_close(outs["on"], outs["off"], atol=1e-4, rtol=1e-4)
    with torch.inference_mode():  # plain transformers code on the same model: as before the engines
        assert torch.equal(model(input_ids=ids).logits, before)


def test_auto_packs_on_the_cpu_for_float32_and_bfloat16_only():
    cpu = torch.device("cpu")
    assert linears.enabled("auto", cpu, torch.float32) and linears.enabled("auto", cpu, torch.bfloat16)
    assert not linears.enabled("auto", cpu, torch.float16)
    assert not linears.enabled("off", cpu, torch.float32)
    assert not linears.enabled("auto", torch.device("cuda"), torch.bfloat16)  # (no GPU needed to decide)
    with pytest.raises(ValueError, match="prepack=on: .* not torch.float16 on cpu; use prepack=off"):
        linears.enabled("on", cpu, torch.float16)
    with pytest.raises(ValueError, match="use auto, on or off"):
        linears.enabled("sometimes", cpu, torch.float32)


def test_a_compiled_forward_keeps_torchs_linears(model_tok):
    model, tok = model_tok
    assert Engine(model, tok, kv_budget_tokens=1 << 10, compile="on").linears is None  # auto: inductor's own
    with pytest.raises(ValueError, match="prepack=on and compile=on"):
        Engine(model, tok, kv_budget_tokens=1 << 10, compile="on", prepack="on")


def test_a_linear_whose_forward_was_replaced_keeps_it(model_tok):
    """A hook that replaced a layer's forward on the module (as accelerate's do) stays in
    place, inside the engine's forwards and after them."""
    model, _ = model_tok
    layer = next(m for m in model.modules() if type(m) is torch.nn.Linear)
    calls = []
    hooked = layer.forward
    layer.forward = lambda x: calls.append(1) or hooked(x)
    mine = layer.forward
    try:
        packed = linears.PackedLinears(model)
        assert layer not in [m for m, _, _ in packed.layers]
        with torch.inference_mode(), packed.routed():
            model(input_ids=torch.tensor([random_tokens(5, seed=0)]))
        assert calls and layer.forward is mine
    finally:
        del layer.forward


@pytest.mark.parametrize("prepack", ["auto", "off"])
def test_a_runs_prm_engine_follows_the_policys_off(prepack):
    """`policy.prepack: off` keeps a PRM's own engine on torch's linears too (the demo's
    config: its records were made on them); otherwise that engine packs where it can."""
    from ets.api import build_reward
    from ets.config import load_config
    from ets.policy.build import build_policy
    from tests.helpers import TINY

    config = load_config(TINY, ["policy.backend=engine", "reward.options.backend=engine", f"policy.prepack={prepack}"])
    policy = build_policy(config.policy, config.search)
    reward = build_reward(config, policy)
    packed = prepack != "off"
    assert (policy.engine.linears is not None) == packed
    assert reward.backend.engine is not policy.engine
    assert (reward.backend.engine.linears is not None) == packed
