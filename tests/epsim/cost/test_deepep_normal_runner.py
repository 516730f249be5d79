"""DeepEP normal's MoE runner on block-FP8 experts as AIC's collector times it: DeepGEMM's
contiguous tiles (`CONTIGUOUS_BLOCK_M`), its layout's bytes at a rate of their own
(`layout_ratio`) and the eager call's host floor (`eager_floor`), fitted from known rows; the
simulator reads the layout at that rate and the GEMM at those tiles."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from epsim.calibrate.build import fit_records
from epsim.calibrate.holdout import Holdout
from epsim.calibrate.inputs import SourcedRecord
from epsim.cost.experts import even_experts_us, row_tiles
from epsim.cost.normal_runner import (CONTIGUOUS_BLOCK_M, EXPERT_LAYOUT_TERMS, contiguous_gemm,
                                      eager_floor, layout_rate_scale, unaligned_blocks)
from epsim.cost.quant import absolute, gemm_defaults, layout_kb, quant_expert_gemm
from epsim.cost.record import predict_record
from epsim.cost.record_kernels import kernel_record_features
from epsim.profile import Component, Profile
from epsim.records import MeasurementRecord, Provenance
from epsim.zoo import get_hardware

KEY = "deepep/experts_fp8_block/normal"
TRUTH = {"base_us": 90.0, "per_expert_us": 0.5, "hbm_frac": 0.8, "tensor_frac": 0.65,
         "wave_us": 0.0, "dequant_us": 0.0, "layout_ratio": 0.75, "host_us": 380.0}


def _record(ep: int, tokens_per_rank: int, experts: int = 256, top_k: int = 8):
    """Rank 0 of DeepEP normal at EP `ep`, H200, DeepSeek's shape, balanced rows."""
    local, tokens = experts // ep, tokens_per_rank * ep
    rows = [tokens * top_k / experts] * local
    return MeasurementRecord(
        kind="quant_experts", backend="deepep", mode="normal", median_us=100.0,
        timing="device", ep_size=ep, num_tokens_per_rank=tokens_per_rank, hidden_size=7168,
        moe_intermediate_size=2048, num_experts=experts, num_local_experts=local, top_k=top_k,
        weight_dtype="fp8_block", local_expert_tokens=[rows] * ep,
        expert_tokens_per_rank=[sum(rows)] * ep,
        extra={"measured_rank": 0, "num_tokens": tokens},
        provenance=Provenance(device="NVIDIA H200", hardware="H200"))


def _profile(**params) -> Profile:
    profile = Profile(name="t", hardware="H200")
    profile.components[KEY] = Component(params=params, source="fit")
    return profile


def test_eager_floor_keeps_the_floor_column_alone_under_the_floor():
    coef = np.array([1.0, 2.0, 100.0])
    short, long = np.array([10.0, 5.0, 0.0]), np.array([60.0, 30.0, 0.0])
    assert np.array_equal(eager_floor(short, coef), [0.0, 0.0, 1.0])     # 20 µs < 100
    assert np.array_equal(eager_floor(long, coef), long)                 # 120 µs >= 100
    assert np.array_equal(eager_floor(np.stack([short, long]), coef),
                          [[0.0, 0.0, 1.0], long])


def test_record_row_takes_the_contiguous_tiles_and_the_layout_at_its_own_rate():
    """EP 4, 2048 tokens a rank: 64 experts of 256 rows each, two 128-row tiles apiece; the
    layout's KB (the group's 8192 tokens) at the datasheet HBM rate in its own column."""
    rec = _record(4, 2048)
    row = kernel_record_features(rec, _profile(**TRUTH))
    assert row.coef_names == EXPERT_LAYOUT_TERMS.coef_names
    hw = get_hardware("H200")
    assert row.row[row.coef_names.index("layout_ratio")] == pytest.approx(
        layout_kb(8192.0, 7168, "fp8_block") / hw.hbm_gbps)
    assert row.row[row.coef_names.index("host_us")] == 0.0
    gemm = contiguous_gemm(quant_expert_gemm(7168, 2048, "fp8_block", 132, 8,
                                             input_quantised=True))
    assert gemm.tile_rows == CONTIGUOUS_BLOCK_M
    waves = gemm.waves(np.array([row_tiles(np.full(64, 256.0), CONTIGUOUS_BLOCK_M)]))
    assert row.row[row.coef_names.index("wave_us")] == pytest.approx(waves[0])
    short = kernel_record_features(_record(64, 16), _profile(**TRUTH))
    assert short.row[short.coef_names.index("host_us")] == 1.0 and short.row.sum() == 1.0
    assert float(predict_record(_record(64, 16), _profile(**TRUTH))) == pytest.approx(380.0)


