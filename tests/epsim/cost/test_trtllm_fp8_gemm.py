"""FlashInfer's trtllm-gen FP8 block-scale dense GEMM (`epsim.cost.trtllm_fp8_gemm`): the token
tile `select_kernel_fp8` fixes by N / K, and the price that follows from it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from epsim.cost.trtllm_fp8_gemm import (HBM_EFF, LAUNCH_US, STEP_US, WAVE_US, TrtllmFp8Gemm,
                                        gemm_us, mlp_us, token_tile)
from epsim.zoo import get_hardware

# FlashInfer csrc/trtllm_gemm_runner.cu `select_kernel_fp8`: N / K >= 32 -> t128x8x128;
# N / K <= 2 -> t128x32x128 (low ratio); N >= 20000 -> t128x32x128 (large N); else t128x16x128
SELECT_KERNEL_FP8 = [
    ((32768, 1024), 8),       # ratio 32 exactly: the high-ratio kernel
    ((65536, 2048), 8),       # ratio 32 with N >= 20000: high ratio is tested first
    ((4096, 2048), 32),       # ratio 2 exactly: the low-ratio kernel
    ((2112, 7168), 32),       # DeepSeek's fused q_a/kv_a
    ((24576, 1536), 32),      # ratio 16, N >= 20000: the large-N kernel
    ((7168, 2048), 16),       # DeepSeek's o at TP 8: ratio 3.5, N < 20000
    ((4096, 512), 16),        # kv_b at TP 8: ratio 8
    ((19999, 1024), 16),      # just below the large-N bound
]


@pytest.mark.parametrize(("shape", "tile"), SELECT_KERNEL_FP8)
def test_token_tile_is_select_kernel_fp8s(shape, tile):
    assert token_tile(*shape) == tile


def _kernel() -> TrtllmFp8Gemm:
    return TrtllmFp8Gemm(148, get_hardware("B200").hbm_gbps, 50e6)


def test_a_decode_gemm_is_one_wave_of_k_steps():
    kernel = _kernel()
    # q_a/kv_a (n 2112, k 7168): 17 CTAs at 1-32 tokens, the weight's one stream then one
    # wave of 56 K steps; the activations' bytes aside, flat in the tokens
    m = np.array([1.0, 8.0, 32.0])
    t = gemm_us(m, 2112, 7168, kernel)
    stream_us = (2112 * 7168 + m * 7168 + 2 * m * 2112) / (HBM_EFF * 8000.0 * 1e3)
    np.testing.assert_allclose(t, LAUNCH_US + stream_us + 56 * STEP_US + WAVE_US)
    # the same weight bytes over a shorter K run fewer steps a CTA: cheaper at decode sizes
    assert gemm_us(np.array([8.0]), 7168, 2112, kernel)[0] < t[0]


def test_the_price_grows_a_wave_of_tiles_at_a_time():
    kernel = _kernel()
    n, k = 7168, 2048                       # tile 16: 56 CTAs a 16-row tile, 2 tiles a wave
    wave = 16 * STEP_US + WAVE_US
    m = np.arange(1, 257, dtype=np.float64)
    t = gemm_us(m, n, k, kernel)
    assert np.all(np.diff(t) >= 0)
    waves = np.ceil(np.ceil(m / 16) * 56 / 148)
    stream_us = (n * k + m * k + 2 * m * n) / (HBM_EFF * 8000.0 * 1e3)   # fits L2: read once
    np.testing.assert_allclose(t, LAUNCH_US + np.maximum((waves - 1) * wave, stream_us) + wave)
    assert gemm_us(np.array([0.0]), n, k, kernel)[0] == 0.0


def test_a_weight_past_l2_streams_from_hbm_each_tile_row():
    kernel = _kernel()
    n, k, m = 24576, 7168, 2048.0           # 176 MB > 50 MB: 64 passes of the weight
    stream_us = (n * k * 64 + m * k + 2 * m * n) / (HBM_EFF * 8000.0 * 1e3)
    assert gemm_us(np.array([m]), n, k, kernel)[0] == pytest.approx(
        LAUNCH_US + stream_us + 56 * STEP_US + WAVE_US)


def test_an_mlp_is_its_gate_up_and_down_gemms():
    kernel = _kernel()
    tokens = np.array([0.0, 64.0, 4096.0])
    want = gemm_us(tokens, 2 * 256, 7168, kernel) + gemm_us(tokens, 7168, 256, kernel)
    np.testing.assert_array_equal(mlp_us(tokens, 7168, 256, kernel), want)


def _params(gpu: str, **deployment):
    from epsim.sim.engine import Simulation
    from epsim.spec.scenario import scenario_from_dict
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # the profile's extrapolation notes
        sim = Simulation(scenario_from_dict({
            "name": "tp8", "model": "DeepSeek-R1", "cluster": {"gpu": gpu},
            "deployment": dict(tp_size=8, moe_tp_size=8, ep_size=1, enable_dp_attention=False,
                               moe_a2a_backend="none", quantization="fp8_block", **deployment),
            "workload": {"arrivals": {"kind": "concurrency", "clients": 4}, "duration_s": 1.0}},
            where="test"))
    return sim.cost_model.params


def test_the_field_prices_the_linears_on_the_clusters_gpu():
    p = _params("GB300", fp8_gemm_backend="flashinfer_trtllm")
    assert p.fp8_gemm is not None and p.attention.mla.fp8_gemm is p.fp8_gemm
    assert p.fp8_gemm.num_sms == 152           # GB300's enabled SMs, its own waves
    plain = _params("B200")
    assert plain.fp8_gemm is None and plain.attention.mla.fp8_gemm is None
