"""The machine-to-machine spreads quoted in the docs regenerate from the committed records with
`scripts/record_spread.py`: the single-H200 table of docs/calibration.md and the two-H200
machines of issue 18 (benchmarks/results/h200x2_issue18/spread.md, quoted in docs/live.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ISSUE18 = Path("benchmarks") / "results" / "h200x2_issue18"


def _spread(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "scripts/record_spread.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_issue18_machines_spread_regenerates_by_backend():
    out = _spread(str(ISSUE18 / "bench" / "bench.jsonl.gz"),
                  str(ISSUE18 / "machine2" / "bench" / "bench.jsonl.gz"), "--by-backend")
    assert out == (ROOT / ISSUE18 / "spread.md").read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in out.splitlines()[2:]}
    # the figures docs/live.md quotes: run-to-run medians of the stages, per backend
    assert [rows[f"{b}/{k}/-"][2] for b in ("deepep", "torch", "none")
            for k in ("dispatch", "combine")] == ["14.7", "14.8", "10.2", "13.9", "28.4", "24.9"]
    live = (ROOT / "docs" / "live.md").read_text()
    assert "scripts/record_spread.py benchmarks/results/h200x2_issue18/bench/bench.jsonl.gz" in live


def test_single_h200_spread_is_the_documented_table():
    out = _spread("epsim/data/records/h200_single/run1.jsonl.gz",
                  "epsim/data/records/h200_single/run2.jsonl.gz")
    doc = (ROOT / "docs" / "calibration.md").read_text()
    lines = out.splitlines()
    assert len(lines) > 10 and [line for line in lines if line not in doc] == []
