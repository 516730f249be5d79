"""DeepSeek-V3/R1's shared expert inside SGLang's fused MoE kernel (`epsim.cost.shared_experts`):
where SGLang fuses it, the step prices no shared-expert MLP and the experts' kernel one more
expert with a row per token; where it does not, the shared expert stays its own MLP."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.cost.attention import BatchCounts
from epsim.cost.dual_stream import beside_us
from epsim.cost.experts import even_experts_us
from epsim.cost.shared_experts import DUAL_STREAM_TOKENS, fused_shared_experts, shared_beside
from epsim.default_profile import default_profile
from epsim.eplb import Placement
from epsim.plan.sglang_args import launch
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.scenario import scenario_from_dict
from epsim.zoo import get_model

TP8 = dict(tp_size=8, moe_tp_size=8, ep_size=1, enable_dp_attention=False,
           moe_a2a_backend="none", quantization="fp8_block")


@pytest.mark.parametrize("model, deployment, engine, fused", [
    ("DeepSeek-R1", TP8, "sglang", 1),
    ("DeepSeek-V3", dict(TP8, quantization=None), "sglang", 1),
    ("DeepSeek-R1", dict(TP8, disable_shared_experts_fusion=True), "sglang", 0),
    ("DeepSeek-R1", TP8, "transformers", 0),                    # HF's block runs it apart
    ("DeepSeek-R1", dict(ep_size=8, moe_a2a_backend="deepep"), "sglang", 0),
    ("DeepSeek-R1", dict(ep_size=1, moe_a2a_backend="mooncake"), "sglang", 0),
    ("DeepSeek-R1", dict(TP8, tp_size=8, moe_tp_size=1, ep_size=8), "sglang", 0),   # EP > 1
    ("DeepSeek-R1", dict(TP8, enable_two_batch_overlap=True), "sglang", 0),
    ("Kimi-K2", dict(TP8, quantization=None), "sglang", 0),     # 384 routed experts
    ("Qwen3-235B-A22B", dict(TP8, tp_size=4, moe_tp_size=4), "sglang", 0),    # no shared expert
])
def test_sglang_rule(model, deployment, engine, fused):
    spec = DeploymentSpec(**deployment)
    assert fused_shared_experts(get_model(model), spec, engine, spec.parallel.ep_size) == fused


def _step(**deployment):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = CostModel(get_model("DeepSeek-R1"), ClusterSpec(gpu="H200"),
                       DeploymentSpec(**deployment), default_profile("H200"))
    m = cm.model
    tables = build_tables(Placement.on_cluster(
        contiguous_placement(m.num_moe_layers, m.num_experts, 1), m.num_experts, 1, 8))
    batch = BatchCounts.uniform_decode(1, 4, 1400.0)
    loads = np.zeros((m.num_moe_layers, m.num_experts))
    loads[:, :32] = 1.0                       # 4 tokens x top-8 on 32 distinct experts
    return cm, cm.step(batch, loads, tables)


def test_fused_shared_expert_is_one_more_expert_in_the_kernel():
    """TP 8 / MoE-TP 8, 4 decode tokens: no shared-expert MLP; the kernel prices 33 experts
    over 36 rows, exactly the grouped GEMM's model at those counts. Disabled, the shared expert
    is its own MLP again and the kernel prices the routed 32 experts over 32 rows."""
    cm, fused = _step(**TP8)
    params = cm.params.step(True).experts.params
    assert cm.params.fused_shared_experts == 1
    np.testing.assert_array_equal(fused.shared_experts_us, 0.0)
    np.testing.assert_allclose(fused.experts_us, even_experts_us(
        np.array([36.0]), np.array([33.0]), cm.params.gemm, params))
    cm_apart, apart = _step(**TP8, disable_shared_experts_fusion=True)
    assert cm_apart.params.fused_shared_experts == 0
    assert (apart.shared_experts_us > 0).all()
    np.testing.assert_allclose(apart.experts_us, even_experts_us(
        np.array([32.0]), np.array([32.0]), cm.params.gemm, params))
    # apart at 4 tokens, the MLP runs beside the router and routed experts: the layer waits for
    # the longer of the two and the part of the shorter the second stream does not hide
    # (`epsim.cost.dual_stream`), not their sum
    assert cm_apart.params.shared_beside
    curve = cm_apart.params.dual_stream
    layer = apart.parts[6]
    beside = (apart.parts[0] + beside_us(apart.parts[4], apart.parts[2] + apart.parts[5],
                                         curve.at(4.0) if curve else 1.0)
              + apart.parts[1] + apart.parts[3])
    np.testing.assert_allclose(layer, beside)
    assert (layer < apart.parts[:6].sum(axis=0)).all()


@pytest.mark.parametrize("deployment, engine, beside", [
    (dict(TP8, disable_shared_experts_fusion=True), "sglang", True),
    (dict(TP8, tp_size=8, moe_tp_size=1, ep_size=8), "sglang", True),     # EP, a2a none
    (TP8, "sglang", False),                                              # fused: in the kernel
    (dict(ep_size=8, moe_a2a_backend="deepep"), "sglang", False),        # DeepEP's own forward
    (dict(TP8, disable_shared_experts_fusion=True, enable_two_batch_overlap=True), "sglang",
     False),
    (dict(TP8, disable_shared_experts_fusion=True), "transformers", False),
])
def test_sglang_runs_an_unfused_shared_expert_on_its_own_stream(deployment, engine, beside):
    spec = DeploymentSpec(**deployment)
    model = get_model("DeepSeek-R1")
    fused = fused_shared_experts(model, spec, engine, spec.parallel.ep_size)
    assert shared_beside(model, spec, engine, fused) is beside
    assert not shared_beside(get_model("Qwen3-235B-A22B"), spec, engine, 0)   # none to run


def test_past_the_dual_stream_bound_the_shared_expert_runs_first():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = CostModel(get_model("DeepSeek-R1"), ClusterSpec(gpu="H200"),
                       DeploymentSpec(**TP8, disable_shared_experts_fusion=True),
                       default_profile("H200"))
    for tokens, beside in ((DUAL_STREAM_TOKENS, True), (DUAL_STREAM_TOKENS + 1, False)):
        batch = BatchCounts.uniform_decode(1, tokens, 1000.0)
        assert cm._token_terms(batch, batch).shared_beside is beside


def test_the_flag_reaches_sglangs_command_line():
    scenario = scenario_from_dict({
        "name": "tp8", "model": "DeepSeek-R1", "cluster": {"gpu": "H200"},
        "deployment": dict(TP8, disable_shared_experts_fusion=True),
        "workload": {"arrivals": {"kind": "concurrency", "clients": 4}, "duration_s": 1.0}})
    assert "--disable-shared-experts-fusion" in launch(scenario).command()
