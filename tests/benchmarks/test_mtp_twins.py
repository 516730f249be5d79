"""benchmarks/mtp_twins.py: MTP rows paired with their no-MTP twins on a small record, and its
recorded result regenerating from the committed whole-set record (all but the line that names
the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import mtp_twins as twins  # noqa: E402

MTP_FLAGS = ["server flags: speculative_num_steps 2, speculative_eagle_topk 1"]


def _entry(mode: str, clients: int, measured: float, epsim: dict) -> dict:
    return {"system": "b200_sxm", "mode": mode, "precision": "fp8", "isl": 1024, "osl": 1024,
            "layout": "tp8 dp1 moe_tp8 ep1", "concurrency": clients,
            "measured": {"tpot_ms": measured}, "epsim": epsim}


def _predicted(tpot_ms: float, mtp: bool) -> dict:
    return {"status": "predicted", "tpot_ms": tpot_ms, "assumptions": MTP_FLAGS if mtp else []}


def test_twins_pair_by_deployment_and_clients():
    rows = [
        _entry("disagg", 16, 10.0, _predicted(8.0, mtp=True)),      # epsim / measured 0.8
        _entry("disagg", 16, 10.0, _predicted(8.0, mtp=True)),      # the same run again: once
        _entry("disagg", 16, 20.0, _predicted(20.0, mtp=False)),    # no-MTP twins: 1.0 and 1.21
        _entry("disagg", 16, 22.0, _predicted(26.62, mtp=False)),
        _entry("disagg", 32, 10.0, _predicted(9.0, mtp=True)),      # no twin at 32: left out
        {**_entry("disagg", 16, 5.0, _predicted(5.0, mtp=False)), "layout": "other"},
    ]
    both = {"status": "approximated", "tpot_ms": 6.0, "assumptions": [], "spread": {"candidates": [
        {"deployment": "without MTP, as dsr1-fp8-b200-sglang ran it", "tpot_ms": 8.0},
        {"deployment": "with MTP, as dsr1-fp8-b200-sglang-mtp ran it", "tpot_ms": 5.0}]}}
    rows += [_entry("agg", 4, 10.0, both), _entry("agg", 4, 6.25, both)]
    got = {(f["mode"], f["clients"], f["kind"]): f for f in twins.twin_factors(rows)}
    assert set(got) == {("disagg", 16, "twin"), ("agg", 4, "ambiguous")}
    disagg = got[("disagg", 16, "twin")]
    # the no-MTP side is the geometric mean of 1.0 and 1.21 (1.1): F = 0.8 / 1.1
    assert disagg["mtp"] == pytest.approx(0.8) and disagg["base"] == pytest.approx(1.1)
    assert disagg["factor"] == pytest.approx(0.8 / 1.1)
    agg = got[("agg", 4, "ambiguous")]      # the lower measured read as MTP's: 5 / 6.25, 8 / 10
    assert (agg["mtp"], agg["base"], agg["factor"]) == pytest.approx((0.8, 0.8, 1.0))
    assert twins.implied_accept(list(got.values())) == {"1024/1024": pytest.approx(twins.ACCEPT_LENGTH)}
    assert twins.ACCEPT_LENGTH == pytest.approx(2.17, abs=0.005)   # random_chat at 2 steps


def test_recorded_result_regenerates(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/mtp_twins.py")], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = (ROOT / "benchmarks/results/mtp_twins.md").read_text().splitlines()
    assert done.stdout.splitlines() == recorded[4:]     # title, blank, command line, blank
