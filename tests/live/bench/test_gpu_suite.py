"""The GPU suite's CPU dry run (`--quick`: gloo, tiny shapes) runs end to end and writes valid
measurement records; on the GPU machine the same script runs with NCCL and Mooncake."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from epsim.records import read_records

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def test_quick_run_writes_records_log_and_summary(tmp_path):
    out = tmp_path / "suite"
    proc = subprocess.run([sys.executable, "-m", "live.bench.gpu_suite", "--quick", "--out",
                           str(out), "--budget-s", "240"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    parts = summary["parts"]
    assert parts["hf_equality"]["status"] in ("ok", "failed")     # failed only without transformers
    assert parts["ep_torch"]["status"] == "ok" and parts["weight_cache_ipc"]["status"] == "ok"
    assert parts["ep_mooncake"]["status"] == "unavailable"         # no GPU here, with the reason
    assert "CUDA GPU" in parts["ep_mooncake"]["reason"]
    records = read_records(out / "records.jsonl")
    equality = [r for r in records if r.kind == "equality"]
    assert {r.backend for r in equality} >= {"torch", "none"}
    assert all(r.extra["passed"] for r in equality)
    timed = {(r.backend, r.kind) for r in records if r.kind != "equality"}
    assert {("torch", "dispatch"), ("torch", "combine"), ("torch", "experts"),
            ("none", "allreduce"), ("none", "moe_layer")} <= timed
    one = next(r for r in records if r.kind == "dispatch" and r.backend == "torch")
    assert one.ep_size == 2 and len(one.recv_tokens_per_rank) == 2 and one.median_us > 0
    assert one.provenance.device == "2x cpu (gloo)" and one.provenance.torch
    assert "PASS" in (out / "suite.log").read_text()
