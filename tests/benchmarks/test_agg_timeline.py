"""benchmarks/agg_timeline.py: the measured closed loop read by Little's law (its recorded table
regenerates with benchmarks/mtp_b200_verify.py, tests/benchmarks/test_mtp_b200_verify.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from agg_timeline import measured_loop  # noqa: E402


def test_littles_law_splits_a_second_between_cycles_and_prompt_tokens():
    # 100 clients, ISL = OSL = 1000 (mean 900 each), TTFT 1 s, TPOT 10 ms: a cycle of
    # 1 + 899 x 0.01 = 9.99 s, 10.01 requests/s, 10.01 waiting out their TTFT (89.99 running),
    # 9009 prompt tokens/s; at 2 tokens a cycle 10.01 x 900 / (2 x 89.99) = 50.06 cycles/s
    row = SimpleNamespace(isl=1000, osl=1000, ttft_ms=1000.0, tpot_ms=10.0, concurrency=100)
    loop = measured_loop(row, 2.0, {"cycle_ms": 10.0, "prefill_us_per_token": 20.0})
    assert loop["requests_per_s"] == pytest.approx(100 / 9.99)
    assert loop["running"] == pytest.approx(100 - 100 / 9.99)
    assert loop["prompt_tokens_per_s"] == pytest.approx(900 * 100 / 9.99)
    assert loop["cycles_per_s"] == pytest.approx(50.06, abs=0.01)
    # epsim's 10 ms cycles take 0.5006 s of each second: the rest over 9009 prompt tokens is
    # 55.4 us a token; epsim's 20 us a prompt token take 0.180 s: the rest over 50.06 cycles
    # is 16.4 ms a cycle
    assert loop["prefill_us_per_token_if_cycle"] == pytest.approx(55.4, abs=0.1)
    assert loop["cycle_ms_if_prefill"] == pytest.approx(16.38, abs=0.01)
