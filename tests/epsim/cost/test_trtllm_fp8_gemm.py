"""FlashInfer's trtllm-gen FP8 block-scale dense GEMM (`epsim.cost.trtllm_fp8_gemm`): the token
tile `select_kernel_fp8` fixes by N / K, and the price that follows from it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from epsim.cost.experts import experts_defaults
from epsim.cost.trtllm_fp8_gemm import TrtllmFp8Gemm, gemm_us, mlp_us, token_tile
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
    hw = get_hardware("B200")
    params = {**experts_defaults(hw, "fp8_block"), "per_expert_us": 2.0, "wave_us": 0.5}
    return TrtllmFp8Gemm(params, hw.hbm_gbps, 148)


def test_the_price_grows_with_tokens_a_tile_at_a_time():
    kernel = _kernel()
    n, k = 7168, 2048                       # tile 16: each 16 rows stream the weight again
    m = np.arange(1, 257, dtype=np.float64)
    t = gemm_us(m, n, k, kernel)
    assert np.all(np.diff(t) >= 0)
    step = np.diff(t)                       # step[i]: from m = i + 1 to i + 2 rows
    first_rows = m[1:] % 16 == 1            # the step into a new 16-row tile
    assert step[first_rows].min() > 10 * step[~first_rows].max()
    # the same weight bytes and FLOPs on 32-row tiles (N / K 0.29) re-read half as often
    m = np.array([4096.0])
    assert gemm_us(m, 2048, 7168, kernel)[0] < gemm_us(m, 7168, 2048, kernel)[0]
    assert gemm_us(np.array([0.0]), n, k, kernel)[0] == 0.0


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


def test_the_field_prices_the_linears_where_the_profile_holds_the_trtllm_moe_fit():
    p = _params("B200", fp8_gemm_backend="flashinfer_trtllm")
    if p.step(False).experts.reread_gbps == 0:
        pytest.skip("the shipped B200 profile holds no TRT-LLM FP8-block MoE fit")
    assert p.fp8_gemm is not None and p.attention.mla.fp8_gemm is p.fp8_gemm
    plain = _params("B200")
    assert plain.fp8_gemm is None and plain.attention.mla.fp8_gemm is None
    # Hopper's profile fits no TRT-LLM MoE: the field has nothing to price it with
    assert _params("H200", fp8_gemm_backend="flashinfer_trtllm").fp8_gemm is None
