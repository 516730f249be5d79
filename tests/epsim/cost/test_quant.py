"""Quantised GEMMs and experts (`epsim.cost.quant`): bytes at the weight format, FLOPs at its
tensor rate, the activation quantisation and the block scales as terms of their own, and the
design rows the fitter reads equal to the model the simulator prices with."""

from __future__ import annotations

import warnings
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from epsim.cost.experts import experts_rank_us, model_gemm, row_tiles
from epsim.cost.model import CostModel
from epsim.cost.moe import remote_slots_us
from epsim.cost.dense_gemm import (FP4_GEMM_TERMS, GEMM_TERMS, gemm_features, gemm_terms,
                                   gemm_us, gemm_work)
from epsim.cost.quant import (ACTIVATION_BYTES, EXPERT_QUANT_TERMS, absolute,
                              experts_quant_features, gemm_defaults, layout_kb,
                              quant_bytes_per_element, quant_expert_gemm, remote_slot_bytes,
                              tensor_peak)
from epsim.calibrate.aic_records import balanced_counts
from epsim.cost.record_kernels import kernel_record_features
from epsim.errors import SpecError
from epsim.profile import Profile
from epsim.records import MeasurementRecord, Provenance
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.quant import weight_bytes_per_element
from epsim.zoo import get_hardware, get_model

H200, B200 = get_hardware("H200"), get_hardware("B200")
PARAMS = {"base_us": 5.0, "per_expert_us": 0.2, "hbm_frac": 0.8, "tensor_frac": 0.5,
          "wave_us": 1.0, "dequant_us": 0.05}


def test_weights_at_the_formats_bytes_math_at_its_peak():
    m, n, k = np.array([1.0, 4096.0]), 7168, 2048
    bf16 = gemm_work(m, n, k, "bf16", 132)
    fp8 = gemm_work(m, n, k, "fp8_block", 132)
    fp4 = gemm_work(m, n, k, "nvfp4", 148)
    # one row: the weights dominate, at 2, 1 + 4/16384 and 0.5 + 1/16 bytes per weight
    assert bf16.mem_kb[0] == pytest.approx((n * k * 2 + k * 2 + 2 * n) * 1e-3)
    assert fp8.mem_kb[0] == pytest.approx((n * k * weight_bytes_per_element("fp8_block")
                                           + k * ACTIVATION_BYTES["fp8_block"] + 2 * n) * 1e-3)
    assert fp4.mem_kb[0] / bf16.mem_kb[0] == pytest.approx(0.5625 / 2, rel=3e-3)
    assert tensor_peak(H200, "fp8_block") == H200.fp8_tflops > H200.bf16_tflops
    assert tensor_peak(B200, "nvfp4") == B200.fp4_tflops
    assert tensor_peak(H200, "w4a16") == H200.bf16_tflops        # weight-only: BF16 math
    with pytest.raises(SpecError, match=r"weight format \('nvfp4'\) must run on a GPU with FP4 "
                                        r"tensor cores: H200 has none"):
        tensor_peak(H200, "nvfp4")


def test_quantisation_and_scale_blocks_are_their_own_terms():
    m = np.array([256.0])
    assert gemm_work(m, 4096, 7168, "bf16", 132).quant_kb[0] == 0.0
    fp8 = gemm_work(m, 4096, 7168, "fp8_block", 132)
    assert fp8.quant_kb[0] == pytest.approx(256 * 7168 * (2 + 1 + 4 / 128) * 1e-3)
    assert quant_bytes_per_element("w4a16") == 0.0
    # DeepGEMM rescales each 128-deep K slice: waves x ceil(7168 / 128) blocks; per tensor: none
    assert fp8.blocks[0] == fp8.waves[0] * 56
    assert gemm_work(m, 4096, 7168, "fp8", 132).blocks[0] == 0.0
    # a block-scaled GEMM is dearer by exactly dequant_us x blocks where it is compute-bound
    big = gemm_work(np.array([16384.0]), 4096, 7168, "fp8_block", 132)
    with_blocks = gemm_us(big, PARAMS, H200, "fp8_block")
    without = gemm_us(big, {**PARAMS, "dequant_us": 0.0}, H200, "fp8_block")
    assert with_blocks[0] - without[0] == pytest.approx(0.05 * big.blocks[0])


def test_design_rows_times_coefficients_give_the_model():
    rng = np.random.default_rng(1)
    for fmt, hw in (("bf16", H200), ("fp8", H200), ("fp8_block", H200), ("nvfp4", B200)):
        m = rng.integers(1, 20000, size=32).astype(float)
        work = gemm_work(m, 4096, 7168, fmt, 148)
        params = {**PARAMS, "sm_feed_gbps": 100.0, "dram_us": 1.0,     # NVFP4: fed rows too
                  "cap_slowdown_ratio": 0.1}
        rows = gemm_features(work, params, hw, fmt)
        assert rows.shape[-1] == len(gemm_terms(fmt).params)
        assert np.allclose(rows @ gemm_terms(fmt).coefficients(params),
                           gemm_us(work, params, hw, fmt))
    assert gemm_terms("nvfp4") is FP4_GEMM_TERMS and gemm_terms("fp8_block") is GEMM_TERMS


