"""benchmarks/h200_fused_moe_tiles.py: the tile SGLang picks for AIC's collector (E 256) and for
the served kernel (E 257), and its recorded result regenerating from the installed
aiconfigurator-core's tables (all but the header line, which names the date and machine)."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_script
from tests.benchmarks.regenerate import assert_out_regenerates


def test_sglang_picks_the_first_nearest_key():
    tiles = load_script("h200_fused_moe_tiles")
    table = tiles.E256_N256_TRITON_3_1_0_BLOCK_M
    # 20 tokens lie 4 from 16 and 24 (first nearest: 16); 12 lies 4 from 8 and 16 (8)
    assert tiles.nearest(table, 20) == 16 and tiles.nearest(table, 12) == 64
    assert [tiles.nearest(table, t) for t in (1, 2, 4, 16, 64)] == [16, 16, 64, 16, 64]
    assert tiles.mape(tiles.np.array([0.9, 1.2])) == pytest.approx(15.0)


def test_recorded_result_regenerates(tmp_path):
    assert_out_regenerates("h200_fused_moe_tiles.py", "h200_fused_moe_tiles.md", tmp_path)
