"""FlashInfer's TRT-LLM MoE on NVFP4 pays its down GEMM's BF16 output and the finalize kernel
that sums it beside the roofline (`epsim.cost.quant.finalize_bytes_per_row`): per row that does
not shrink with the intermediate, so MoE-TP's narrow experts keep it whole."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from epsim.cost.experts import experts_rank_us, serial_kb
from epsim.cost.quant import (EXPERT_FEED_TERMS, absolute, experts_quant_features,
                              finalize_bytes_per_row, gemm_defaults, quant_expert_gemm,
                              trtllm_gemm)
from epsim.zoo import get_hardware

PARAMS = {**gemm_defaults(), "base_us": 10.0, "hbm_frac": 0.9, "tensor_frac": 0.6,
          "wave_us": 0.3, "reread_frac": 0.1, "wave_row_us": 0.0, "token_us": 0.0,
          "exit_us": 0.0, "sm_feed_gbps": 110.0}


def test_finalize_bytes_are_the_down_output_read_and_summed():
    """`(2 + 2 / top_k) H`: the down GEMM's BF16 row read back and the token's row written once
    per `top_k` rows; NVFP4 carries them, FP8-block (its rows already apart) does not."""
    assert finalize_bytes_per_row(7168, 8) == pytest.approx(2.0 * 7168 * (1.0 + 1.0 / 8))
    nvfp4 = trtllm_gemm(quant_expert_gemm(7168, 128, "nvfp4", 148, 8), 128.0, "nvfp4", 8)
    fp8 = trtllm_gemm(quant_expert_gemm(7168, 128, "fp8_block", 148, 8), 128.0, "fp8_block", 8)
    assert nvfp4.finalize_bytes_per_row == finalize_bytes_per_row(7168, 8)
    assert fp8.finalize_bytes_per_row == 0.0
    pairs = np.array([131072.0])
    assert serial_kb(pairs, nvfp4)[0] == pytest.approx(131072 * finalize_bytes_per_row(7168, 8)
                                                       * 1e-3)


def test_finalize_is_beside_the_roofline_and_does_not_shrink_with_moe_tp():
    """At 16384 tokens, 256 experts, top-8 on B200, the GEMMs' math outlasting their memory side:
    the finalize adds the same µs at the intermediate of MoE-TP 16 (128) as at MoE-TP 2 (1024),
    its bytes at the fitted HBM rate; the design row times the coefficients is the rank's time
    with it."""
    b200 = get_hardware("B200")
    params = {**PARAMS, "tensor_frac": 0.02}              # math-bound: the roofline hides rows
    rate = absolute(params, b200, "nvfp4")
    pairs, active = np.array([[131072.0]]), np.array([[256.0]])
    tiles = active * np.ceil(pairs / active / 128.0)
    added = []
    for inter in (1024, 128):
        run = trtllm_gemm(quant_expert_gemm(7168, inter, "nvfp4", 148, 8), 128.0, "nvfp4", 8)
        bare = replace(run, finalize_bytes_per_row=0.0)
        t = experts_rank_us(pairs, active, tiles, run, rate)[0, 0]
        added.append(t - experts_rank_us(pairs, active, tiles, bare, rate)[0, 0])
        row = experts_quant_features(pairs, active, tiles, run, params, b200, "nvfp4",
                                     reread=np.zeros(1))
        assert row[0] @ EXPERT_FEED_TERMS.coefficients(params) == pytest.approx(t)
    want = 131072 * finalize_bytes_per_row(7168, 8) * 1e-3 / rate["hbm_gbps"]
    assert added == pytest.approx([want, want])
