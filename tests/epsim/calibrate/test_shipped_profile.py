"""The shipped profile remakes from its committed records by the commands docs/calibration.md
gives ("The GPU run"): every fitted number, not only the ones a change meant to move. A profile
patched by hand or refitted in part drifts from what its records and the fitting code give; this
catches it the first time it happens."""

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "epsim/data/profiles/h200x2.json"


def _chain(out: Path) -> list[list[str]]:
    """The documented commands (docs/calibration.md, "The GPU run"), writing `out`."""
    records = sorted(str(p) for p in (ROOT / "epsim/data/records/h200x2").glob("*.jsonl*"))
    single = sorted(str(p) for p in (ROOT / "epsim/data/records/h200_single").glob("*.jsonl.gz"))
    py = sys.executable
    return [
        [py, "-m", "epsim.cli", "calibrate", "--records", *records, *single,
         "--spread-records", "benchmarks/results/h200x2_run1/bench.jsonl.gz",
         "--out", str(out), "--name", "h200x2"],
        [py, "-m", "epsim.calibrate.rebalance_host", "epsim/data/records/host/eplb_host.jsonl",
         "--profile", str(out)],
        [py, "-m", "epsim.calibrate.serving_host", "epsim/data/records/host/serving_host_gpu.json",
         "--loop-ops", "epsim/data/records/host/serving_loop_ops_gpu.json",
         "--loop-ops-date", "2026-12-06", "--profile", str(out)],
        [py, "-m", "epsim.calibrate.dual_stream",
         "benchmarks/results/dual_stream_gpu/dual_stream.json", "--profile", str(out)],
    ]


def _numbers(node, path=""):
    """{path: value} of every number and string under `node` (lists by index)."""
    if isinstance(node, dict):
        return {k: v for key, sub in node.items() for k, v in _numbers(sub, f"{path}/{key}").items()}
    if isinstance(node, list):
        return {k: v for i, sub in enumerate(node) for k, v in _numbers(sub, f"{path}[{i}]").items()}
    return {path: node}


def test_shipped_h200x2_profile_remakes_from_its_records(tmp_path):
    out = tmp_path / "h200x2.json"
    for cmd in _chain(out):
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    shipped, remade = json.loads(SHIPPED.read_text()), json.loads(out.read_text())
    assert remade["provenance"]["records_sha256"] == shipped["provenance"]["records_sha256"]
    want, got = _numbers(shipped["components"]), _numbers(remade["components"])
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))[:10]
    moved = [(k, want[k], got[k]) for k in want
             if not (want[k] == got[k] or (isinstance(want[k], float) and isinstance(got[k], float)
                                            and math.isclose(want[k], got[k], rel_tol=1e-6,
                                                             abs_tol=1e-9)))]
    assert not moved, moved[:10]
