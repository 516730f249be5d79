"""The serving validations regenerate from the committed code: `mtp_lmsys.py` (MTP against
LMSYS's measurement) and `r1_h200_closed_loop.py` (issue #38's closed-loop case) print the
tables their recorded results hold, number for number (only the header's wall time differs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["mtp_lmsys", "r1_h200_closed_loop"])
def test_serving_validation_regenerates(script):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{script}.py")], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = (ROOT / "benchmarks" / "results" / f"{script}.md").read_text()
    tables = [line for line in recorded.splitlines() if line.startswith("|") or
              line.startswith("Mean step")]
    printed = [line for line in done.stdout.splitlines() if line.startswith("|") or
               line.startswith("Mean step")]
    assert printed == tables
