"""benchmarks/silicon_speed.py's `--repeat`: below 1 it is refused in one line naming the flag
(exit 2) before any checkout is extracted or row run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", ["0", "-3"])
def test_repeat_below_one_is_one_line_naming_the_flag(value):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/silicon_speed.py"), "--ids", "x",
                           "--repeat", value], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert "--repeat" in last and "integer >= 1" in last
    assert proc.stdout == ""
