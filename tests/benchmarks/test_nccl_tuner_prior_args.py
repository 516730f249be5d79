"""benchmarks/nccl_tuner_prior.py: an unknown system refused in one line naming the flag (exit 2),
before any record is read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_unknown_system_is_one_line_naming_the_flag():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/nccl_tuner_prior.py"), "--systems", "foo"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "argument --systems: invalid choice: 'foo'" in proc.stderr.strip().splitlines()[-1]
    assert proc.stdout == ""
