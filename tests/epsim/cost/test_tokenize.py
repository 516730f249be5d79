"""The server's tokenisation price (`epsim.cost.tokenize`): the record's medians, interpolated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from epsim.cost.tokenize import LENGTHS_TOKENS, MEDIAN_US, tokenize_s

RECORD = Path(__file__).resolve().parents[3] / "benchmarks/results/server_tokenize/medians.json"


def test_the_module_holds_the_records_medians():
    record = json.loads(RECORD.read_text())
    assert tuple(record["lengths"]) == LENGTHS_TOKENS
    assert tuple(record["median_us"]) == MEDIAN_US


def test_measured_lengths_cost_their_median_and_the_rest_interpolates():
    assert tokenize_s(np.asarray(LENGTHS_TOKENS)) == pytest.approx(np.asarray(MEDIAN_US) * 1e-6)
    assert tokenize_s(0) == 0.0
    # between two measured lengths: on the segment
    mid = (LENGTHS_TOKENS[2] + LENGTHS_TOKENS[3]) // 2
    assert tokenize_s(mid) == pytest.approx((MEDIAN_US[2] + MEDIAN_US[3]) / 2 * 1e-6)
    # beyond the longest: the last segment's rate
    rate = (MEDIAN_US[-1] - MEDIAN_US[-2]) / (LENGTHS_TOKENS[-1] - LENGTHS_TOKENS[-2])
    assert tokenize_s(2 * LENGTHS_TOKENS[-1]) == pytest.approx(
        (MEDIAN_US[-1] + LENGTHS_TOKENS[-1] * rate) * 1e-6)
    costs = tokenize_s(np.arange(0, 40_000, 97))
    assert np.all(np.diff(costs) >= 0)
