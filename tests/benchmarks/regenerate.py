"""A recorded benchmark result regenerating from committed code: the script's output against the
result file's body (all but its title and command line, which name the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def assert_body_regenerates(script: str, result: str, cwd: Path) -> None:
    """Run `benchmarks/<script>` from `cwd` and compare its stdout with
    `benchmarks/results/<result>` below its header; skip where the silicon sample
    (aiconfigurator-core) is not installed."""
    from epsim.validate.silicon.rows import default_csv_path
    if default_csv_path() is None:
        pytest.skip("aiconfigurator-core (the silicon sample) is not installed")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = (ROOT / "benchmarks" / "results" / result).read_text().splitlines()
    assert done.stdout.splitlines() == recorded[4:]          # the body, below title and command
