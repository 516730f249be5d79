"""The run budget (`epsim.budget`): EPLB work is covered in `simulate` as `epsim eplb` covers it,
every shipped scenario is within it, the memory estimate bounds the peak RSS recorded in
benchmarks/results/memory_budget.md, and a sweep's workers are capped by memory."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from epsim import budget
from epsim.errors import SpecError
from epsim.plan.executors import WORKER_BASE_BYTES
from epsim.spec import load_scenario, scenario_from_dict
from tests.epsim.bad_input_cases import SCENARIO

REPO = Path(__file__).resolve().parents[2]


def _tiny(**deployment):
    return scenario_from_dict({**SCENARIO, "deployment": {**SCENARIO["deployment"], **deployment}})


@pytest.mark.parametrize("path", sorted((REPO / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_scenario_is_within_the_budget(path):
    assert budget.run_cost(load_scenario(path)).problem() is None


def test_sticky_eplb_over_thousands_of_slots_is_refused_as_eplb_refuses_it():
    data = {**SCENARIO, "model": "DeepSeek-V3",
            "deployment": {"ep_size": 8, "enable_eplb": True, "eplb_algorithm": "sticky",
                           "ep_num_redundant_experts": 8192 - 256,
                           "eplb_rebalance_num_iterations": 10},
            "workload": {**SCENARIO["workload"], "duration_s": 60.0}}
    with pytest.raises(SpecError, match=r"^s\.yaml: this run would spend ~\d+ s on each EPLB placement "
                                        r"\(sticky, as `epsim eplb` estimates it\); the budget is 30 s"):
        budget.check_run(scenario_from_dict(data), "s.yaml")
    with pytest.raises(SpecError, match=r"--replicas \(8192\) over 58 layer\(s\) would take"):
        budget.check_eplb("sticky", 58, 8192, 8)


def test_the_move_plan_of_thousands_of_slots_on_two_ranks_is_refused_by_memory():
    cost = budget.run_cost(_tiny(enable_eplb=True, ep_num_redundant_experts=8190,
                                 eplb_rebalance_num_iterations=1))
    assert "an EPLB placement and its moves" in cost.problem()
    # no rebalance can happen before the run ends: nothing to refuse
    assert budget.run_cost(_tiny(enable_eplb=True, ep_num_redundant_experts=8190,
                                 eplb_rebalance_num_iterations=10**6)).problem() is None


def test_the_recorded_peak_rss_is_bounded_by_the_estimate():
    text = (REPO / "benchmarks" / "results" / "memory_budget.md").read_text()
    assert (f"{budget.BYTES_PER_REQUEST} B per request, {budget.BYTES_PER_SLOT} B per slot, "
            f"{budget.BYTES_PER_STEP} B per step (bound), EPLB {budget.EPLB_BYTES_PER_SLOT} B per "
            f"layer-slot + {budget.EPLB_BYTES_PER_MOVE_CELL} B per move cell") in text, \
        "the constants changed: re-record benchmarks/results/memory_budget.md"
    rows = re.findall(r"^\| ([^|]+) \|.* \| ([\d.]+) \|$", text, flags=re.M)
    assert len(rows) >= 8
    assert all(float(ratio) <= 1.0 for _, ratio in rows), rows
    bases = [float(b) for b in re.findall(r"^\|[^|]+\|[^|]+\|[^|]+\|[^|]+\| (\d+) \|", text, flags=re.M)]
    assert bases and max(bases) * 2**20 <= WORKER_BASE_BYTES


def test_workers_are_capped_by_memory():
    from epsim.plan.executors import available_bytes, capped_workers, default_workers
    if available_bytes() is None:
        pytest.skip("no /proc/meminfo: available memory unknown")
    assert capped_workers(None, 3) == min(3, default_workers())      # no estimate: CPUs, tasks
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert capped_workers(8, 100, task_bytes=1e15) == 1
    assert len(caught) == 1 and re.match(r"workers \(\d+\) capped at 1 by memory: each point may need up to",
                                         str(caught[0].message))
