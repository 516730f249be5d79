"""Failures reported like with like: at equal offered load in steady state, fewer alive ranks
never give a shorter mean step or TPOT (a property over sizes, loads, seeds and which ranks are
lost). Qwen3-30B-A3B decode on the shipped profile, so that step time follows the load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import epsim
from epsim.report import summarize
from epsim.sim import simulate

DEFAULT = Path(__file__).resolve().parents[2] / "scenarios" / "default.yaml"


def steady(ep_size: int, rate_per_s: float, seed: int, dead: list[int]) -> dict:
    """Decode steady state at `rate_per_s` with the ranks `dead` lost at 0.3 s, long before the
    measurement window opens at 1.5 s: the instance then serves the same offered load on fewer
    ranks. Both runs start from the EPLB placement of the skew (`from_skew`) and the failure
    rebalances onto the survivors, so placement quality is alike; 48 redundant experts let the
    survivors hold every expert. The survivors' dispatch timeout (10 s by default: SGLang's) is set
    to 50 ms so that detection ends inside the warm-up: the property is about the new steady state,
    not about how long the failure goes unnoticed."""
    sc = epsim.load_scenario(DEFAULT, {
        "deployment.ep_size": ep_size, "deployment.enable_eplb": True,
        "deployment.init_expert_location": "from_skew",
        "deployment.ep_num_redundant_experts": 48, "deployment.eplb_rebalance_num_iterations": 100_000,
        "deployment.failures": [{"at_s": 0.3, "rank": r} for r in dead],
        "deployment.moe_dispatch_timeout_s": 0.05,
        "workload.arrivals.rate_per_s": rate_per_s, "workload.output_len": {"kind": "fixed", "value": 48},
        "workload.initial_running_per_rank": 0, "workload.duration_s": 3.0, "workload.warmup_s": 1.5,
        "seed": seed})
    return summarize(simulate(sc))


@pytest.mark.parametrize("ep_size,rate,seed,dead", [
    (4, 250.0, 0, [1]), (4, 200.0, 1, [3]), (8, 500.0, 2, [5]), (8, 600.0, 3, [0]),
    (8, 500.0, 4, [2, 6]),
])
def test_fewer_ranks_at_equal_load_are_never_faster(ep_size, rate, seed, dead):
    healthy = steady(ep_size, rate, seed, [])
    degraded = steady(ep_size, rate, seed, dead)
    for s in (healthy, degraded):                 # a steady state: both serve what they are offered
        assert s["keep_up"]["ok"], s["keep_up"]["verdict"]
    assert degraded["step_ms"]["mean"] >= healthy["step_ms"]["mean"]
    assert degraded["tpot_ms"]["mean"] >= healthy["tpot_ms"]["mean"]


def test_a_rank_lost_before_the_first_arrival_gets_none():
    # route_to replacing the only routing epoch must leave the all-ranks fast path
    from epsim.sim.arrivals import Requests
    from epsim.sim.batching import Scheduler
    reqs = Requests(np.linspace(0.1, 1.0, 12), np.full(12, 8, np.int64), np.full(12, 4, np.int64))
    sched = Scheduler(reqs, num_ranks=4, max_running=8, chunk_tokens=100, mode="decode")
    sched.route_to(np.array([True, False, True, True]), 0.0)
    assert sched.arrived(1.0).tolist() == [4, 0, 4, 4]
    sched.plan(1.0)
    assert sched.occupied.tolist() == [4, 0, 4, 4]
    assert sorted(sched.slot_req[sched.slot_req >= 0].tolist()) == list(range(12))
