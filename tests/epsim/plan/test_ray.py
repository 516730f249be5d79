"""The Ray executor on a real local Ray runtime (not mocked): same table as local processes."""

from __future__ import annotations

import pytest

from epsim.plan import run_plan
from tests.epsim.plan_fixtures import write_tiny_scenario

ray = pytest.importorskip("ray")

SWEEP = ["deployment.ep_size=2,4,8", "workload.arrivals.rate_per_s=100,300"]


@pytest.mark.slow
def test_ray_table_identical_to_local_and_runtime_shut_down(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    local = run_plan(scenario, SWEEP, constraints=["tpot_ms.p99<=40"], executor="local", workers=2,
                     out=tmp_path / "local", progress=False, plots=False)
    assert not ray.is_initialized()
    on_ray = run_plan(scenario, SWEEP, constraints=["tpot_ms.p99<=40"], executor="ray", workers=2,
                      out=tmp_path / "ray", progress=False, plots=False)
    assert not ray.is_initialized()            # it started the runtime, so it shut it down
    assert on_ray.num_computed == local.num_computed == 6
    assert (tmp_path / "ray" / "results.csv").read_bytes() == (tmp_path / "local" / "results.csv").read_bytes()
    assert on_ray.best == local.best and on_ray.frontier == local.frontier


@pytest.mark.slow
def test_ray_uses_a_running_runtime_and_leaves_it_up(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        result = run_plan(scenario, ["deployment.ep_size=2,4"], executor="ray", out=tmp_path / "r",
                          progress=False, plots=False)
        assert ray.is_initialized()
        resumed = run_plan(scenario, ["deployment.ep_size=2,4,8"], executor="ray", out=tmp_path / "r",
                           progress=False, plots=False)
    finally:
        ray.shutdown()
    assert result.num_computed == 2
    assert (resumed.num_computed, resumed.num_cached) == (1, 2)


@pytest.mark.slow
def test_ray_runs_the_two_tier_planner_unchanged(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    sweep = ["deployment.ep_size=2,4,8", "deployment.max_running_requests=8,16,32,64"]
    common = dict(constraints=["tpot_ms.p99<=40"], workers=2, progress=False, plots=False,
                  screen=True)
    local = run_plan(scenario, sweep, executor="local", out=tmp_path / "local", **common)
    on_ray = run_plan(scenario, sweep, executor="ray", out=tmp_path / "ray", **common)
    assert not ray.is_initialized()
    assert on_ray.num_computed == local.num_computed < len(local.rows)
    assert (tmp_path / "ray" / "results.csv").read_bytes() == (tmp_path / "local" / "results.csv").read_bytes()
    assert (tmp_path / "ray" / "screen.jsonl").is_file()