def test_fractions_price_another_gpu_from_its_datasheet():
    rates = absolute(PARAMS, B200, "fp8_block")
    assert rates["hbm_gbps"] == pytest.approx(0.8 * B200.hbm_gbps)
    assert rates["tflops"] == pytest.approx(0.5 * B200.fp8_tflops)
    assert absolute(PARAMS, H200, "bf16")["tflops"] == pytest.approx(0.5 * H200.bf16_tflops)
    # the same fit, twice the HBM bandwidth: a weight-bound GEMM takes less time on B200
    one = gemm_work(np.array([1.0]), 7168, 7168, "fp8_block", 132)
    assert gemm_us(one, PARAMS, B200, "fp8_block")[0] < gemm_us(one, PARAMS, H200, "fp8_block")[0]


def test_blackwell_ultra_runs_its_products_sms_not_its_dies():
    """B300 and GB300 enable 148 and 152 of their die's 160 SMs (what CUDA reports, as B200
    and GB200 do): a grouped GEMM's waves on them are B200's and GB200's for the same tiles, so
    one more wave starts at the 149th / 153rd tile, not the 161st."""
    from epsim.cost.experts import num_sms
    from epsim.cost.quant import quant_expert_gemm
    assert (num_sms("B300"), num_sms("GB300")) == (num_sms("B200"), num_sms("GB200")) == (148, 152)
    for ultra, older in (("B300", "B200"), ("GB300", "GB200")):
        a, b = (quant_expert_gemm(7168, 2048, "fp8_block", num_sms(g), 8) for g in (ultra, older))
        tiles = np.array([1.0, 148.0, 149.0, 152.0, 153.0, 160.0, 161.0, 4096.0])
        np.testing.assert_array_equal(a.waves(tiles), b.waves(tiles))
    gemm = quant_expert_gemm(7168, 2048, "fp8_block", num_sms("B300"), 8)
    assert gemm.waves(np.array([149.0]))[0] > gemm.waves(np.array([148.0]))[0]


def test_bf16_experts_physics_is_unchanged():
    """A BF16 `ExpertGemm` moves 4H + 12I activation bytes per row and has no quantisation or
    scale-block term: the grouped GEMM the shipped fits were made with."""
    gemm = model_gemm(get_model("Qwen3-235B-A22B"), "H200")
    h, i = gemm.hidden_size, gemm.intermediate_size
    assert gemm.act_bytes_per_row == 4.0 * h + 12.0 * i
    assert gemm.quant_bytes_per_row == 0.0 and gemm.scale_block_k == 0
    assert not gemm.scale_blocks(np.array([3.0])).any()


def test_quant_expert_gemm_terms():
    g = quant_expert_gemm(7168, 2048, "fp8_block", 132, top_k=8)
    a = ACTIVATION_BYTES["fp8_block"]
    assert g.weight_bytes == pytest.approx(3 * 7168 * 2048 * weight_bytes_per_element("fp8_block"))
    assert g.act_bytes_per_row == pytest.approx((2 + a) * 7168 + (10 + a) * 2048)
    # hidden states quantised once per token (1/top_k of a row), the SwiGLU output per row
    assert g.quant_bytes_per_row == pytest.approx((2 + a) * (7168 / 8 + 2048))
    arrived = quant_expert_gemm(7168, 2048, "fp8_block", 132, top_k=8, input_quantised=True)
    assert arrived.quant_bytes_per_row == pytest.approx((2 + a) * 2048)
    assert g.scale_block_k == 128
    assert quant_expert_gemm(7168, 2048, "nvfp4", 148, 8).scale_block_k == 0


def test_experts_design_rows_times_coefficients_give_the_slowest_rank():
    rng = np.random.default_rng(2)
    gemm = quant_expert_gemm(7168, 2048, "fp8_block", 132, top_k=8)
    rates = absolute({**gemm_defaults(), **PARAMS}, H200, "fp8_block")
    for _ in range(20):
        counts = rng.integers(0, 300, size=(4, 8)).astype(float)        # [ranks, local experts]
        pairs, active = counts.sum(axis=1), (counts > 0).sum(axis=1).astype(float)
        tiles = np.array([row_tiles(c) for c in counts])
        rows = experts_quant_features(pairs, active, tiles, gemm, PARAMS, H200, "fp8_block")
        slowest = experts_rank_us(pairs, active, tiles, gemm, rates).max()
        assert rows @ EXPERT_QUANT_TERMS.coefficients(PARAMS) == pytest.approx(slowest)
    # the quantisation's bytes ride at the HBM rate: the design row's HBM column carries them
    one = experts_quant_features(np.array([64.0]), np.array([1.0]), np.array([1.0]), gemm, PARAMS,
                                 H200, "fp8_block")
    assert one[2] * H200.hbm_gbps >= 64 * gemm.quant_bytes_per_row * 1e-3


