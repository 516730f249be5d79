"""benchmarks/sustained_clock.py without a GPU: the committed H100 record renders to the committed
table byte for byte, the record's figures hold what docs/calibration.md quotes (compute-bound
kernels slow under the power limit, memory-bound ones do not), and without CUDA the script says so
and exits 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.benchmarks import assert_refused

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "results" / "sustained_clock_h100"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "benchmarks/sustained_clock.py", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_committed_tables_render_from_the_committed_records(tmp_path):
    for record in (RECORD, RECORD / "second_host", RECORD / "sweep", RECORD / "graph_sweep"):
        done = _run("--render", str(record / "records.jsonl"), "--out", str(tmp_path))
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "table.md").read_text() == (record / "table.md").read_text()


def test_compute_bound_kernels_slow_at_the_power_limit_and_memory_bound_ones_do_not():
    records = {r["kernel"]: r for r in map(json.loads, (RECORD / "records.jsonl").open())}
    for name in ("fp8_gemm", "bf16_gemm", "prefill_layer"):
        r = records[name]
        assert 1.10 < r["sustained_over_burst"] < 1.25, name
        assert r["sustained_clock"]["sm_mhz"] < 0.85 * r["burst_clock"]["sm_mhz"], name
        assert "0x0000000000000004" in r["sustained_clock"]["throttle"]   # the SW power cap
    for name in ("bf16_gemv", "copy", "decode_layer"):
        r = records[name]
        assert abs(r["sustained_over_burst"] - 1) < 0.05, name
        assert r["sustained_clock"]["sm_mhz"] == r["burst_clock"]["sm_mhz"], name


def test_bad_arguments_are_refused_in_one_line_before_any_gpu_work(tmp_path):
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    cases = ((["--kernels", "nope"], "--kernels: unknown ['nope']"),
             (["--tail-s", "50", "--sustain-s", "45"], "--tail-s (50) must be > 0"),
             (["--tail-s", "0"], "--tail-s (0) must be > 0"),
             (["--burst", "0"], "--burst must be >= 1"),
             (["--layer-tokens", "8"], "--layer-tokens: [8] outside 16..32768"),
             (["--ramp-s", "60", "--sustain-s", "45"], "--ramp-s (60) must be >= 0"),
             (["--render", str(tmp_path / "missing.jsonl")], "--render"),
             (["--render", str(tmp_path / "bad.jsonl")], "--render"))
    assert_refused(_run, tmp_path / "o", cases)


def test_without_cuda_it_exits_2_with_one_line():
    done = _run("--out", "/nonexistent/never-written")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["sustained_clock: no CUDA device"]
