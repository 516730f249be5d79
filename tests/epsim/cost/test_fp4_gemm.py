"""The dense NVFP4 GEMM (`epsim.cost.fp4_gemm`): FlashInfer 0.6.12's CuTe-DSL tile heuristic
at the M bucket, and the operand bytes the busiest SM streams, which set its compute side."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.fp4_gemm import (SM_FILL_GBPS, cutedsl_tile, cutedsl_work, fed_tensor_frac)
from epsim.cost.dense_gemm import gemm_us, gemm_work
from epsim.cost.quant import ACTIVATION_BYTES
from epsim.zoo import get_hardware

A_F = ACTIVATION_BYTES["nvfp4"]            # 0.5 + 1/16 bytes per FP4 value with its scale


def test_tile_follows_flashinfers_rule():
    # 1024 x 16384 x 16384 on 148 SMs, score = prob_m ctas n_eff shape / (tile_m waves sms):
    # 128 x 256: 512 CTAs in 4 waves, 1024 * 512 * 0.595 / (128 * 4 * 148) = 4.11;
    # 128 x 192: 688 in 5, 4.09; 128 x 128: 1024 in 7, 3.95; 256 x 256: 256 in 2, 3.46
    assert cutedsl_tile(1024, 16384, 16384, 148) == (128, 256, False)
    # K <= 1024 halves a tile above 128 x 128: the 128 x 128 tile wins there
    assert cutedsl_tile(1024, 16384, 1024, 148) == (128, 128, False)
    # 8-aligned m in [8, 16] swaps A and B (the weights on the kernel's M); 1 and 4 do not
    assert cutedsl_tile(16, 4096, 7168, 148)[2]
    assert not cutedsl_tile(1, 4096, 7168, 148)[2] and not cutedsl_tile(4, 4096, 7168, 148)[2]
    # the tactic is the M bucket's: the largest power of two <= m, at most 4096
    assert cutedsl_tile(16384, 7168, 2048, 148) == cutedsl_tile(4096, 7168, 2048, 148)
    assert cutedsl_tile(1500, 7168, 2048, 148) == cutedsl_tile(1024, 7168, 2048, 148)


def test_feed_is_the_busiest_sms_tile_operands():
    m, n, k = np.array([0.0, 1024.0, 4096.0]), 16384, 7168
    waves, mflops, feed_kb = cutedsl_work(m, n, k, 148, A_F)
    assert waves[0] == mflops[0] == feed_kb[0] == 0.0            # no rows, no work
    # 4096 rows: 32 x 64 CTAs of 128 x 256 in ceil(2048 / 148) = 14 rounds, each streaming its
    # 128 rows of A and 256 columns of B over the whole K
    assert cutedsl_tile(4096, n, k, 148) == (128, 256, False)
    assert waves[2] == 14
    assert feed_kb[2] == pytest.approx(14 * (128 + 256) * k * A_F * 1e-3)
    assert mflops[2] == pytest.approx(14 * 148 * 2 * 128 * 256 * k * 1e-6)   # wave-quantised
    # a partial tile streams only the rows that exist: 1 row of A, not 128
    one = cutedsl_work(np.array([1.0]), 512, 16384, 148, A_F)[2][0]
    tile_n = cutedsl_tile(1, 512, 16384, 148)[1]
    assert one == pytest.approx((1 + tile_n) * 16384 * A_F * 1e-3)


def test_fed_rows_take_the_same_time_whatever_the_fp4_peak():
    """GB300 has 1.5x GB200's FP4 peak and the same SM count in this zoo's terms for the rule:
    a fed GEMM prices by its streamed bytes, so a faster MMA buys it nothing."""
    gb200, gb300 = get_hardware("GB200"), get_hardware("GB300")
    params = {"base_us": 4.0, "hbm_frac": 0.6, "tensor_frac": 1.0, "wave_us": 0.3,
              "dequant_us": 0.0, "sm_feed_gbps": 120.0}
    work = gemm_work(np.array([16384.0]), 16384, 7168, "nvfp4", 160)
    assert gemm_us(work, params, gb200, "nvfp4")[0] == pytest.approx(
        gemm_us(work, params, gb300, "nvfp4")[0])
    fast = gemm_us(work, {**params, "sm_feed_gbps": 240.0}, gb300, "nvfp4")[0]
    assert fast < gemm_us(work, params, gb300, "nvfp4")[0]
    # at the datasheet default (the SM's shared-memory bound) the MMA binds instead
    slow_mma = {**params, "tensor_frac": 0.3, "sm_feed_gbps": SM_FILL_GBPS}
    assert gemm_us(work, slow_mma, gb200, "nvfp4")[0] > gemm_us(work, slow_mma, gb300, "nvfp4")[0]


def test_fed_tensor_frac_is_the_widest_tiles_rate():
    # 120 GB/s x 148 SMs x (2 128 256 / (384 x 0.5625)) FLOP/B = 5.39 PFLOP/s of B200's 9
    assert fed_tensor_frac(120.0, 148, 9000.0, A_F) == pytest.approx(
        120.0 * 148 * 2 * 128 * 256 / (384 * A_F) * 1e-3 / 9000.0)
    assert fed_tensor_frac(1e4, 148, 9000.0, A_F) == 1.0          # never past the peak
