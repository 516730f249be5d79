"""benchmarks/nvfp4_experts_residuals.py: its tables' MAPE and bias per group, and a bad
`--axes` refused in one line naming the flag (exit 2) before any record is read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.nvfp4_experts_residuals import table  # noqa: E402


def test_table_gives_each_groups_mape_and_bias_in_key_order():
    rows = [{"ep": 64, "err": -0.2}, {"ep": 32, "err": 0.1}, {"ep": 32, "err": -0.3}]
    lines = table(rows, "ep")
    assert lines[:2] == ["| ep | rows | MAPE % | bias % |", "|---|---:|---:|---:|"]
    assert lines[2] == "| 32 | 2 | 20.0 | -10.0 |"
    assert lines[3] == "| 64 | 1 | 20.0 | -20.0 |"


def test_bad_axis_is_one_line_naming_the_flag():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/nvfp4_experts_residuals.py"),
                           "b200_sxm", "gb200", "--axes", "ep,shape"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert "--axes (shape)" in last and "ep or tp" in last
    assert proc.stdout == ""


def test_unknown_system_is_one_line_naming_the_argument():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/nvfp4_experts_residuals.py"), "foo"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "argument systems: invalid choice: 'foo'" in proc.stderr.strip().splitlines()[-1]
