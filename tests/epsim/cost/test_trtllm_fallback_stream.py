"""FlashInfer's TRT-LLM MoE with no tuned tactic (AIC's tables: no autotune pass) runs the
batched GEMM runner's default config at the launcher's fallback tile; at 64 and 128 rows that
config streams a partly filled tile's weights slower than the fitted HBM rate
(`epsim.cost.quant.FALLBACK_STREAM_TILES`, one `tile<t>_stream_ratio` each). The record path
carries the partial tiles' weights in the column of its fallback tile; the simulator, whose
served kernel autotunes, never reads them."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.fallback_stream import (FALLBACK_STREAM_PARAMS, fallback_stream_cols,
                                        partial_tile_kb)
from epsim.cost.quant import EXPERT_FALLBACK_TERMS, quant_expert_gemm
from epsim.cost.record_kernels import kernel_record_features
from epsim.zoo import get_hardware
from tests.epsim.cost.test_trtllm_remote_tokens import _experts_us, _profile, _record


def test_partial_tiles_are_the_active_experts_below_one_tile():
    """Rows 0 (idle), 3 and 63 fill less than a 64-row tile, 64 and 200 do not."""
    rows = np.array([0.0, 3.0, 63.0, 64.0, 200.0])
    assert partial_tile_kb(rows, 64.0, 1000.0) == pytest.approx(2.0)
    assert partial_tile_kb(rows, 256.0, 1000.0) == pytest.approx(4.0)


def test_columns_hold_the_weights_in_their_tiles_slot_only():
    gb200 = get_hardware("GB200")
    cols = fallback_stream_cols(np.array([32.0, 64.0, 128.0]), np.array([8.0, 8.0, 8.0]), gb200)
    us = 8.0 / gb200.hbm_gbps
    assert np.allclose(cols, [[0.0, 0.0], [us, 0.0], [0.0, us]])


def test_record_row_prices_its_fallback_tiles_partial_weights():
    """EP 32, 128 group tokens x top-8 over 256 experts (8 local, 4 rows each): the balanced
    share the launcher assumes is 128 rows, so the fallback tile is 64 and every local expert
    streams its weights through one partial tile, `tile64_stream_ratio` x those bytes at the
    datasheet HBM rate; the 128 column stays 0."""
    record = _record(32, 128)
    row = kernel_record_features(record, _profile(tile64_stream_ratio=0.5))
    assert row.coef_names == EXPERT_FALLBACK_TERMS.coef_names
    c64, c128 = (row.coef_names.index(p) for p in FALLBACK_STREAM_PARAMS)
    weight = quant_expert_gemm(7168, 2048, "nvfp4", 152, 8).weight_bytes
    assert row.row[c64] == pytest.approx(8 * weight * 1e-3 / get_hardware("GB200").hbm_gbps)
    assert row.row[c128] == 0.0
    plain = kernel_record_features(record, _profile())
    assert row.row @ row.coefficients - plain.row @ plain.coefficients == pytest.approx(
        0.5 * row.row[c64])


def test_fp8_block_rows_carry_no_fallback_stream():
    record = _record(32, 128).model_copy(update={"weight_dtype": "fp8_block"})
    row = kernel_record_features(record, _profile())
    assert not set(FALLBACK_STREAM_PARAMS) & set(row.coef_names)


def test_simulator_does_not_charge_the_untuned_config():
    """A served kernel autotunes its tile and config: the ratios leave the simulator's price."""
    assert _experts_us(_profile(tile64_stream_ratio=0.5, tile128_stream_ratio=0.5), 32, 128) == \
        pytest.approx(_experts_us(_profile(), 32, 128))
