"""SGLang's Triton fused MoE on Hopper streams each expert's block-FP8 weights through
`ceil(N / 128)` CTAs a GEMM, dealt round-robin over the SMs: the weight stream is priced at the
busiest SM's slices (`ExpertGemm.stream_kb`, `sm_stream`): AIC's rows of that kernel and the
simulator's `none` backend; other formats, GPUs and backends keep the flat stream."""

from __future__ import annotations

import dataclasses

import warnings

import numpy as np
import pytest

from epsim.cost import record_kernels
from epsim.cost.experts import _work
from epsim.cost.model import CostModel
from epsim.cost.quant import quant_expert_gemm
from epsim.cost.record_kernels import kernel_record_features
from epsim.profile import Component, Profile
from epsim.records import MeasurementRecord, Provenance
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, get_model

PARAMS = {"base_us": 10.0, "per_expert_us": 0.0, "hbm_frac": 0.8, "tensor_frac": 0.8,
          "wave_us": 0.0, "dequant_us": 0.0}


def _gemm(sm_stream: bool = True):
    """DeepSeek-V3's block-FP8 experts on an H200 (132 SMs): N 4096 / K 7168, N 7168 / K 2048."""
    return dataclasses.replace(quant_expert_gemm(7168, 2048, "fp8_block", 132, 8),
                               sm_stream=sm_stream)


def test_one_expert_streams_at_one_slice_a_sm():
    """1 expert: 32 + 56 CTAs, each GEMM one slice a SM, so 132 slices of each GEMM's bytes."""
    gemm = _gemm()
    per_elem = gemm.weight_bytes / (3 * 7168 * 2048)
    expect = 132 * (7168 * 128 + 2048 * 128) * per_elem * 1e-3
    assert gemm.stream_kb(1.0) == pytest.approx(expect)
    assert gemm.stream_kb(1.0) > gemm.weight_bytes * 1e-3      # a few CTAs: slower than HBM


def test_step_where_a_gemms_ctas_pass_a_multiple_of_the_sms():
    """8 experts: 256 CTAs of the first GEMM (2 a SM), 448 of the down (4); 9: 288 (3) and 504
    (4); 10: 320 (3) and 560 (5): the busiest SM gains a first-GEMM slice, then a down slice."""
    gemm = _gemm()
    per_elem = gemm.weight_bytes / (3 * 7168 * 2048)
    step = 132 * (7168 * 128 + 2048 * 128) * per_elem * 1e-3
    assert gemm.stream_kb(10.0) - gemm.stream_kb(8.0) == pytest.approx(step)
    assert gemm.stream_kb(9.0) - gemm.stream_kb(8.0) == pytest.approx(132 * 7168 * 128 * per_elem
                                                                       * 1e-3)


def test_many_experts_stream_at_their_bytes_and_never_below():
    """Past a few waves the slices fill the SMs: the bytes themselves, within a wave's worth."""
    gemm = _gemm()
    many = gemm.stream_kb(np.array([128.0, 256.0]))
    assert np.all(many >= np.array([128.0, 256.0]) * gemm.weight_bytes * 1e-3)
    assert many[1] / (256 * gemm.weight_bytes * 1e-3) < 1.02      # 8192 + 14336 CTAs, 1 %


def test_flat_stream_unchanged_without_sm_stream():
    gemm = _gemm(sm_stream=False)
    assert gemm.stream_kb(3.0) == 3.0 * gemm.weight_bytes * 1e-3
    mem_kb, _, _ = _work(np.array([24.0]), np.array([3.0]), np.array([3.0]), gemm)
    assert mem_kb[0] == (3.0 * gemm.weight_bytes + 24.0 * gemm.roofline_row_bytes) * 1e-3


def _record(gpu: str, fmt: str = "fp8_block") -> MeasurementRecord:
    """Rank 0 of EP 256 (1 local expert) on 8 group tokens, 8 rows on its expert."""
    return MeasurementRecord(
        kind="quant_experts", backend="local", median_us=50.0, timing="device", ep_size=256,
        num_tokens_per_rank=1, hidden_size=7168, moe_intermediate_size=2048, num_experts=256,
        num_local_experts=1, top_k=8, weight_dtype=fmt, local_expert_tokens=[[8.0]] * 256,
        expert_tokens_per_rank=[8.0] * 256, extra={"measured_rank": 0, "num_tokens": 8},
        provenance=Provenance(device=gpu, hardware=gpu))


def _profile(gpu: str, fmt: str = "fp8_block", **params) -> Profile:
    profile = Profile(name="t", hardware=gpu)
    profile.components[f"any/experts_{fmt}/graph"] = Component(params={**PARAMS, **params},
                                                                source="fit")
    return profile


def _plain_row(record: MeasurementRecord, profile: Profile, monkeypatch):
    """The record's row with no format streamed at the busiest SM's pace."""
    with monkeypatch.context() as m:
        m.setattr(record_kernels, "SM_STREAM_FORMATS", ())
        return kernel_record_features(record, profile)


def test_hopper_record_row_prices_the_busiest_sms_slices(monkeypatch):
    """The H200 row's memory column gains the busiest SM's extra KB at the datasheet HBM rate
    (its one expert: 132 slices of each GEMM, not one expert's bytes); the rows' and the remote
    slots' bytes as before."""
    record, profile = _record("H200"), _profile("H200", hbm_frac=0.2)   # memory-bound both ways
    row = kernel_record_features(record, profile)
    plain = _plain_row(record, profile, monkeypatch)
    hbm = row.coef_names.index("inv_hbm_frac")
    assert plain.row[row.coef_names.index("inv_tensor_frac")] == 0.0
    extra_kb = _gemm().stream_kb(1.0) - _gemm(sm_stream=False).stream_kb(1.0)
    assert row.row[hbm] - plain.row[hbm] == pytest.approx(extra_kb / get_hardware("H200").hbm_gbps)


def test_blackwell_and_other_formats_keep_the_flat_stream(monkeypatch):
    """B200 runs FlashInfer's TRT-LLM MoE, not the Triton kernel; per-channel FP8 on the H200
    is not among `SM_STREAM_FORMATS`: no busiest-SM slices either way."""
    for record, profile in ((_record("B200"), _profile("B200")),
                            (_record("H200", "fp8"), _profile("H200", "fp8"))):
        row = kernel_record_features(record, profile)
        assert np.array_equal(row.row, _plain_row(record, profile, monkeypatch).row)


def test_simulator_streams_so_with_the_none_backend_on_hopper_only():
    """DeepSeek-V3 (block-FP8) at EP 8: the H200's `none` backend runs the Triton kernel (busiest
    SM's slices); DeepEP's runner and the B200's TRT-LLM MoE keep the flat stream."""
    def gemm(gpu: str, backend: str):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu=gpu),
                             DeploymentSpec(ep_size=8, moe_a2a_backend=backend,
                                            enable_dp_attention=True),
                             Profile(name="datasheet", hardware=gpu)).params.gemm
    assert gemm("H200", "none").sm_stream
    assert gemm("H200", "none").stream_kb(1.0) > gemm("H200", "deepep").stream_kb(1.0)
    assert not gemm("H200", "deepep").sm_stream
    assert not gemm("B200", "none").sm_stream
