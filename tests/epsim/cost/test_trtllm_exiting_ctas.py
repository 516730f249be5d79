"""FlashInfer's TRT-LLM MoE launches each batched GEMM's token dimension at its worst case,
`min(E_l, T k) + floor((T k - E_l) / tile)` tiles (`Routing::getMaxNumCtasInBatchDim`); the
CTAs past the live tiles start and exit, one per weight-column tile, spread over the SMs
(`epsim.cost.exiting_ctas`, `exit_us` each). The record path and the simulator's `none`
backend price the same count over the input's slots (the group's tokens)."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.exiting_ctas import exiting_ctas_per_sm, launched_tiles
from epsim.cost.experts import num_sms
from epsim.cost.moe import TRTLLM_SCALES
from epsim.cost.quant import (EXPERT_FALLBACK_TERMS, EXPERT_FEED_TERMS, quant_expert_gemm,
                              trtllm_gemm, trtllm_ladder, trtllm_tile)
from epsim.cost.record_kernels import kernel_record_features
# the same records (AIC's balanced rows) and DeepSeek-V3 stage as the remote-token term's
from tests.epsim.cost.test_trtllm_remote_tokens import _experts_us, _profile, _record

# DeepSeek's weight-column tiles: gate+up 2 x 2048 / 128 = 32, down 7168 / 128 = 56
COLUMNS = 32 + 56


def test_launch_is_the_worst_case_over_the_inputs_slots():
    """64 local experts, 4096 tokens x top-8, 128-row tiles: 64 + floor(32704 / 128) = 319;
    fewer slots than experts: one tile a slot, nothing more."""
    assert launched_tiles(32768.0, 64, 128.0) == 319.0
    assert launched_tiles(40.0, 64, 128.0) == 40.0
    gemm = quant_expert_gemm(7168, 2048, "nvfp4", 148, 8)
    # live tiles above the launch (never in the runner) price no CTA, not a negative one
    assert exiting_ctas_per_sm(40.0, 64, 64.0, 128.0, gemm) == 0.0
    assert exiting_ctas_per_sm(32768.0, 64, 64.0, 128.0, gemm) == pytest.approx(
        255 * COLUMNS / 148)


def test_record_row_carries_the_exiting_ctas_per_sm_priced_at_exit_us():
    """EP 4, 4096 tokens: 64 local experts of 128 rows at the fallback 128-row tile, 64 live
    tiles of 319 launched -> 255 x 88 columns over GB200's SMs exit; at EP 1 (256 experts of
    128 rows, 64-row tiles: 512 live of 256 + floor(32512 / 64) = 764) 252 x 88."""
    exit_col = EXPERT_FEED_TERMS.params.index("exit_us")
    row = kernel_record_features(_record(4, 4096), _profile(exit_us=0.5))
    assert row.coef_names == EXPERT_FALLBACK_TERMS.coef_names
    assert row.row[exit_col] == pytest.approx(255 * COLUMNS / num_sms("GB200"))
    plain = kernel_record_features(_record(4, 4096), _profile())
    assert row.row @ row.coefficients - plain.row @ plain.coefficients == pytest.approx(
        0.5 * 255 * COLUMNS / num_sms("GB200"))
    one = kernel_record_features(_record(1, 4096), _profile(exit_us=0.5))
    assert one.row[exit_col] == pytest.approx(252 * COLUMNS / num_sms("GB200"))


def test_fp8_block_rows_carry_no_exiting_ctas():
    """The column is priced where the EP > 1 tables fit it (NVFP4); FP8-block's is 0."""
    record = _record(4, 4096).model_copy(update={"weight_dtype": "fp8_block"})
    row = kernel_record_features(record, _profile())
    assert row.row[row.coef_names.index("exit_us")] == 0.0


def test_simulator_charges_the_exiting_ctas_inside_the_autotuners_choice():
    """EP 4, 2048 group tokens on every rank (64 local experts, 64 rows each): the autotuner
    keeps the cheapest of its four tiles, so the term adds between the fewest and the most
    exiting CTAs of those tiles, `exit_us` each -- more than 0: the group's 16384 slots
    launch far more tiles than the rank's 4096 fill."""
    gemm = trtllm_gemm(quant_expert_gemm(7168, 2048, "nvfp4", num_sms("GB200"), 8), 128.0,
                       "nvfp4", 8)
    tiles = trtllm_ladder(trtllm_tile(2048 * 8 / 64, "nvfp4", tuned=True) * TRTLLM_SCALES,
                          "nvfp4")
    live = 64 * np.ceil(64.0 / tiles)
    exiting = exiting_ctas_per_sm(2048 * 8.0, 64, live, tiles, gemm)
    added = _experts_us(_profile(exit_us=0.5), 4, 2048) - _experts_us(_profile(), 4, 2048)
    assert 0.5 * exiting.min() - 1e-9 <= added <= 0.5 * exiting.max() + 1e-9
    assert added > 0.0
