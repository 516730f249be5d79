"""`epsim plan` through the real CLI in a subprocess: results, and one-line errors (exit 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.epsim.plan_fixtures import write_tiny_scenario


def epsim_plan(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "epsim.cli", "plan", *args, "--no-progress"],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, pattern: str) -> str:
    import re
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("epsim plan: error: ")
    assert re.search(pattern, lines[0]), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return write_tiny_scenario(tmp_path_factory.mktemp("cli"))


@pytest.mark.parametrize("sweep, pattern", [
    ("deployment.ep_size", r"--sweep \('deployment.ep_size'\) must look like KEY=V1,V2"),
    ("deployment.ep_size=8,,16", r"must not have an empty value"),
    ("deployment.ep_size=64:8:x2", r"range \('64:8:x2'\) must have STOP >= START"),
    ("deployment.epsize=8,16", r"--sweep key \(deployment.epsize\) must name a scenario field: 'epsize' "
                               r"is not a field of deployment; allowed: .*ep_size"),
    ("workload.skew.alfa=1", r"'alfa' is not a field of workload.skew; allowed: alpha"),
])
def test_bad_sweeps(scenario, sweep, pattern):
    assert_one_line_error(epsim_plan(scenario, "--sweep", sweep), pattern)


def test_unknown_constraint_metric(scenario):
    proc = epsim_plan(scenario, "--sweep", "deployment.ep_size=4", "--constraint", "tpot_p99<=50")
    assert_one_line_error(proc, r"--constraint \('tpot_p99<=50'\) names an unknown metric \(tpot_p99\); "
                                r"did you mean tpot_ms.p99")


def test_constraints_no_configuration_meets(scenario, tmp_path):
    # at 240 req/s EP 2 does not keep up (it serves ~88 % of the arrivals, its backlog grows
    # ~24/s) and EP 4 does, so only EP 4 is judged; the tiny scenario's own 170 req/s no longer
    # overloads EP 2 since SGLang's fused attention block is priced (7 launches, not 41)
    proc = epsim_plan(scenario, "--sweep", "deployment.ep_size=2,4", "--constraint", "tpot_ms.p99<=1",
                      "--constraint", "num_gpus<=8", "--set", "workload.arrivals.rate_per_s=240",
                      "--out", str(tmp_path / "res"), "--no-plots")
    assert_one_line_error(proc, r"no configuration that keeps up meets all constraints \(1 points\): "
                                r"closest is tpot_ms.p99<=1, best value [\d.]+ at deployment.ep_size=4")
    assert "rejected   deployment.ep_size=2: serves" in proc.stdout
    assert "feasible   0 of 2" in proc.stdout
    assert (tmp_path / "res" / "results.csv").is_file()


def test_plan_prints_best_and_frontier_and_writes_files(scenario, tmp_path):
    out = tmp_path / "res"
    proc = epsim_plan(scenario, "--sweep", "deployment.ep_size=2:8:x2", "--sweep",
                      "deployment.moe_a2a_backend=deepep,mooncake", "--constraint", "tpot_ms.p99<=60",
                      "--objective", "min:num_gpus", "--set", "workload.arrivals.rate_per_s=150",
                      "--workers", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "6 point(s), 6 valid; 6 computed" in proc.stdout
    assert "best       deployment.ep_size=" in proc.stdout and "frontier" in proc.stdout
    for name in ("results.csv", "results.parquet", "plan.json", "pareto.png", "sweep.png", "points.jsonl"):
        assert (out / name).is_file(), name
    again = epsim_plan(scenario, "--sweep", "deployment.ep_size=2:8:x2", "--sweep",
                       "deployment.moe_a2a_backend=deepep,mooncake", "--set",
                       "workload.arrivals.rate_per_s=150", "--out", str(out), "--no-plots")
    assert "0 computed, 6 from the results directory" in again.stdout
