"""FlashInfer's TRT-LLM MoE (Blackwell) re-reads its experts' weights once per extra token tile:
the tile is sized from the balanced share (`epsim.cost.quant.trtllm_tile`: one rung below its
power of two untuned, as AIC's tables ran; SGLang's autotune picks among the centre's
neighbours), so a hot expert of a skewed batch runs many small tiles; the tile also pads each
expert's rows (`ExpertGemm.tile_rows`). The fitter's design row carries the re-reads as a column
of their own on the roofline's memory side (`EXPERT_REREAD_TERMS`), Hopper's Triton kernel none."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from epsim.cost.experts import row_tiles
from epsim.cost.model import CostModel
from epsim.cost.quant import (EXPERT_FALLBACK_TERMS, EXPERT_FEED_TERMS, EXPERT_QUANT_TERMS,
                              EXPERT_REREAD_TERMS, quant_expert_gemm, trtllm_gemm, trtllm_tile)
from epsim.cost.rereads import _sparse_rereads, _whole_rows, reread_kb
from epsim.cost.record_kernels import kernel_record_features
from epsim.cost.tables import build_tables
from epsim.cost import contiguous_placement
from epsim.eplb import Placement
from epsim.profile import Component, Profile
from epsim.records import MeasurementRecord, Provenance
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, get_model

PROFILES = Path(__file__).resolve().parents[3] / "epsim" / "data" / "profiles"


def test_untuned_tile_is_one_rung_below_the_balanced_shares_power_of_two():
    """Centre `clamp(next_pow2(T k / E_local), 8, cap)` (cap 256 rows for NVFP4, 128 for FP8);
    with no tuned tactic the launcher runs the smallest candidate, centre / 2, floored at 8."""
    shares = np.array([0.5, 2.0, 8.0, 9.0, 33.0, 300.0])
    assert trtllm_tile(shares, "nvfp4", tuned=True).tolist() == [8, 8, 8, 16, 64, 256]
    assert trtllm_tile(shares, "fp8_block", tuned=True).tolist() == [8, 8, 8, 16, 64, 128]
    assert trtllm_tile(shares, "nvfp4").tolist() == [8, 8, 8, 8, 32, 128]
    assert trtllm_tile(shares, "fp8_block").tolist() == [8, 8, 8, 8, 32, 64]


def test_token_tile_pads_each_experts_rows():
    """Padded MFLOPs follow the kernel's token tile: 8 one-row experts in 8-row tiles do an
    eighth of the math of 64-row tiles (same waves)."""
    gemm = quant_expert_gemm(7168, 2048, "nvfp4", 148, 8)
    small = replace(gemm, tile_rows=8.0)
    rows = np.ones(8)
    assert row_tiles(rows, 8.0) == row_tiles(rows) == 8.0
    assert np.isclose(small.quantized_mflops(row_tiles(rows, 8.0)) * 8,
                      gemm.quantized_mflops(row_tiles(rows)))


def test_an_expert_rereads_its_weights_once_per_extra_tile():
    rows = np.array([[64.0, 8.0, 1.0, 0.0], [9.0, 0.0, 0.0, 0.0]])
    # 64 rows in 8-row tiles: 7 re-reads; 8 rows and 1 row: none; 9 rows: one
    assert reread_kb(rows, np.array([8.0, 8.0]), 1000.0).tolist() == [7.0, 1.0]


def _float_rereads(rows: np.ndarray, tile: np.ndarray, weight_bytes: float) -> np.ndarray:
    """`reread_kb`'s float formula, entry by entry: max(ceil(rows / tile - 1e-9) - 1, 0)."""
    extra = np.maximum(np.ceil(rows / tile[..., None] - 1e-9) - 1.0, 0.0)
    return extra.sum(axis=-1) * weight_bytes * 1e-3


