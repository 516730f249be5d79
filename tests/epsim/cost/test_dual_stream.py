"""SGLang's dual-stream shared expert priced with its measured overlap (`epsim.cost.dual_stream`):
the longer branch plus the part of the shorter the second stream does not hide, interpolated in
log tokens over the measured range, the bound without a measurement; `step` and `decode_steps`
price it with the same bits."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.cost.attention import BatchCounts
from epsim.cost.dual_stream import (DualStreamOverlap, beside_us, dual_stream_overlap, param_name,
                                    shipped_component)
from epsim.default_profile import default_profile
from epsim.eplb import Placement
from epsim.profile import Component
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model

TP8_APART = dict(tp_size=8, moe_tp_size=8, ep_size=1, enable_dp_attention=False,
                 moe_a2a_backend="none", quantization="fp8_block",
                 disable_shared_experts_fusion=True)
# a made-up measurement: overlap 0.8 at 1 token falling to 0.2 at 64, measured at TP 4 and 8
CURVE = Component(params={param_name(t): f for t, f in ((1, 0.8), (8, 0.5), (64, 0.2))},
                  valid_range={"tp_size": [4.0, 8.0]}, note="test")


def test_beside_is_the_longer_plus_what_the_shorter_does_not_hide():
    shared, routed = 20.0, np.array([50.0, 10.0])
    np.testing.assert_array_equal(beside_us(shared, routed, 1.0), np.maximum(shared, routed))
    np.testing.assert_allclose(beside_us(shared, routed, 0.0), shared + routed)
    np.testing.assert_allclose(beside_us(shared, routed, 0.25), [50.0 + 15.0, 20.0 + 7.5])


def test_the_overlap_interpolates_in_log_tokens_and_holds_beyond_the_measured_range():
    curve = dual_stream_overlap(8, CURVE)
    assert curve.tokens == (1.0, 8.0, 64.0)
    assert curve.at(1.0) == pytest.approx(0.8) and curve.at(8.0) == pytest.approx(0.5)
    assert curve.at(np.sqrt(8.0)) == pytest.approx(0.65)     # halfway in log2
    assert curve.at(0.5) == pytest.approx(0.8) and curve.at(1024.0) == pytest.approx(0.2)
    assert curve.outside(1.0, 64.0) == []
    assert "outside measured [1, 64]" in curve.outside(4.0, 1024.0)[0]


@pytest.mark.parametrize("tp, outside", [(8, False), (4, False), (16, True), (2, True)])
def test_a_tp_size_outside_the_measured_splits_is_extrapolated(tp, outside):
    curve = dual_stream_overlap(tp, CURVE)
    assert curve.at(8.0) == pytest.approx(0.5)          # the same curve: pooled over splits
    assert bool(curve.outside(1.0, 64.0)) is outside


def test_without_a_measurement_there_is_no_curve():
    assert dual_stream_overlap(8, Component(params={"other_us": 1.0})) is None


def _model(curve: DualStreamOverlap | None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = CostModel(get_model("DeepSeek-R1"), ClusterSpec(gpu="B200"),
                       DeploymentSpec(**TP8_APART), default_profile("B200"))
    cm.params = replace(cm.params, dual_stream=curve)      # before any step is priced
    m = cm.model
    tables = build_tables(Placement.on_cluster(
        contiguous_placement(m.num_moe_layers, m.num_experts, 1), m.num_experts, 1, 8))
    return cm, tables


@pytest.mark.parametrize("tokens", [4, 64])
def test_step_and_decode_steps_price_the_measured_overlap_with_the_same_bits(tokens):
    curve = dual_stream_overlap(8, CURVE)
    cm, tables = _model(curve)
    assert cm.params.shared_beside
    m = cm.model
    batch = BatchCounts.uniform_decode(1, tokens, 1400.0)
    loads = np.zeros((m.num_moe_layers, m.num_experts))
    loads[:, :min(8 * tokens, m.num_experts)] = 1.0      # top-8 on distinct experts
    moe = cm.moe(loads, cm.ep_tokens(batch), tables, "decode", 1.0, True)
    one = cm.step(batch, None, tables, moe=moe, record=False)
    frac = curve.at(float(tokens))
    assert cm._token_terms(batch, batch).beside_overlap_frac == frac
    attn, dispatch, experts, combine, shared, block, layer = one.parts
    np.testing.assert_allclose(layer, attn + beside_us(shared, experts + block, frac)
                               + dispatch + combine)
    # between the bound and the two in series
    assert (np.maximum(shared, experts + block) + attn < layer).all()
    assert (layer < one.parts[:6].sum(axis=0)).all()
    assert cm.leaps(batch)
    contexts = np.stack([batch.decode_context] * 2)              # [k, dp], as `step` reads it
    block_of_two = cm.decode_steps(batch, contexts, [moe, moe])
    np.testing.assert_array_equal(block_of_two.parts[0], one.parts)
    assert block_of_two.step_us[0] == one.step_us


def test_without_a_measurement_the_layer_is_the_bound_and_the_shipped_record_is_less():
    batch = BatchCounts.uniform_decode(1, 4, 1400.0)
    steps = {}
    for name, curve in (("bound", None), ("shipped", dual_stream_overlap(8))):
        cm, tables = _model(curve)
        m = cm.model
        loads = np.zeros((m.num_moe_layers, m.num_experts))
        loads[:, :32] = 1.0
        steps[name] = cm.step(batch, loads, tables, record=False)
    bound = steps["bound"].parts
    np.testing.assert_array_equal(bound[6], bound[0] + np.maximum(bound[4], bound[2] + bound[5])
                                  + bound[1] + bound[3])
    if shipped_component() is None:
        pytest.skip("the shipped profile holds no any/dual_stream")
    assert steps["shipped"].step_us >= steps["bound"].step_us
