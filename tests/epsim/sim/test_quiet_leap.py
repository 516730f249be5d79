"""The leap over quiet decode steps (`epsim.sim.quiet`: every running request decodes, none
finishes or joins) changes nothing: closed loops (the silicon rows' benchmark clients) and
open ones, aggregated and decode instances, attention TP and DP, MLA's split-KV decode and a
binding KV pool give the same bits leapt as stepped one at a time (`leap=False`)."""

from __future__ import annotations

import pytest

from epsim.spec import scenario_from_dict
from tests.epsim.sim.test_leap import assert_same_runs, run_both

R1_H200 = {
    "name": "quiet", "model": "DeepSeek-V3", "cluster": {"gpu": "H200", "num_nodes": 1},
    "deployment": {"ep_size": 8, "enable_dp_attention": True, "moe_a2a_backend": "deepep",
                   "dispatch_dtype": "fp8", "max_running_requests": 16},
    "workload": {"arrivals": {"kind": "concurrency", "clients": 16},
                 "input_len": {"kind": "random", "value": 1024, "range_ratio": 0.8},
                 "output_len": {"kind": "random", "value": 200, "range_ratio": 0.8},
                 "skew": {"kind": "zipf", "alpha": 0.6}, "duration_s": 3.0, "warmup_s": 0.5},
}


def scenario(deployment: dict | None = None, **workload):
    return scenario_from_dict({**R1_H200, "deployment": {**R1_H200["deployment"], **(deployment or {})},
                               "workload": {**R1_H200["workload"], **workload}})


@pytest.mark.parametrize("case, deployment, workload, share", [
    # an aggregated instance under a closed loop, DP attention 8 (the per-slot path)
    ("agg_dp", {}, {}, 0.5),
    # attention TP 8 with MoE-TP (`none`), few sequences: MLA's decode splits the KV
    ("agg_tp", {"enable_dp_attention": False, "moe_a2a_backend": "none"},
     {"arrivals": {"kind": "concurrency", "clients": 4}}, 0.5),
    # a decode instance under a closed loop that waits out a prefill side (think time)
    ("decode_think", {"disaggregation_mode": "decode"},
     {"arrivals": {"kind": "concurrency", "clients": 24, "think_time_s": 0.05}}, 0.5),
    # an open loop's decode instance with slots to spare: leaps end at each arrival
    ("decode_open", {"disaggregation_mode": "decode", "max_running_requests": 64},
     {"arrivals": {"kind": "poisson", "rate_per_s": 40.0}}, 0.2),
    # a KV pool that binds: requests wait with slots free
    ("kv_bound", {"disaggregation_mode": "decode", "max_running_requests": 64,
                  "mem_fraction_static": 0.69},
     {"arrivals": {"kind": "concurrency", "clients": 128}}, 0.2),
    # a receive interval (SGLang's --scheduler-recv-interval): arrivals join at receive points,
    # leaps cross the receives that take nothing in and end before one that does
    ("agg_tp_recv", {"enable_dp_attention": False, "moe_a2a_backend": "none",
                     "scheduler_recv_interval": 30},
     {"arrivals": {"kind": "concurrency", "clients": 16}}, 0.5),
    ("decode_recv", {"disaggregation_mode": "decode", "scheduler_recv_interval": 10},
     {"arrivals": {"kind": "concurrency", "clients": 24, "think_time_s": 0.05}}, 0.3),
    # ... and an aggregated instance's (its prompts count whole from admission)
    ("kv_bound_agg", {"max_running_requests": 64, "mem_fraction_static": 0.686},
     {"arrivals": {"kind": "concurrency", "clients": 128}}, 0.2),
])
def test_quiet_steps_leap_with_the_same_result(case, deployment, workload, share):
    runs = run_both(scenario(deployment, **workload))
    assert_same_runs(runs)
    assert runs[0][1].kv_cache == runs[1][1].kv_cache
    leapt, stepped = runs[0][0], runs[1][1]
    assert leapt.leaper.num_steps > share * stepped.steps["step_us"].shape[0], case
    interval = deployment.get("scheduler_recv_interval")
    if interval:               # leaps cross receives that take nothing in (`epsim.sim.quiet`)
        assert leapt.leaper.num_steps > interval * leapt.leaper.num_leaps, case
    if case.startswith("kv_bound"):
        assert stepped.kv_cache["can_bind"] and stepped.kv_cache["held_frac"] > 0


@pytest.mark.parametrize("rate_per_s", [30.0, 35.0, 45.0, 50.0])
def test_an_arrival_that_cuts_a_leap_takes_no_routing_draw_for_the_step_it_cut(rate_per_s):
    """An open loop's arrival ends the quiet steps (`stop_s`); the step at it has the arrival
    in its batch, so the leap must not draw a pool for the quiet batch there (it once did,
    taking routing draws the stepped run never takes: the same run leapt and stepped then
    parted at that step, at whichever rate put an arrival there)."""
    runs = run_both(scenario({"disaggregation_mode": "decode", "max_running_requests": 64},
                             arrivals={"kind": "poisson", "rate_per_s": rate_per_s}))
    assert_same_runs(runs)
    assert runs[0][0].leaper.num_leaps > 0
