"""A plan's memory: the KV pool's columns, and a configuration whose weights do not fit as a
failed row with its reason, never the best."""

from __future__ import annotations

import copy

from epsim.plan import run_plan
from tests.epsim.plan_fixtures import TINY_PLAN_SCENARIO


def test_weights_that_do_not_fit_are_a_failed_row_never_the_best(tmp_path):
    scenario = copy.deepcopy(TINY_PLAN_SCENARIO)
    result = run_plan(scenario, ["deployment.mem_fraction_static=0.05,0.85"], workers=1,
                      out=tmp_path / "res", progress=False, plots=False, require_feasible=False)
    by = {row["deployment.mem_fraction_static"]: row for row in result.rows}
    failed, ok = by[0.05], by[0.85]
    assert "does not fit: the weights" in failed["error"]
    assert "mem_fraction_static above" in failed["error"]
    assert not failed["feasible"] and not failed["best"]
    assert ok["error"] == "" and ok["best"]
    # the memory columns: the pool the fraction leaves, what it holds
    assert failed["max_total_num_tokens"] == 0 and ok["max_total_num_tokens"] > 0
    assert ok["kv_pool_gib_per_gpu"] > 0 and ok["mem_fraction_static"] == 0.85
    assert ok["kv_running_limit"] >= 32                  # it holds the 32 slots per rank
    assert ok["kv_cache.held_frac"] == 0.0
