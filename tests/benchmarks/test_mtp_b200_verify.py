"""benchmarks/mtp_b200_verify.py: the MTP twins paired on a small record, and its recorded
result regenerating (all but the line that names the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import mtp_b200_verify as mtp  # noqa: E402


def _entry(clients: int, measured: float, epsim: dict) -> dict:
    return {"system": "b200_sxm", "mode": "agg", "precision": "fp8", "layout": "tp8 dp1 moe_tp8 ep1",
            "version": "0.5.9", "isl": 1024, "osl": 1024, "concurrency": clients,
            "measured": {"tpot_ms": measured}, "epsim": epsim}


def test_twins_pair_lower_as_mtp_and_mtp_only_rows_stand_alone():
    both = {"tpot_ms": 6.0, "assumptions": [], "spread": {"candidates": [
        {"deployment": "without MTP, as dsr1-fp8-b200-sglang ran it", "tpot_ms": 8.0},
        {"deployment": "with MTP, as dsr1-fp8-b200-sglang-mtp ran it", "tpot_ms": 5.0}]}}
    only = {"tpot_ms": 20.0, "assumptions": ["MTP: only dsr1-fp8-b200-sglang-mtp's sweep ran"]}
    rows = [_entry(4, 10.0, both), _entry(4, 6.0, both), _entry(128, 25.0, only),
            {**_entry(4, 1.0, both), "version": "0.5.6"}]          # another image: left out
    lines = mtp.record_split(rows, accept=2.5)
    # c4: no-MTP 10, MTP 6 measured; epsim 8 and 5: error 5/6 - 1 = -16.7 %, speed-ups 1.67,
    # 1.60; the implied accept length 2.5 x 1.667 / 1.6 = 2.60; c128: 20/25 - 1 = -20 %
    assert lines[2] == ("| 1024/1024 | 4 | both | 10.00 | 6.00 | 8.00 | 5.00 | -16.7 % | 1.67 "
                        "| 1.60 |")
    assert lines[3] == "| 1024/1024 | 128 | MTP only | - | 25.00 | - | 20.00 | -20.0 % | - | - |"
    assert "1024/1024: 2.60" in lines[5]
    assert lines[-1].endswith("4-16: -16.7 / 16.7 % (n 1); 128-512: -20.0 / 20.0 % (n 1)")


def test_recorded_result_regenerates(tmp_path):
    from epsim.validate.silicon.rows import default_csv_path
    if default_csv_path() is None:
        pytest.skip("aiconfigurator-core (the silicon sample and its op tables) is not installed")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = tmp_path / "out.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/mtp_b200_verify.py"), "--out",
                           str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = (ROOT / "benchmarks/results/mtp_b200_verify.md").read_text().splitlines()
    ours = out.read_text().splitlines()
    assert ours[:2] + ours[3:] == recorded[:2] + recorded[3:]   # line 3 names date and machine
