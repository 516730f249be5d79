"""The fused Triton MoE's default large tile: its records fit a component of their own."""

from __future__ import annotations

import dataclasses

from epsim.cost.experts import ExpertGemm
from epsim.fused_moe_config import DEFAULT_TILE, TUNED_BF16, record_default_tile, tuned_tile
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


def test_tuned_tile_takes_the_entry_nearest_m():
    """SGLang's `min(configs, key=|key - M|)`: the nearest key, the smaller of two as near,
    the last entry past the file's last key; None without a readable JSON."""
    assert tuned_tile("H100", 128, 768, 1024) == (64, 128)
    assert tuned_tile("H100", 128, 768, 1280) == (64, 128)          # 1024 and 1536 as near
    assert tuned_tile("H100", 128, 768, 16384) == (128, 256)
    assert tuned_tile("H100", 512, 2688, 16384) == (64, 128)
    assert tuned_tile("H100", 128, 704, 1024) == (128, 256)
    assert tuned_tile("B200", 128, 704, 16384) == (256, 256)
    assert tuned_tile("H200", 128, 704, 16384) == (64, 128)          # its file ends at 1024
    assert tuned_tile("H200", 128, 768, 1024) == (128, 256)          # triton_3_2_0, transcribed
    assert tuned_tile("H200", 128, 768, 16384) == (128, 256)
    assert tuned_tile("H200", 128, 768, 512) == (64, 128)
    assert tuned_tile("H200", 8, 14336, 4096) == (128, 256)          # the fork xbfs/sglang's copy
    assert tuned_tile("GB200", 8, 14336, 4096) is None               # no readable JSON


def test_feed_ratio_is_one_at_the_reference_tile_and_half_at_128_by_256():
    gemm = ExpertGemm(4096, 768, 3 * 4096 * 768 * 2.0, 132)
    assert gemm.feed_ratio == 1.0
    assert dataclasses.replace(gemm, tile_rows=128, tile_cols=256).feed_ratio == 0.5


def test_a_tuned_large_tile_is_priced_nearer_the_peak():
    """H100 E 128 N 768 at 16384 tokens runs the JSON's 128 x 256 tile: half its MFLOPs'
    time at the fitted rate, half at the datasheet peak (a fixed offset); at 1024 tokens its
    64 x 128 tile is the reference one, priced as before."""
    rates = {"base_us": 10.0, "per_expert_us": 0.0, "hbm_gbps": 3000.0, "tflops": 300.0,
             "wave_us": 0.0}
    profile = Profile(name="t", hardware="H100", components={
        "local/experts/graph": Component(params=rates, source="fit")})
    big = record_features(_record(16384, num_experts=128, inter=768, gpu="H100"), profile)
    mflops = 6 * 4096 * 768 * 16384 * 8 * 1e-6
    assert big.row[3] * big.coefficients[3] >= 0.5 * mflops / 300.0
    assert big.row[3] * big.coefficients[3] < 0.55 * mflops / 300.0
    assert big.offset_us >= 0.5 * mflops / 989.0 and big.offset_us < 0.55 * mflops / 989.0
    assert big.predicted_us < 0.75 * (10.0 + mflops / 300.0)
    mid = record_features(_record(1024, num_experts=128, inter=768, gpu="H100"), profile)
    assert mid.offset_us == 0.0
    pooled = record_features(_record(16384, num_experts=128, inter=768, gpu="H100"), profile,
                             "any/experts/graph")
    assert pooled.offset_us == 0.0                # the simulator's pooled kernel knows no tile
    assert pooled.row[3] > 1.9 * big.row[3]


def test_a_fused_moe_record_on_another_gpu_is_priced_at_the_fit_carried():
    """An H200 BF16 fused-MoE record priced with an H100-fitted profile (the system hold-out):
    the fit's HBM and tensor rates carried to the H200's datasheet (`carried_rates`), as an
    H200 profile holding them prices it; on its own GPU the fit prices it as it is."""
    from epsim.cost.experts import carried_rates
    from epsim.cost.record import predict_record
    from epsim.zoo import get_hardware

    rates = {"base_us": 10.0, "per_expert_us": 0.0, "hbm_gbps": 2800.0, "tflops": 300.0,
             "wave_us": 1.0}
    h100 = Profile(name="h100", hardware="H100",
                   components={"local/experts/graph": Component(params=rates, source="fit")})
    h200 = Profile(name="h200", hardware="H200", components={"local/experts/graph": Component(
        params=carried_rates(rates, get_hardware("H100"), get_hardware("H200")), source="fit")})
    small = _record(256, gpu="H200")                         # M <= E: memory-bound, small tile
    assert predict_record(small, h100) == predict_record(small, h200)
    assert predict_record(small, h100) < predict_record(_record(256, gpu="H100"), h100)


def test_h200_mixtral_runs_its_tuned_json_tile():
    """H200 E 8 N 14336 (Mixtral, sglang#2689's JSON): 128 x 256 from M 256, 64 x 128 at 128."""
    assert tuned_tile("H200", 8, 14336, 16384) == (128, 256)
    assert tuned_tile("H200", 8, 14336, 256) == (128, 256)
    assert tuned_tile("H200", 8, 14336, 128) == (64, 128)
    assert tuned_tile("H100", 8, 14336, 16384) is None
