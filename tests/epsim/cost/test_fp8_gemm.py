"""The dense per-tensor FP8 GEMM on Hopper and Blackwell (`epsim.cost.fp8_gemm`): sgl-kernel's
CUTLASS tile by the token count, and the operand bytes the busiest SM streams, which bind a
decode's few tiles on Hopper and add to the HBM time on Blackwell."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from epsim.cost.dense_gemm import (FP4_GEMM_TERMS, SM100_FP8_TERMS, gemm_features, gemm_terms,
                                   gemm_us, gemm_work, sm_fed)
from epsim.cost.fp8_gemm import (LARGE_TILE, SMALL_TILE, SMALL_TILE_MAX_M, cutlass_fp8_tile,
                                 cutlass_fp8_work, quant_rows_in_flight, sm100_fp8_tile,
                                 sm100_fp8_work)
from epsim.zoo import get_hardware

PARAMS = {"base_us": 4.0, "hbm_frac": 0.7, "tensor_frac": 0.7, "wave_us": 0.3,
          "dequant_us": 0.0, "sm_feed_gbps": 140.0, "dram_us": 0.0, "cap_slowdown_ratio": 0.1}


def test_tile_steps_where_the_tables_do():
    assert cutlass_fp8_tile(1) == cutlass_fp8_tile(SMALL_TILE_MAX_M) == SMALL_TILE
    assert cutlass_fp8_tile(SMALL_TILE_MAX_M + 1) == cutlass_fp8_tile(16384) == LARGE_TILE


def test_feed_is_the_busiest_sms_tile_operands():
    m, n, k = np.array([0.0, 1.0, 4096.0]), 16384, 7168
    waves, mflops, feed_kb = cutlass_fp8_work(m, n, k, 132, 1.0)
    assert waves[0] == mflops[0] == feed_kb[0] == 0.0            # no rows, no work
    # one row: 256 CTAs of 64 columns in 2 rounds, each streaming 1 row of A and 64 of B
    assert waves[1] == 2
    assert feed_kb[1] == pytest.approx(2 * (1 + 64) * k * 1e-3)
    # 4096 rows: 32 x 128 CTAs of 128 x 128 in ceil(4096 / 132) = 32 rounds, wave-quantised
    assert waves[2] == 32
    assert feed_kb[2] == pytest.approx(32 * (128 + 128) * k * 1e-3)
    assert mflops[2] == pytest.approx(32 * 132 * 2 * 128 * 128 * k * 1e-6)


def test_hopper_and_blackwell_fp8_gemms_are_fed():
    assert sm_fed("fp8", "H200") and sm_fed("nvfp4", "B200") and sm_fed("fp8", "B200")
    assert not sm_fed("fp8_block", "H200") and not sm_fed("fp8", "A100")
    assert gemm_terms("fp8", "H100") is FP4_GEMM_TERMS
    assert gemm_terms("fp8", "GB200") is SM100_FP8_TERMS
    # no GPU named: the generic tile model, as before
    assert not gemm_work(np.array([1.0]), 4096, 4096, "fp8", 132).sm_fed


def test_sm100_tile_by_the_next_power_of_two():
    """`sm100_fp8_dispatch_bias`: 64 x 64 in 1 x 4 clusters to 16 rows, alone to 64, the 2-SM
    128 x 128 MMA (64 x 128 a CTA) to 256, the 2-SM 256 x 128 in 2 x 2 clusters above."""
    assert sm100_fp8_tile(1) == sm100_fp8_tile(16) == (64, 64, 1, 4)
    assert sm100_fp8_tile(17) == sm100_fp8_tile(64) == (64, 64, 1, 1)
    assert sm100_fp8_tile(65) == sm100_fp8_tile(256) == (64, 128, 2, 1)
    assert sm100_fp8_tile(257) == sm100_fp8_tile(16384) == (128, 128, 2, 2)


def test_sm100_work_rounds_of_clusters_and_the_weight_stream():
    m, n, k = np.array([0.0, 1.0, 128.0, 4096.0]), 16384, 16384
    waves, mflops, feed_kb = sm100_fp8_work(m, n, k, 148, 1.0)
    assert waves[0] == mflops[0] == feed_kb[0] == 0.0
    # one row: 64 clusters of 4 CTAs (64 x 256 each), 37 at once: 2 rounds of 64 weight columns
    assert waves[1] == 2 and feed_kb[1] == pytest.approx(2 * 64 * k * 1e-3)
    # 128 rows: 128 pairs of 128 x 128, 74 at once: 2 rounds, each SM loading half the B tile
    assert waves[2] == 2 and feed_kb[2] == pytest.approx(2 * 64 * k * 1e-3)
    # 4096 rows: 16 x 64 clusters of 256 x 256 over 37: 28 rounds of 128 x 128 a CTA
    assert waves[3] == 28
    assert mflops[3] == pytest.approx(28 * 37 * 4 * 2 * 128 * 128 * k * 1e-6)


def test_sm100_weight_stream_adds_to_hbm():
    """Blackwell: a decode's busiest SM's weight KB at `sm_feed_gbps` add to the bytes at the HBM
    rate (their sum, not the longer), and the activation quantisation runs at `quant_frac`."""
    b200 = get_hardware("B200")
    params = {**PARAMS, "sm_feed_gbps": 100.0, "quant_frac": 0.6}
    m, n, k = 1.0, 7168, 16384
    work = gemm_work(np.array([m]), n, k, "fp8", 148, gpu="B200")
    assert work.feed_adds
    hbm_us = work.mem_kb[0] / (params["hbm_frac"] * b200.hbm_gbps)
    feed_us = 64 * k * 1e-3 / params["sm_feed_gbps"]      # 112 CTAs: one round each
    quant_us = m * k * 3.0 * 1e-3 / (params["quant_frac"] * b200.hbm_gbps)
    expected = params["base_us"] + hbm_us + feed_us + quant_us
    assert gemm_us(work, params, b200, "fp8")[0] == pytest.approx(expected)
    # twice the SM feed rate saves exactly half the feed's time
    fast = gemm_us(work, {**params, "sm_feed_gbps": 200.0}, b200, "fp8")[0]
    assert expected - fast == pytest.approx(feed_us / 2)


def test_a_decode_on_few_tiles_is_priced_by_its_sms_stream():
    """One row on a narrow weight runs 8 CTAs: its time follows one SM's 64-column slice of
    the weight, K long, not the GPU's HBM: a 4x wider weight (32 CTAs, still one each) costs
    the same, and the time grows with K."""
    h200, slow = get_hardware("H200"), {**PARAMS, "sm_feed_gbps": 40.0}
    us = [gemm_us(gemm_work(np.array([1.0]), n, k, "fp8", 132, gpu="H200"), slow, h200,
                  "fp8")[0] for n, k in ((512, 16384), (2048, 16384), (512, 4096))]
    assert us[0] == pytest.approx(us[1], rel=0.01)
    assert us[2] < 0.5 * us[0]
    # the feed binds (the one 64 x 64 tile's MMA at 0.7 of the peak: 12.8 µs)
    expected = slow["base_us"] + (1 + 64) * 16384 * 1e-3 / slow["sm_feed_gbps"] + slow["wave_us"]
    assert us[0] == pytest.approx(expected, rel=0.01)     # + the row's quantisation bytes


def test_design_row_times_coefficients_is_the_time():
    h100 = get_hardware("H100")
    m = np.array([1.0, 64.0, 1024.0, 16384.0])
    work = gemm_work(m, 7168, 2048, "fp8", 132, gpu="H100")
    params = {**PARAMS, "dram_us": 1.0}        # the DRAM start's column too
    rows = gemm_features(work, params, h100, "fp8")
    assert rows.shape == (4, len(FP4_GEMM_TERMS.params))
    coef = gemm_terms("fp8", "H100").coefficients(params)
    assert rows @ coef == pytest.approx(gemm_us(work, params, h100, "fp8"))
    # Blackwell: the feed and the quantisation's own columns
    b200 = get_hardware("B200")
    params = {**params, "quant_frac": 0.6}
    fed = gemm_work(m, 7168, 2048, "fp8", 148, gpu="B200")
    rows = gemm_features(fed, params, b200, "fp8")
    assert rows.shape == (4, len(SM100_FP8_TERMS.params))
    coef = gemm_terms("fp8", "B200").coefficients(params)
    assert rows @ coef == pytest.approx(gemm_us(fed, params, b200, "fp8"))


def test_quantisation_rereads_its_input_where_the_rows_in_flight_overflow_l2():
    """`sgl_per_token_quant_fp8` reads each BF16 row twice: below 2 x 8 x 132 = 2112 tokens one a
    CTA (8 rows an SM in flight), from there one a warp (64 an SM). On an H100 (50 MB of L2) the
    second read of K-16384 rows comes from L2 at 1024 tokens (1024 x 32 KB) and from HBM again
    at 4096 (4096 x 32 KB): exactly `m k 2` bytes more at the HBM rate; K-2048 rows fit even
    64 an SM (8448 x 4 KB)."""
    h100 = get_hardware("H100")
    assert quant_rows_in_flight(np.array([1.0, 1024.0, 2111.0, 2112.0, 16384.0]), 132) \
        == pytest.approx([1.0, 1024.0, 1056.0, 2112.0, 8448.0])
    k, n = 16384, 512

    def extra_us(m, k):
        """Time over the same GEMM with its quantisation reading its input once."""
        work = gemm_work(np.array([m]), n, k, "fp8", 132, gpu="H100")
        once = replace(work, reread_kb=None)
        return gemm_us(work, PARAMS, h100, "fp8")[0] - gemm_us(once, PARAMS, h100, "fp8")[0]

    assert extra_us(1024.0, k) == 0.0
    rate_gbps = PARAMS["hbm_frac"] * h100.hbm_gbps
    assert extra_us(4096.0, k) == pytest.approx(4096 * k * 2 * 1e-3 / rate_gbps)
    assert extra_us(16384.0, 2048) == 0.0
    # BF16 weights quantise nothing; the block-FP8 GEMM's group quantisation reads once
    assert gemm_work(np.array([4096.0]), n, k, "bf16", 132, gpu="H100").reread_kb is None
    # and on Blackwell (126 MB, 148 SMs: 9472 rows of the warp kernel) the design row still
    # prices the time
    b200, m = get_hardware("B200"), np.array([1024.0, 16384.0])
    params = {**PARAMS, "quant_frac": 0.6}
    fed = gemm_work(m, n, k, "fp8", 148, gpu="B200")
    assert fed.reread_set_bytes[1] > b200.l2_bytes > fed.reread_set_bytes[0]
    rows = gemm_features(fed, params, b200, "fp8")
    assert rows @ gemm_terms("fp8", "B200").coefficients(params) == \
        pytest.approx(gemm_us(fed, params, b200, "fp8"))