def test_whole_rows_take_the_integer_path_with_the_float_formulas_bits():
    """Whole rows (exact draws) in power-of-two tiles are counted in integers: the same bits as
    the float formula, at every tile of the launcher's ladder and at row counts on, just
    above and just below each tile multiple; fractional rows or another tile take the float
    formula itself."""
    rng = np.random.default_rng(3)
    tiles = np.array([8.0, 16.0, 32.0, 64.0, 128.0, 256.0])
    rows = rng.integers(0, 700, (4, 6, 3, 64)).astype(np.float64)
    rows[..., :6] = tiles[:, None, None] * 3.0            # whole multiples of the tile ...
    rows[..., 6:12] = tiles[:, None, None] * 3.0 + 1.0    # ... one above ...
    rows[..., 12:18] = tiles[:, None, None] * 3.0 - 1.0   # ... and one below
    tile = np.broadcast_to(tiles[None, :, None], rows.shape[:-1])
    assert _whole_rows(rows, tile[..., None]) is not None
    assert np.array_equal(reread_kb(rows, tile, 7340.5), _float_rereads(rows, tile, 7340.5))
    stacked = np.stack([tile / 2.0, tile, tile * 2.0])    # candidate tiles on a leading axis
    assert np.array_equal(reread_kb(rows, stacked, 7340.5), _float_rereads(rows, stacked, 7340.5))
    for other_rows, other_tile in ((rows + 0.25, tile), (rows, tile * 1.5)):
        assert _whole_rows(other_rows, other_tile[..., None]) is None
        assert np.array_equal(reread_kb(other_rows, other_tile, 7340.5),
                              _float_rereads(other_rows, other_tile, 7340.5))


def test_candidate_tiles_sum_only_the_experts_past_the_smallest_tile_with_the_same_bits():
    """Candidate tiles on a leading axis (`trtllm_experts_us`'s four) over a decode batch's rows,
    most below the smallest tile: only the experts past it are summed (`_sparse_rereads`), the
    same bits as the float formula over every expert -- whole or fractional rows, tiles on the
    ladder or not, rows on and around tile multiples; a NaN row still propagates."""
    rng = np.random.default_rng(5)
    for fractional, scale in ((False, 1.0), (True, 1.0), (False, 1.5)):
        rows = rng.poisson(1.0, (4, 58, 4, 64)).astype(np.float64)
        rows[:, :, 0, :3] = [8.0, 9.0, 7.0]               # on, above and below the smallest
        rows[0, :, 1, 3] = rng.integers(9, 400, 58)       # a hot expert: many tiles
        if fractional:
            rows *= rng.random(rows.shape) * 0.5 + 0.75
        centre = rng.choice([8.0, 16.0, 32.0], rows.shape[:-1]) * scale
        tile = np.stack([np.maximum(centre / 2.0, 8.0), centre, centre * 2.0, centre * 4.0])
        assert _sparse_rereads(rows, tile) is not None
        assert np.array_equal(reread_kb(rows, tile, 7340.5), _float_rereads(rows, tile, 7340.5))
    rows[1, 2, 3, 4] = np.nan
    assert np.isnan(reread_kb(rows, tile, 7340.5)[:, 1, 2, 3]).all()


def _record(gpu: str, rows: list[float], tokens: int) -> MeasurementRecord:
    return MeasurementRecord(
        kind="quant_experts", backend="local", median_us=100.0, timing="device", ep_size=1,
        num_tokens_per_rank=tokens, hidden_size=7168, moe_intermediate_size=2048,
        num_experts=len(rows), num_local_experts=len(rows), top_k=8, weight_dtype="nvfp4",
        local_expert_tokens=[rows], expert_tokens_per_rank=[sum(rows)],
        extra={"measured_rank": 0, "num_tokens": tokens},
        provenance=Provenance(device=gpu, hardware=gpu))


def test_blackwell_rows_carry_the_rereads_at_the_datasheet_hbm_rate():
    """64 tokens x top-8 over 256 experts: a 2-row balanced share, 8-row tiles; a hot expert
    with 64 rows re-reads its weights 7 times, priced `reread_frac` x bytes / datasheet HBM."""
    rows = [64.0] + [2.0] * 224 + [0.0] * 31
    b200 = get_hardware("B200")
    weight = quant_expert_gemm(7168, 2048, "nvfp4", 148, 8).weight_bytes
    profile = Profile(name="t", hardware="B200")
    profile.components["any/experts_nvfp4/graph"] = Component(
        params={"base_us": 10.0, "hbm_frac": 0.9, "tensor_frac": 0.5, "reread_frac": 0.5},
        source="fit")
    row = kernel_record_features(_record("B200", rows, 64), profile)
    assert row.coef_names == EXPERT_FALLBACK_TERMS.coef_names  # NVFP4: its SMs' feed too
    reread = row.coef_names.index("reread_frac")
    assert np.isclose(row.row[reread], 7 * weight * 1e-3 / b200.hbm_gbps)
    without = dict(profile.components["any/experts_nvfp4/graph"].params, reread_frac=0.0)
    profile.components["any/experts_nvfp4/graph"] = Component(params=without, source="fit")
    base = kernel_record_features(_record("B200", rows, 64), profile)
    assert np.isclose(row.row @ row.coefficients - base.row @ base.coefficients,
                      0.5 * 7 * weight * 1e-3 / b200.hbm_gbps)


