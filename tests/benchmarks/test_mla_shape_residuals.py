"""benchmarks/mla_shape_residuals.py's `size_groups`: cells split at `SMALL_US` measured, each
group's mean absolute and signed error in per cent; `grid_offset` and `on_grid`: the replay grid
of Blackwell's one-call tables."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("mla_shape_residuals",
                                               ROOT / "benchmarks/mla_shape_residuals.py")
residuals = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(residuals)


def test_size_groups_split_at_small_us_with_mean_absolute_and_signed_error():
    small = residuals.SMALL_US / 2
    cells = [("bf16 KV", small, small * 1.2), ("bf16 KV", small, small * 0.9),
             ("bf16 KV", residuals.SMALL_US, residuals.SMALL_US * 0.9), ("fp8 KV", 100.0, 105.0)]
    groups = residuals.size_groups(cells)
    assert set(groups) == {("bf16 KV", "small"), ("bf16 KV", "large"), ("fp8 KV", "large")}
    n, mape, bias = groups["bf16 KV", "small"]
    assert n == 2 and mape == pytest.approx(15.0) and bias == pytest.approx(5.0)
    assert groups["bf16 KV", "large"] == (1, pytest.approx(10.0), pytest.approx(-10.0))
    assert groups["fp8 KV", "large"][1:] == (pytest.approx(5.0), pytest.approx(5.0))


def test_grid_offset_and_on_grid_recover_a_replay_grid():
    step = residuals.TIMING_STEP_US
    on = [0.3 + k * step for k in (2, 3, 5, 10)]            # Blackwell-like cells on the grid
    assert residuals.grid_offset(on) == pytest.approx(0.3)
    assert residuals.on_grid(on, 0.3) == 4
    half = [m + step / 2 for m in on]                       # half a step off: none on it
    assert residuals.on_grid(half, 0.3) == 0
    assert residuals.on_grid(on + half, residuals.grid_offset(on)) == 4
