"""FlashInfer's TRT-LLM MoE on NVFP4 moves its finalize's bytes (the down GEMM's BF16 rows read
back, each token's sum written) on the roofline's memory side (`epsim.cost.quant.
finalize_bytes_per_row`): per row that does not shrink with the intermediate, hidden under a
long-K GEMM's math, paid whole where MoE-TP's narrow experts leave the rows' bytes the longer."""

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
    assert not serial_kb(np.array([131072.0]), nvfp4).any()      # not beside the roofline


def test_finalize_is_on_the_memory_side_of_the_roofline():
    """16384 tokens, 256 experts, top-8 on B200 at MoE-TP 16's intermediate (128): with the MMA
    far faster than the bytes the finalize adds its KB at the fitted HBM rate; with it slow
    enough to outlast them, nothing. The design row times the coefficients is the rank's
    time either way."""
    b200 = get_hardware("B200")
    pairs, active = np.array([[131072.0]]), np.array([[256.0]])
    tiles = active * np.ceil(pairs / active / 128.0)
    run = trtllm_gemm(quant_expert_gemm(7168, 128, "nvfp4", 148, 8), 128.0, "nvfp4", 8)
    bare = replace(run, finalize_bytes_per_row=0.0)
    assert run.roofline_row_bytes == bare.roofline_row_bytes + finalize_bytes_per_row(7168, 8)
    added = []
    for params in ({**PARAMS, "sm_feed_gbps": 1e6, "wave_us": 0.0},      # memory-bound
                   {**PARAMS, "tensor_frac": 0.001}):                       # math-bound
        rate = absolute(params, b200, "nvfp4")
        t = experts_rank_us(pairs, active, tiles, run, rate)[0, 0]
        added.append(t - experts_rank_us(pairs, active, tiles, bare, rate)[0, 0])
        row = experts_quant_features(pairs, active, tiles, run, params, b200, "nvfp4",
                                     reread=np.zeros(1))
        assert row[0] @ EXPERT_FEED_TERMS.coefficients(params) == pytest.approx(t)
    hbm = absolute(PARAMS, b200, "nvfp4")["hbm_gbps"]
    want = 131072 * finalize_bytes_per_row(7168, 8) * 1e-3 / hbm
    assert added == pytest.approx([want, 0.0], abs=1e-9)