def test_trtllm_pads_the_intermediate_to_whole_k_steps():
    """The kernel's weight tiles are 128 deep along the intermediate: a MoE-TP share of 64 or 96
    runs as 128 (the weights too), 256 as itself; FP8-block's rows run beside the roofline,
    NVFP4's under it (`SERIAL_ROWS_FORMATS`)."""
    for fmt, serial in (("fp8_block", True), ("nvfp4", False)):
        for inter, padded in ((64, 128), (96, 128), (256, 256), (1856, 1920)):
            gemm = quant_expert_gemm(7168, inter, fmt, 148, 8)
            run = trtllm_gemm(gemm, 8.0, fmt, 8)
            assert run.intermediate_size == padded
            assert run.weight_bytes == pytest.approx(gemm.weight_bytes * padded / inter)
            assert run.tile_rows == 8.0 and run.serial_rows == serial
            assert run.scale_block_k == gemm.scale_block_k


def test_trtllm_rows_run_beside_the_roofline_and_waves_pay_per_tile_row():
    """The rows' activation bytes add to the roofline's max (their own kernels and tiles), and
    a compute-bound wave pays `wave_row_us` per row of its token tile: the design row's
    columns times the coefficients give the rank's time, bit for bit with the simulator's."""
    from epsim.cost.experts import experts_rank_us
    from epsim.cost.quant import absolute, experts_quant_features, gemm_defaults
    b200 = get_hardware("B200")
    params = {**gemm_defaults(), "base_us": 10.0, "hbm_frac": 0.8, "tensor_frac": 0.4,
              "wave_us": 0.1, "dequant_us": 0.2, "reread_frac": 0.5, "wave_row_us": 0.02,
                  "token_us": 0.0, "exit_us": 0.0}
    gemm = quant_expert_gemm(7168, 256, "fp8_block", 148, 8)
    pairs, active = np.array([[4096.0]]), np.array([[128.0]])
    for tile in (8.0, 64.0):
        run = trtllm_gemm(gemm, tile, "fp8_block", 8)
        tiles = active * np.ceil(pairs / active / tile)
        reread = np.array([reread_kb(np.full(128, 32.0), tile, run.weight_bytes)])
        row = experts_quant_features(pairs, active, tiles, run, params, b200, "fp8_block",
                                     reread=reread)
        rate = absolute(params, b200, "fp8_block")
        want = experts_rank_us(pairs, active, tiles, run, rate,
                               reread * 0.5 / b200.hbm_gbps)[..., 0]
        assert row[0] @ EXPERT_REREAD_TERMS.coefficients(params) == pytest.approx(want[0])
    # compute-bound (a slow tensor rate, no per-row wave cost): the rows' bytes add in full
    # beside the math, where under the roofline they would hide behind it
    slow = absolute({**params, "tensor_frac": 0.01, "wave_row_us": 0.0}, b200, "fp8_block")
    run = trtllm_gemm(gemm, 8.0, "fp8_block", 8)
    tiles = active * np.ceil(pairs / active / 8.0)
    beside = experts_rank_us(pairs, active, tiles, run, slow)
    under = experts_rank_us(pairs, active, tiles, replace(run, serial_rows=False), slow)
    serial = pairs * run.act_bytes_per_row * 1e-3 / slow["hbm_gbps"]
    assert beside - under == pytest.approx(serial, rel=1e-9)


