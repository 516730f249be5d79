"""benchmarks/gemm_shape_residuals.py's `by_length`: cells binned by measured call length, each
bin's count and median signed error in per cent, empty bins left out."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("gemm_shape_residuals",
                                               ROOT / "benchmarks/gemm_shape_residuals.py")
residuals = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(residuals)


def test_by_length_bins_cells_by_call_length_with_their_median_error():
    cells = [(0.01, 0.10), (0.015, -0.02), (0.019, 0.04), (3.0, -0.12), (50.0, -0.2)]
    bins = residuals.by_length(cells, edges_ms=(0.0, 0.02, 1.0, 4.0, float("inf")))
    assert [(hi, n) for hi, n, _ in bins] == [(0.02, 3), (4.0, 1), (float("inf"), 1)]
    assert bins[0][2] == pytest.approx(4.0) and bins[1][2] == pytest.approx(-12.0)
