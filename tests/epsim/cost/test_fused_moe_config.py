"""The fused Triton MoE's default large tile: its records fit a component of their own."""

from __future__ import annotations

from epsim.fused_moe_config import DEFAULT_TILE, TUNED_BF16, record_default_tile
from epsim.cost.record import record_features
from epsim.profile import Component, Profile, component_keys
from epsim.records import MeasurementRecord, Provenance


def _record(tokens: int, num_experts: int = 256, inter: int = 2048, gpu: str = "H200",
            kernel: str = "sglang_fused_moe_triton") -> MeasurementRecord:
    rows = [float(tokens * 8 // num_experts)] * num_experts
    return MeasurementRecord(
        kind="experts", backend="local", median_us=100.0, timing="device", ep_size=1,
        num_tokens_per_rank=tokens, hidden_size=4096, moe_intermediate_size=inter,
        num_experts=num_experts, num_local_experts=num_experts, top_k=8, weight_dtype="bf16",
        local_expert_tokens=[rows], expert_tokens_per_rank=[sum(rows)],
        extra={"measured_rank": 0, "num_tokens": tokens, "kernel": kernel},
        provenance=Provenance(device=gpu, hardware=gpu))


def test_default_tile_follows_get_default_config():
    """More tokens than experts and no tuned JSON: the large tile; M <= E, a tuned shape, or
    another kernel (our own bench's grouped GEMM): the kernel model's component."""
    assert record_default_tile(_record(1024))
    assert not record_default_tile(_record(256))                       # M <= E: small tile
    assert (128, 768) in TUNED_BF16["H200"]
    assert not record_default_tile(_record(1024, num_experts=128, inter=768))
    assert record_default_tile(_record(1024, num_experts=128, inter=768, gpu="GB200"))
    assert not record_default_tile(_record(1024, kernel="grouped_gemm"))


def test_h100_nemotron_super_shape_runs_its_tuned_json():
    """E 512 N 2688 has a tuned H100 JSON (triton_3_5_1): past M > E it runs the kernel
    model's component there, the default tile on an H200 (no JSON)."""
    assert not record_default_tile(_record(1024, num_experts=512, inter=2688, gpu="H100"))
    assert record_default_tile(_record(1024, num_experts=512, inter=2688, gpu="H200"))
    assert not record_default_tile(_record(256, num_experts=512, inter=2688, gpu="H200"))


def test_default_tile_records_fit_their_own_component_and_leave_the_pool_as_it_was():
    big, small = _record(1024), _record(64)
    assert component_keys(big) == [f"local/experts/graph/{DEFAULT_TILE}", "any/experts/graph"]
    assert component_keys(small) == ["local/experts/graph", "any/experts/graph"]


def test_default_tile_is_priced_with_its_own_rates_and_no_wave_term():
    """A slower tensor rate in the default tile's component prices its record slower, and
    leaves a record of the small tile as the kernel model prices it."""
    rates = {"base_us": 10.0, "per_expert_us": 0.0, "hbm_gbps": 4000.0, "tflops": 500.0,
             "wave_us": 1.0}
    slow = {**rates, "hbm_gbps": 2500.0, "tflops": 250.0, "wave_us": 0.0}
    profile = Profile(name="t", hardware="H200", components={
        "local/experts/graph": Component(params=rates, source="fit"),
        f"local/experts/graph/{DEFAULT_TILE}": Component(params=slow, source="fit")})
    big = record_features(_record(16384), profile)
    assert big.component == f"local/experts/graph/{DEFAULT_TILE}"
    assert big.row[4] == 0.0                      # no waves column
    flops_us = big.row[3] * big.coefficients[3]
    assert flops_us > 0.9 * 6 * 4096 * 2048 * 16384 * 8 / 250e12 * 1e6   # at its 250 TFLOP/s
    small = record_features(_record(64), profile)
    assert small.component == "local/experts/graph"