def test_nvfp4_waves_cost_the_bytes_their_sms_stream():
    """NVFP4's TRT-LLM MoE at MoE-TP 32 (DeepSeek's 2048 / 32 = 64, padded to 128): each wave
    streams its token tile's rows and 128 weight columns over K into an SM, `(tile + 128) K a_f`,
    at `sm_feed_gbps`; at 64-row tiles that outlasts the MMA at the full FP4 peak, so the design
    row carries the KB in its feed column (not the MFLOPs), and the row times the coefficients is
    the rank's time. FP8-block's kernel has no feed term."""
    from epsim.cost.experts import experts_rank_us
    from epsim.cost.quant import absolute, experts_quant_features, gemm_defaults
    b200 = get_hardware("B200")
    params = {**gemm_defaults(), "base_us": 10.0, "hbm_frac": 0.9, "tensor_frac": 1.0,
              "wave_us": 0.3, "reread_frac": 0.5, "wave_row_us": 0.0, "token_us": 0.0, "exit_us": 0.0,
              "sm_feed_gbps": 110.0}
    # the finalize's bytes off the memory side (test_trtllm_finalize.py), so the feed is longer
    run = replace(trtllm_gemm(quant_expert_gemm(7168, 64, "nvfp4", 148, 8), 64.0, "nvfp4", 8),
                  finalize_bytes_per_row=0.0)
    pairs, active = np.array([[131072.0]]), np.array([[256.0]])
    tiles = active * np.ceil(pairs / active / 64.0)
    a_f = 0.5 + 1.0 / 16
    waves = (np.ceil(tiles * 2 / 148), np.ceil(tiles * 56 / 148))    # N 2 x 128, N 7168
    want_kb = sum(w * (64 + 128) * k * a_f * 1e-3 for w, k in zip(waves, (7168, 128)))
    assert run.feed_kb(tiles) == pytest.approx(want_kb, rel=1e-12)
    reread = np.zeros(1)
    row = experts_quant_features(pairs, active, tiles, run, params, b200, "nvfp4", reread=reread)
    names = EXPERT_FEED_TERMS.params
    assert row[0, names.index("sm_feed_gbps")] == pytest.approx(want_kb[0, 0])
    assert row[0, names.index("tensor_frac")] == 0.0
    want = experts_rank_us(pairs, active, tiles, run, absolute(params, b200, "nvfp4"))[..., 0]
    assert row[0] @ EXPERT_FEED_TERMS.coefficients(params) == pytest.approx(want[0])
    fp8 = trtllm_gemm(quant_expert_gemm(7168, 64, "fp8_block", 148, 8), 64.0, "fp8_block", 8)
    assert not fp8.sm_fed and not fp8.feed_kb(tiles).any()


def test_hopper_rows_have_no_reread_column():
    """Hopper's SGLang runs the Triton fused MoE (its tiles are fixed, not this heuristic)."""
    rows = [64.0] + [2.0] * 224 + [0.0] * 31
    record = _record("H200", rows, 64).model_copy(update={"weight_dtype": "fp8_block"})
    row = kernel_record_features(record, Profile(name="t", hardware="H200"))
    assert row.coef_names == EXPERT_QUANT_TERMS.coef_names


def _experts_us(profile: Profile, loads: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cost = CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="B200"),
                         DeploymentSpec(ep_size=1, quantization="nvfp4"), profile)
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 256, 1), 256, 1, 8))
    return float(cost.moe(loads, np.array([64.0]), tables, "decode").experts_us[0])


def test_simulator_prices_the_autotuned_tile_with_its_rereads():
    """SGLang's warm-up autotune keeps the fastest of the launcher's candidates {centre/2 ..
    4 centre}: 64 tokens x top-8 over 256 experts is a 2-row share (centre 8 rows, candidates
    8-32); one hot expert with 64 rows runs memory-bound, so the 32-row tile wins and re-reads
    its NVFP4 weights once, at the datasheet HBM over the shipped B200 fit's `reread_frac`; a
    balanced batch (2 rows each) none."""
    shipped = Profile.load(PROFILES / "aic_b200.json")
    frac = shipped.components["any/experts_nvfp4/graph"].params["reread_frac"]
    plain = Profile.load(PROFILES / "aic_b200.json")
    comp = plain.components["any/experts_nvfp4/graph"]
    plain.components["any/experts_nvfp4/graph"] = comp.model_copy(
        update={"params": {**comp.params, "reread_frac": 1e-12}})
    skewed = np.array([[64.0] + [2.0] * 224 + [0.0] * 31])
    balanced = np.full((1, 256), 2.0)
    weight = quant_expert_gemm(7168, 2048, "nvfp4", 148, 8).weight_bytes
    want = 1 * weight * 1e-3 * frac / get_hardware("B200").hbm_gbps
    assert _experts_us(shipped, skewed) - _experts_us(plain, skewed) == pytest.approx(want, rel=1e-6)
    assert _experts_us(shipped, balanced) == pytest.approx(_experts_us(plain, balanced))
