"""benchmarks/silicon_ttft_load.py: Little's law's loop rate and the client buckets on exact
cases, and its recorded result regenerating from the whole-set record (all but the header line,
which names the machine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from tests.benchmarks.regenerate import assert_body_regenerates  # noqa: E402

import silicon_ttft_load as load  # noqa: E402


def test_rate_is_littles_law_at_the_harness_mean_output():
    # 100 clients, TTFT 1 s, TPOT 10 ms, OSL 1000: mean OSL 900 (uniform in [800, 1000]),
    # cycle 1 + 899 x 0.01 = 9.99 s
    assert load.rate_per_s(1000.0, 10.0, 100, 1000) == pytest.approx(100 / 9.99)


def test_buckets_close_at_their_tops():
    assert [load.bucket(n) for n in (1, 8, 16, 64, 128, 512, 513, 15000)] == [
        "1-8", "1-8", "16-64", "16-64", "128-512", "128-512", "> 512", "> 512"]


def test_recorded_result_regenerates(tmp_path):
    assert_body_regenerates("silicon_ttft_load.py", "silicon_ttft_load.md", tmp_path)