def test_layout_moves_every_received_token():
    assert layout_kb(1000, 7168, "fp8_block") == pytest.approx(
        1000 * (2 * (1 + 4 / 128) + 4) * 7168 * 1e-3)


def _fused_row(ep: int, tokens: int = 1024) -> np.ndarray:
    """The design row of an AIC-like fused-MoE fp8_block record of DeepSeek-V3's experts at EP
    `ep` (rank 0 of the group, balanced routing of the group's `tokens`)."""
    counts = balanced_counts(tokens, 256, 8).reshape(ep, 256 // ep)
    record = MeasurementRecord(
        kind="quant_experts", backend="local", median_us=1.0, timing="device", ep_size=ep,
        num_tokens_per_rank=-(-tokens // ep), hidden_size=7168, moe_intermediate_size=2048,
        num_experts=256, num_local_experts=256 // ep, top_k=8, weight_dtype="fp8_block",
        local_expert_tokens=counts.tolist(), expert_tokens_per_rank=counts.sum(axis=1).tolist(),
        extra={"measured_rank": 0, "num_tokens": tokens},
        provenance=Provenance(device="H200", hardware="H200"))
    return kernel_record_features(record, Profile(name="datasheet", hardware="H200")).row


def test_fused_kernel_runs_over_every_slot_of_the_group():
    """SGLang's fused MoE with no dispatch runs over all `T x top_k` slots: a remote slot's
    zeros (2I + H BF16), the SwiGLU over them (2I in, I out), their quantisation (I) and the
    top-k sum (H), and each token's hidden-state quantisation, at the HBM rate."""
    q = quant_bytes_per_element("fp8_block")
    assert remote_slot_bytes(7168, 2048, "fp8_block", 8, "H200") == pytest.approx(
        2 * (5 * 2048 + 2 * 7168) + q * (2048 + 7168 / 8))
    # Blackwell's SGLang runs FlashInfer's TRT-LLM MoE: not this kernel's work
    assert remote_slot_bytes(7168, 2048, "nvfp4", 8, "B200") == 0.0
    # the record path's Triton kernel streams its weights at the busiest SM's pace
    # (`ExpertGemm.sm_stream`, tests/epsim/cost/test_triton_sm_stream.py)
    one = replace(quant_expert_gemm(7168, 2048, "fp8_block", 132, top_k=8), sm_stream=True)
    for ep in (2, 8, 64):
        counts = balanced_counts(1024, 256, 8).reshape(ep, 256 // ep)
        pairs = counts[0].sum()
        local = experts_quant_features(np.array([pairs]), np.array([float((counts[0] > 0).sum())]),
                                       np.array([float(row_tiles(counts[0]))]), one,
                                       gemm_defaults(), H200, "fp8_block")
        # the HBM column gains the remote slots' bytes, nothing else moves
        extra = (1024 * 8 - pairs) * remote_slot_bytes(7168, 2048, "fp8_block", 8, "H200") * 1e-3
        got = _fused_row(ep)
        assert got[2] - local[2] == pytest.approx(extra / H200.hbm_gbps)
        assert np.array_equal(np.delete(got, 2), np.delete(local, 2))
    # EP 1: every slot is local, the fitted records' rows are unchanged
    counts = balanced_counts(1024, 256, 8)
    assert _fused_row(1)[2] == pytest.approx(experts_quant_features(
        np.array([counts.sum()]), np.array([float((counts > 0).sum())]),
        np.array([float(row_tiles(counts))]), one, gemm_defaults(), H200, "fp8_block")[2])


def test_simulator_prices_remote_slots_with_the_none_backend_only():
    def experts(backend: str, gpu: str = "H200"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cm = CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu=gpu),
                           DeploymentSpec(ep_size=8, moe_a2a_backend=backend,
                                          enable_dp_attention=True),
                           Profile(name="datasheet", hardware=gpu))
        return cm.params.step(True).experts
    none = experts("none")
    assert none.remote_slot_bytes == pytest.approx(
        remote_slot_bytes(7168, 2048, "fp8_block", 8, "H200"))
    assert experts("deepep").remote_slot_bytes == 0.0       # dispatched: only its own slots
    assert experts("none", "B200").remote_slot_bytes == 0.0  # FlashInfer's TRT-LLM MoE
    # the busiest rank (most pairs) runs over the rest of the group's slots: [layers]
    tr = SimpleNamespace(num_tokens=512.0, pairs=np.array([[600.0, 500.0], [400.0, 450.0]]))
    got = remote_slots_us(tr, 8, none)
    want = (512 * 8 - np.array([600.0, 450.0])) * none.remote_slot_bytes * 1e-3 \
        / none.params["hbm_gbps"]
    np.testing.assert_allclose(got, want)
