"""Which silicon rows' SGLang servers ran flashinfer's all-reduce fusion (its own default, by
release: `epsim.validate.silicon.allreduce_fusion`), and that the plan says so."""

from __future__ import annotations

import copy

import pytest

from epsim.cost import served_tiles
from epsim.cost.resolve import resolve_params
from epsim.spec.scenario import scenario_from_dict

from epsim.validate.silicon.allreduce_fusion import fusion_on, sglang_version
from epsim.validate.silicon.mapping import plan_row
from epsim.validate.silicon.rows import parse_row

DEEPSEEK = "deepseek-ai/DeepSeek-R1"
QWEN = "Qwen/Qwen3-235B-A22B-FP8"
TP8 = {"tp_size": 8, "enable_dp_attention": False, "moe_a2a_backend": "none"}


@pytest.mark.parametrize("version, model, gpu, deployment, nodes, on", [
    ((0, 5, 9), DEEPSEEK, "H200", TP8, 1, True),                 # the H200 agg rows
    ((0, 5, 10), DEEPSEEK, "B300", TP8, 1, True),
    ((0, 5, 7), QWEN, "H100", TP8, 1, True),
    ((0, 5, 9), DEEPSEEK, "H200", {**TP8, "enable_dp_attention": True}, 1, False),
    ((0, 5, 9), DEEPSEEK, "H200", {**TP8, "moe_a2a_backend": "deepep"}, 1, False),
    ((0, 5, 9), DEEPSEEK, "H200", TP8, 2, False),                # one node only
    ((0, 5, 9), DEEPSEEK, "H200", {**TP8, "tp_size": 1}, 1, False),   # no all-reduce
    ((0, 5, 9), DEEPSEEK, "H20", TP8, 1, False),                 # not a GPU SGLang turns it on for
    ((0, 5, 6), DEEPSEEK, "H200", TP8, 1, False),                # Hopper from 0.5.7
    ((0, 5, 6), DEEPSEEK, "B200", TP8, 1, True),                 # Blackwell DeepSeek from 0.5.5
    ((0, 5, 6), QWEN, "B200", TP8, 1, False),
    ((0, 5, 4), DEEPSEEK, "B200", TP8, 1, False),
    (None, DEEPSEEK, "H200", TP8, 1, False),                     # no stated release
    ((0, 5, 4), DEEPSEEK, "H200", {**TP8, "enable_flashinfer_allreduce_fusion": True}, 1, True),
])
def test_sglang_turns_the_fusion_on_by_release_gpu_and_layout(version, model, gpu, deployment,
                                                              nodes, on):
    assert fusion_on(version, model, gpu, deployment, nodes) is on


def test_versions_read_from_release_strings():
    assert sglang_version("0.5.10.post1") == (0, 5, 10)
    assert sglang_version("nightly-dev-20260216-d3bae71e") is None
    assert sglang_version("") is None


def _row(version: str, backend: str = "sglang"):
    return parse_row({"id": "r", "silicon_data_source": "db-dump/2026-04-27; config_id=81; "
                      "silicon_concurrency=4; lmsysorg/sglang:v0.5.9-cu130", "backend": backend,
                      "backend_version": version, "model_path": DEEPSEEK, "system": "h200_sxm",
                      "precision": "fp8", "mode": "agg", "isl": "1024", "osl": "1024",
                      "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block",
                      "batch_size": "4", "tp_size": "8", "pp_size": "1", "attention_dp_size": "1",
                      "moe_tp_size": "8", "moe_ep_size": "1", "silicon_ttft_ms": "300",
                      "silicon_tpot_ms": "10.3"}, "test")


def test_the_plan_of_an_h200_sglang_0_5_9_agg_row_runs_the_fusion():
    plan = plan_row(_row("0.5.9"), approximate=True)
    deployment = plan.instances[0].data["deployment"]
    assert deployment["enable_flashinfer_allreduce_fusion"] is True
    assert any("all-reduce fusion" in a for a in plan.assumptions)
    older = plan_row(_row("0.5.6"), approximate=True)
    assert "enable_flashinfer_allreduce_fusion" not in older.instances[0].data["deployment"]
    other = plan_row(_row("0.5.9", backend="trtllm"), approximate=True)
    assert not any("all-reduce fusion" in a for a in other.assumptions)


def _experts(version: str):
    """The graph step's experts stage of the row's plan at SGLang `version`."""
    scenario = scenario_from_dict(copy.deepcopy(plan_row(_row(version), approximate=True)
                                                .instances[0].data), where="test")
    return resolve_params(scenario.model, scenario.cluster, scenario.deployment).step(True).experts


def test_an_h200_sglang_0_5_9_deepseek_row_prices_the_served_fused_moe_tiles():
    plan = plan_row(_row("0.5.9"), approximate=True)
    assert plan.instances[0].data["deployment"]["moe_served_tiles"] is True
    assert served_tiles.NOTE in plan.assumptions            # "measured on H100, extrapolated"
    assert _experts("0.5.9").served_tiles
    assert not _experts("0.5.6").served_tiles
