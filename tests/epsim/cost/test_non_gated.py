"""Non-gated experts (ReLU², NVIDIA's Nemotron-3 MoE): one projection before the activation,
so two weight matrices and `4 H I` FLOPs a row, where SwiGLU has three and `6 H I`
(`epsim.cost.experts.ExpertGemm.num_up`); a record names its activation in `extra.activation`
(`epsim.calibrate.aic_records.NON_GATED_SHAPES` for AIC's tables)."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.calibrate.aic_records import faster_than_hbm, moe_activation
from epsim.cost.experts import ExpertGemm, expert_projections, record_projections
from epsim.cost.quant import quant_expert_gemm
from epsim.cost.record_kernels import kernel_record_features
from epsim.profile import Component, Profile
from epsim.records import MeasurementRecord, Provenance


def test_relu2_experts_run_one_projection_before_the_activation():
    assert expert_projections("relu2") == 1
    assert expert_projections("") == expert_projections("silu") == 2
    h, i = 4096, 2688
    gated = quant_expert_gemm(h, i, "nvfp4", 148, 22)
    plain = quant_expert_gemm(h, i, "nvfp4", 148, 22, num_up=1)
    assert plain.weight_bytes / gated.weight_bytes == pytest.approx(2 / 3)
    assert plain.flops_per_row == 4.0 * h * i and gated.flops_per_row == 6.0 * h * i
    # the first GEMM is I wide, not 2I: its tiles (and so the waves) shrink with it
    tiles = np.array([64.0])
    one = ExpertGemm(h, i, 0.0, 148, num_up=1)
    two = ExpertGemm(h, i, 0.0, 148)
    assert one.quantized_mflops(tiles)[0] < two.quantized_mflops(tiles)[0]
    # activations: the first GEMM's output (written, read back) is I wide, not 2I
    assert two.act_bytes_per_row - one.act_bytes_per_row == pytest.approx(4.0 * i)


def _record(activation: str) -> MeasurementRecord:
    rows = [22.0] * 512
    return MeasurementRecord(
        kind="quant_experts", backend="local", median_us=100.0, timing="device", ep_size=1,
        num_tokens_per_rank=512, hidden_size=4096, moe_intermediate_size=2688, num_experts=512,
        num_local_experts=512, top_k=22, weight_dtype="nvfp4", local_expert_tokens=[rows],
        expert_tokens_per_rank=[sum(rows)],
        extra={"measured_rank": 0, "num_tokens": 512,
               **({"activation": activation} if activation else {})},
        provenance=Provenance(device="B200", hardware="B200"))


def test_a_relu2_record_streams_two_matrices_per_expert():
    """A memory-bound row (one token per expert slot): its weights' column is 2/3 of the
    SwiGLU reading of the same row, less the activations' part."""
    assert record_projections(_record("relu2")) == 1 and record_projections(_record("")) == 2
    profile = Profile(name="t", hardware="B200")
    profile.components["any/experts_nvfp4/graph"] = Component(
        params={"base_us": 10.0, "hbm_frac": 0.9, "tensor_frac": 0.5, "reread_frac": 0.0},
        source="fit")
    relu2, swiglu = (kernel_record_features(_record(a), profile) for a in ("relu2", ""))
    hbm = relu2.coef_names.index("inv_hbm_frac")
    assert 0.6 < relu2.row[hbm] / swiglu.row[hbm] < 0.7


def test_nemotron_shapes_of_the_collector_are_relu2():
    """AIC's collector runs its Nemotron-3 cases with ReLU² on FlashInfer's TRT-LLM MoE: Super
    (4096 x 2688, and its 1024 latent) and Ultra (8192 x 5120), 512 experts, top-22; DeepSeek's
    shape is SwiGLU, and so are the Triton kernel's rows. As SwiGLU, Ultra's 1-token B200 row
    (168.6 us, 22 experts) would stream its weights above the datasheet's 8 TB/s; as ReLU² it
    does not."""
    trtllm = "sglang_flashinfer_trtllm_moe"
    assert moe_activation(4096, 2688, 512, 22, trtllm) == "relu2"
    assert moe_activation(8192, 5120, 512, 22, trtllm) == "relu2"
    assert moe_activation(1024, 2688, 512, 22, "sglang_fused_moe_triton") == ""
    assert moe_activation(7168, 2048, 256, 8, trtllm) == ""
    assert faster_than_hbm("b200_sxm", 22, 8192, 5120, "nvfp4", 168.6)
    assert not faster_than_hbm("b200_sxm", 22, 8192, 5120, "nvfp4", 168.6, "relu2")


def test_fp4_experts_take_the_dense_fp4_gemms_tensor_rate():
    """The fused NVFP4 MoE's records up to 1024 tokens are all bound by their weights, so they
    cannot tell its FP4 MMA rate: the fit holds it at the same GPU's dense NVFP4 GEMM fit
    (`epsim.calibrate.build.experts_held`), whose large GEMMs are compute-bound; FP8-block
    experts (a different kernel family from DeepGEMM's dense GEMM) fit their own."""
    from types import SimpleNamespace

    from epsim.calibrate.build import _held_experts, experts_held
    fits = {"any/gemm_nvfp4/graph": SimpleNamespace(params={"tensor_frac": 0.39, "wave_us": 0.3})}
    assert _held_experts("any/experts_nvfp4/graph")
    assert not _held_experts("any/experts_fp8_block/graph")
    assert not _held_experts("deepep/experts_fp8_block/graph/low_latency")
    assert experts_held("any/experts_nvfp4/graph", fits, "B200") == {"tensor_frac": 0.39}
    assert experts_held("any/experts_nvfp4/graph", {}, "B200") == {}
    # a dense fit that is fed (`epsim.cost.fp4_gemm`): the share of the FP4 peak its widest
    # tile sustains at the fitted feed, 116 GB/s x 148 SMs x 303.4 FLOP/B over 9 PFLOP/s
    fed = {"any/gemm_nvfp4/graph": SimpleNamespace(params={"tensor_frac": 1.0,
                                                            "sm_feed_gbps": 116.0})}
    held = experts_held("any/experts_nvfp4/graph", fed, "B200")["tensor_frac"]
    assert held == pytest.approx(116.0 * 148 * 2 * 128 * 256 / (384 * 0.5625) * 1e-3 / 9000)
    assert 0.5 < held < 0.6