def test_rows_priced_by_a_known_profile_fit_it_back():
    """Rows at EP 4-64 and 16-4096 tokens a rank from `TRUTH`: the fit returns the layout's
    ratio and the host floor, and prices the rows as they were made."""
    truth = _profile(**TRUTH)
    records = []
    for i, (ep, tokens) in enumerate((e, t) for e in (4, 8, 16, 32, 64)
                                     for t in (16, 64, 256, 1024, 4096)):
        rec = _record(ep, tokens)
        us = float(predict_record(rec, truth))
        records.append(SourcedRecord(rec.model_copy(update={"median_us": us}), "t", i))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = fit_records(records, [], Holdout(), name="t")
    got = cal.profile.components[KEY].params
    assert got["layout_ratio"] == pytest.approx(TRUTH["layout_ratio"], rel=0.05)
    assert got["host_us"] == pytest.approx(TRUTH["host_us"], rel=0.02)
    for s in records:
        assert float(predict_record(s.record, cal.profile)) == pytest.approx(s.measured_us,
                                                                            rel=0.03)


def test_simulator_layout_scale_gives_the_layout_its_own_rate():
    """`received_layout_us` divides by the experts' `hbm_frac x HBM`: the scale makes it the
    layout's `layout_ratio / HBM`; a profile without the ratio keeps the experts' rate."""
    hw = get_hardware("H200")
    rate = absolute({**gemm_defaults(), **TRUTH}, hw, "fp8_block")
    kb = layout_kb(1.0, 7168, "fp8_block")
    priced = kb * layout_rate_scale(TRUTH) / rate["hbm_gbps"]
    assert priced == pytest.approx(TRUTH["layout_ratio"] * kb / hw.hbm_gbps)
    assert layout_rate_scale({"hbm_frac": 0.8}) == 1.0


def test_simulator_prices_the_contiguous_runner_at_its_tiles():
    """The same rows cost no less at 128-row tiles than at 64 (more padded FLOPs) when
    compute-bound."""
    gemm = quant_expert_gemm(7168, 2048, "fp8_block", 132, 8, input_quantised=True)
    rate = absolute({**gemm_defaults(), **TRUTH}, get_hardware("H200"), "fp8_block")
    pairs, active = np.array([[64.0 * 130]]), np.array([[64.0]])
    assert even_experts_us(pairs, active, contiguous_gemm(gemm), rate) > \
        even_experts_us(pairs, active, gemm, rate)


def test_unpadded_rows_run_blocks_over_the_experts_at_their_first_rows():
    """AIC's collector lays each expert's rows out unpadded: DeepGEMM's contiguous GEMM runs
    `ceil(rows / 128)` blocks, each on the expert of its first row (`unaligned_blocks`)."""
    blocks, experts = unaligned_blocks(np.full(64, 64.0))      # EP 4, 512 tokens a rank
    assert (blocks[0], experts[0]) == (32.0, 32.0)              # padded: 64 blocks, 64 experts
    blocks, experts = unaligned_blocks(np.full(64, 128.0))     # 1024 tokens: aligned anyway
    assert (blocks[0], experts[0]) == (64.0, 64.0)
    blocks, experts = unaligned_blocks(np.full(8, 16.0))       # EP 32, 16 tokens: one block
    assert (blocks[0], experts[0]) == (1.0, 1.0)
    blocks, experts = unaligned_blocks(np.full(2, 300.0))      # 600 rows: 5 blocks, 2 experts
    assert (blocks[0], experts[0]) == (5.0, 2.0)


def test_normal_runner_takes_the_masked_runners_mma_rate():
    """DeepGEMM runs the contiguous and the masked layouts in one kernel (the GEMM type only
    its scheduler's), so DeepEP normal's fit holds the low-latency runner's `tensor_frac` of
    the same format (`epsim.calibrate.build.normal_runner_held`): its rows under the host
    floor cannot read it. Nothing is held for another component, or without that fit."""
    from types import SimpleNamespace

    from epsim.calibrate.build import normal_runner_held
    fits = {"deepep/experts_fp8_block/graph/low_latency":
            SimpleNamespace(params={"tensor_frac": 0.52, "dequant_us": 0.0, "base_us": 20.0})}
    assert normal_runner_held("deepep/experts_fp8_block/normal", fits) == {"tensor_frac": 0.52}
    assert normal_runner_held("deepep/experts_fp8_block/normal", {}) is None
    assert normal_runner_held("deepep/experts_fp8_block/graph/low_latency", fits) is None
    assert normal_runner_held("any/experts_fp8_block/graph", fits) is None
