"""DeepSeek-V3/R1's shared expert inside SGLang's fused MoE kernel (`epsim.cost.shared_experts`):
where SGLang fuses it, the step prices no shared-expert MLP and the experts' kernel one more
expert with a row per token; where it does not, the shared expert stays its own MLP."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.cost.attention import BatchCounts
from epsim.cost.experts import even_experts_us
from epsim.cost.shared_experts import fused_shared_experts
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
    # the fused kernel's extra expert costs a fraction of the MLP it replaces
    assert fused.step_us < apart.step_us - 0.5 * apart.shared_experts_us.sum()


def test_the_flag_reaches_sglangs_command_line():
    scenario = scenario_from_dict({
        "name": "tp8", "model": "DeepSeek-R1", "cluster": {"gpu": "H200"},
        "deployment": dict(TP8, disable_shared_experts_fusion=True),
        "workload": {"arrivals": {"kind": "concurrency", "clients": 4}, "duration_s": 1.0}})
    assert "--disable-shared-experts-fusion" in launch(scenario).command()
