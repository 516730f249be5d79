"""benchmarks/fused_moe_rate_by_tokens.py: one row per format and shape from AIC's fused Triton MoE
table, the non-gated shape left out, and the BF16 default tile's fall at large M beside block-FP8's
held rate on the same shape (docs/calibration.md, "Blackwell's default-tile misses at large M are
not the collector's clock")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

pytest.importorskip("aiconfigurator_core")          # its MoE op tables are what is read

from benchmarks.fused_moe_rate_by_tokens import rate_table  # noqa: E402


def _rates(lines: list[str], prefix: str) -> dict[int, float]:
    """{tokens: TFLOP/s} of the table row starting with `prefix`."""
    tokens = [int(t) for t in lines[2].strip("|").split("|")[5:]]
    row = next(line for line in lines if line.startswith(prefix))
    cells = [c.strip() for c in row.strip("|").split("|")[5:]]
    return {t: float(c.split("/")[1]) for t, c in zip(tokens, cells) if c}


def test_b200_bf16_default_tile_falls_where_block_fp8_holds():
    lines = rate_table("b200_sxm")
    bf16 = _rates(lines, "| bfloat16 | 8 | 14336 | 4096 | 2 |")
    fp8 = _rates(lines, "| fp8_block | 8 | 14336 | 4096 | 2 |")
    assert bf16[16384] < 0.7 * bf16[2048]          # 289 against 452 TFLOP/s
    assert fp8[16384] >= fp8[2048]                 # 994 against 907: a longer call, no fall


def test_non_gated_shape_is_left_out():
    lines = rate_table("h100_sxm")
    assert not any(line.split("|")[2:4] == [" 512 ", " 2688 "] for line in lines)
    assert any(line.startswith("| bfloat16 | 8 | 14336 |") for line in lines)


def test_recorded_result_regenerates():
    from benchmarks.fused_moe_rate_by_tokens import SYSTEMS
    recorded = (ROOT / "benchmarks/results/fused_moe_rate_by_tokens.md").read_text().splitlines()
    fresh = [line for system in SYSTEMS for line in rate_table(system)]
    assert recorded[4:] == fresh
