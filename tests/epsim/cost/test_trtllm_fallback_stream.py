"""FlashInfer's TRT-LLM MoE with no tuned tactic (AIC's tables: no autotune pass) runs the
batched GEMM runner's default config at the launcher's fallback tile; at its format's tiles (NVFP4
64 and 128 rows, FP8-block 16, 32 and 64) that config streams a partly filled tile's weights slower
than the fitted HBM rate (`epsim.cost.fallback_stream.FALLBACK_STREAM_TILES`, one
`tile<t>_stream_ratio` each). The record path
carries the partial tiles' weights in the column of its fallback tile; the simulator, whose
served kernel autotunes, never reads them."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.fallback_stream import (FALLBACK_STREAM_PARAMS, fallback_stream_cols,
                                        partial_tile_kb)
from epsim.cost.quant import EXPERT_FALLBACK_TERMS, EXPERT_REREAD_FALLBACK_TERMS, quant_expert_gemm
from epsim.cost.record_kernels import kernel_record_features
from epsim.zoo import get_hardware
from tests.epsim.cost.test_trtllm_remote_tokens import _experts_us, _profile, _record


def test_partial_tiles_are_the_active_experts_below_one_tile():
    """Rows 0 (idle), 3 and 63 fill less than a 64-row tile, 64 and 200 do not."""
    rows = np.array([0.0, 3.0, 63.0, 64.0, 200.0])
    assert partial_tile_kb(rows, 64.0, 1000.0) == pytest.approx(2.0)
    assert partial_tile_kb(rows, 256.0, 1000.0) == pytest.approx(4.0)


def test_columns_hold_the_weights_in_their_tiles_slot_only():
    """Columns tile16, tile32, tile64, tile128: NVFP4 prices only its 64 and 128 rows, FP8-block
    (its ladder capped at 128: fallback tiles 8-64) its 16, 32 and 64."""
    gb200 = get_hardware("GB200")
    assert FALLBACK_STREAM_PARAMS == tuple(f"tile{t}_stream_ratio" for t in (16, 32, 64, 128))
    tiles, kb = np.array([16.0, 32.0, 64.0, 128.0]), np.full(4, 8.0)
    us = 8.0 / gb200.hbm_gbps
    assert np.allclose(fallback_stream_cols(tiles, kb, gb200, "nvfp4"),
                       [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, us, 0], [0, 0, 0, us]])
    assert np.allclose(fallback_stream_cols(tiles, kb, gb200, "fp8_block"),
                       [[us, 0, 0, 0], [0, us, 0, 0], [0, 0, us, 0], [0, 0, 0, 0]])


def test_record_row_prices_its_fallback_tiles_partial_weights():
    """EP 32, 128 group tokens x top-8 over 256 experts (8 local, 4 rows each): the balanced
    share the launcher assumes is 128 rows, so the fallback tile is 64 and every local expert
    streams its weights through one partial tile, `tile64_stream_ratio` x those bytes at the
    datasheet HBM rate; the 128 column stays 0."""
    record = _record(32, 128)
    row = kernel_record_features(record, _profile(tile64_stream_ratio=0.5))
    assert row.coef_names == EXPERT_FALLBACK_TERMS.coef_names
    c64, c128 = (row.coef_names.index(p) for p in ("tile64_stream_ratio", "tile128_stream_ratio"))
    weight = quant_expert_gemm(7168, 2048, "nvfp4", 152, 8).weight_bytes
    assert row.row[c64] == pytest.approx(8 * weight * 1e-3 / get_hardware("GB200").hbm_gbps)
    assert row.row[c128] == 0.0
    plain = kernel_record_features(record, _profile())
    assert row.row @ row.coefficients - plain.row @ plain.coefficients == pytest.approx(
        0.5 * row.row[c64])


def test_fp8_block_rows_price_their_fallback_tiles_partial_weights():
    """The same EP 32 row on FP8-block weights: its fallback tile is 64 rows too (the share's
    centre 128, the ladder's cap), its column holds the 8 local experts' FP8 weights; no SM feed
    column (`EXPERT_REREAD_FALLBACK_TERMS`)."""
    record = _record(32, 128).model_copy(update={"weight_dtype": "fp8_block"})
    row = kernel_record_features(record, _profile())
    assert row.coef_names == EXPERT_REREAD_FALLBACK_TERMS.coef_names
    weight = quant_expert_gemm(7168, 2048, "fp8_block", 152, 8).weight_bytes
    assert row.row[row.coef_names.index("tile64_stream_ratio")] == pytest.approx(
        8 * weight * 1e-3 / get_hardware("GB200").hbm_gbps)
    assert row.row[row.coef_names.index("tile32_stream_ratio")] == 0.0


def test_simulator_does_not_charge_the_untuned_config():
    """A served kernel autotunes its tile and config: the ratios leave the simulator's price."""
    assert _experts_us(_profile(tile64_stream_ratio=0.5, tile128_stream_ratio=0.5), 32, 128) == \
        pytest.approx(_experts_us(_profile(), 32, 128))
