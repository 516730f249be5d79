"""DeepGEMM's block-FP8 GEMM (`epsim.cost.deepgemm`): its SM90 and SM100 layout choice, the work
at that layout, and the design row the fit sees."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.deepgemm import (WIDE_BLOCK_M, deepgemm_runs, deepgemm_work, math_warpgroups,
                                 sm90_layout, sm100_layout)
from epsim.cost.dense_gemm import (DEEPGEMM_TERMS, GEMM_TERMS, dense_gemm_defaults,
                                   gemm_features, gemm_terms, gemm_us, gemm_work)
from epsim.zoo import get_hardware

PARAMS = {"base_us": 4.0, "hbm_frac": 0.7, "tensor_frac": 0.8, "epilogue_gbps": 40.0,
          "dequant_us": 0.13, "wide_block_us": 2.0}


def test_sm90_layout_splits_where_the_h100_table_steps():
    """H100, 16384 x 16384: m 129-192 runs multicast 64 x 192 tiles in two waves, m 193-256 one
    unicast wave of 256 x 128 (the table's 176 -> 356 µs step), m 512 two multicast waves."""
    for m in (129, 192):
        layout = sm90_layout(m, 16384, 16384, 132)
        assert (layout.block_m, layout.block_n, layout.cluster, layout.waves) == (64, 192, 2, 2)
    for m in (193, 256):
        layout = sm90_layout(m, 16384, 16384, 132)
        assert (layout.block_m, layout.block_n, layout.cluster, layout.waves) == (256, 128, 1, 1)
        assert layout.stages == 3              # 48 KB a stage beside the 64 KB output tile
    layout = sm90_layout(512, 16384, 16384, 132)
    assert (layout.block_m, layout.cluster, layout.waves) == (WIDE_BLOCK_M, 2, 2)


def test_sm90_layouts_obey_the_kernels_limits():
    for m in (1, 16, 33, 100, 1000, 5000):
        for n in (512, 1536, 7168, 16384):
            layout = sm90_layout(m, n, 7168, 132)
            assert layout.block_m <= 128 or layout.block_n <= 128
            assert layout.block_n <= 192 and layout.block_n % 16 == 0
            assert layout.stages >= 3
            assert layout.cluster == 1 or layout.waves > 1     # no multicast on one wave
            blocks = -(-m // layout.block_m) * -(-n // layout.block_n)
            assert layout.waves == -(-blocks // 132)


def test_sm100_layout_prefers_one_wave_then_multicast():
    layout = sm100_layout(1, 16384, 16384, 148)         # a decode: swapped, 16 token rows
    assert (layout.block_m, layout.block_n, layout.cluster, layout.waves) == (16, 128, 2, 1)
    layout = sm100_layout(256, 16384, 16384, 148)       # 2 x 74 tiles of 128 x 224: one wave
    assert (layout.block_m, layout.block_n, layout.waves) == (128, 224, 1)
    for m in (1, 64, 300, 4096):
        for n in (512, 4096, 16384):
            lay = sm100_layout(m, n, 4096, 148)
            assert lay.waves == -(-(-(-m // lay.block_m) * -(-n // lay.block_n)) // 148)


def test_work_counts_the_busiest_sms_tiles():
    m, n, k = np.array([0.0, 256.0, 512.0]), 16384, 16384
    waves, mflops, blocks, wide, epilogue = deepgemm_work(m, n, k, 132, "H100")
    assert waves[0] == mflops[0] == blocks[0] == wide[0] == epilogue[0] == 0.0   # no rows
    assert (waves[1], blocks[1], wide[1]) == (1, 128, 128)         # one unicast wave, wide
    assert epilogue[1] == pytest.approx(256 * 128 * 2 * 1e-3 / 2)  # two math warpgroups' halves
    assert mflops[1] == pytest.approx(132 * 2.0 * 256 * 128 * k * 1e-6)
    assert (waves[2], blocks[2], wide[2]) == (2, 256, 0)           # multicast: not wide
    # Blackwell has no wide tile
    assert deepgemm_work(m, n, k, 148, "B200")[3].max() == 0.0


def test_sm90_epilogue_is_written_by_its_math_warpgroups():
    """SM90: a CTA of up to 64 token rows has one math warpgroup, a larger one two, each writing
    its half of the tile's BF16 output; SM100's epilogue warps are one group whatever the tile."""
    assert math_warpgroups(sm90_layout(16, 7168, 2048, 132)) == 1
    assert math_warpgroups(sm90_layout(64, 7168, 2048, 132)) == 1
    assert math_warpgroups(sm90_layout(4096, 7168, 2048, 132)) == 2
    for m in (16.0, 64.0, 4096.0):
        hopper = sm90_layout(int(m), 7168, 2048, 132)
        tile_kb = hopper.waves * hopper.block_m * hopper.block_n * 2 * 1e-3
        assert deepgemm_work(np.array([m]), 7168, 2048, 132, "H200")[4][0] == pytest.approx(
            tile_kb / math_warpgroups(hopper))
        blackwell = sm100_layout(int(m), 7168, 2048, 148)
        assert deepgemm_work(np.array([m]), 7168, 2048, 148, "B200")[4][0] == pytest.approx(
            blackwell.waves * blackwell.block_m * blackwell.block_n * 2 * 1e-3)


def test_only_block_fp8_on_hopper_and_blackwell_is_deepgemm():
    assert deepgemm_runs("fp8_block", "H200") and deepgemm_runs("fp8_block", "GB300")
    assert not deepgemm_runs("fp8", "H200") and not deepgemm_runs("nvfp4", "B200")
    assert gemm_terms("fp8_block", "H100") is DEEPGEMM_TERMS
    assert gemm_terms("fp8_block", "") is GEMM_TERMS            # no GPU named: generic tile


def test_the_wide_tile_costs_its_k_blocks():
    """The unicast 256-row wave at m 256 pays `wide_block_us` per k-block; m 192's multicast
    tiles do not, so m 256 runs far longer than m 192 although it does a third more MMA."""
    h100 = get_hardware("H100")
    us = [gemm_us(gemm_work(np.array([m]), 16384, 16384, "fp8_block", 132, gpu="H100"),
                  PARAMS, h100, "fp8_block")[0] for m in (192.0, 256.0)]
    assert us[1] - us[0] > 0.8 * 128 * PARAMS["wide_block_us"]


def test_design_row_times_coefficients_is_the_time():
    for gpu, sms in (("H100", 132), ("B200", 148)):
        hw = get_hardware(gpu)
        work = gemm_work(np.array([1.0, 256.0, 1024.0, 16384.0]), 7168, 2048, "fp8_block", sms,
                         gpu=gpu)
        rows = gemm_features(work, PARAMS, hw, "fp8_block")
        assert rows.shape == (4, len(DEEPGEMM_TERMS.params))
        coef = DEEPGEMM_TERMS.coefficients({**dense_gemm_defaults(), **PARAMS})
        assert rows @ coef == pytest.approx(gemm_us(work, PARAMS, hw, "fp8_block"))
