"""The leap over quiet speculative (MTP) steps (`epsim.sim.spec_leap`: every running request
decodes, none finishes or joins) changes nothing: decode and aggregated instances, DP and TP
attention, one and several draft decode forwards, a receive interval and a binding KV pool give
the same bits leapt as stepped one at a time (`leap=False`), the acceptance stream included."""

from __future__ import annotations

import pytest

from tests.epsim.sim.test_leap import assert_same_runs, run_both
from tests.epsim.sim.test_quiet_leap import scenario

NEXTN = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 2, "speculative_eagle_topk": 1,
         "speculative_num_draft_tokens": 3}


@pytest.mark.parametrize("case, deployment, workload, share", [
    # a decode instance under a closed loop that waits out a prefill side (think time)
    ("decode_think", {"disaggregation_mode": "decode"},
     {"arrivals": {"kind": "concurrency", "clients": 8, "think_time_s": 0.05}}, 0.5),
    # an aggregated instance, attention TP 8 with MoE-TP, few sequences, three draft steps
    ("agg_tp", {"enable_dp_attention": False, "moe_a2a_backend": "none",
                "speculative_num_steps": 3, "speculative_num_draft_tokens": 4},
     {"arrivals": {"kind": "concurrency", "clients": 4}}, 0.5),
    # a receive interval (`epsim.sim.recv`): leaps cross receives that take nothing in
    ("decode_recv", {"disaggregation_mode": "decode", "scheduler_recv_interval": 10},
     {"arrivals": {"kind": "concurrency", "clients": 8, "think_time_s": 0.05}}, 0.3),
    # an open loop's decode instance with slots to spare: leaps end at each arrival
    ("decode_open", {"disaggregation_mode": "decode", "max_running_requests": 64},
     {"arrivals": {"kind": "poisson", "rate_per_s": 20.0}}, 0.2),
    # an aggregated instance whose KV pool binds: its rule (`KVPool.fits_ignore_eos`) loosens
    # as the running requests near their ends, and the leaps stop at the plan that admits
    ("kv_bound_agg", {"max_running_requests": 64, "mem_fraction_static": 0.692},
     {"arrivals": {"kind": "concurrency", "clients": 128}}, 0.2),
])
def test_quiet_verify_steps_leap_with_the_same_result(case, deployment, workload, share):
    runs = run_both(scenario({**NEXTN, **deployment}, **workload), coarse_pools=True)
    assert_same_runs(runs)
    (leapt, a), (stepped, b) = runs
    assert a.kv_cache == b.kv_cache
    assert a.accept_length == b.accept_length
    assert leapt.draft.num_forwards == stepped.draft.num_forwards
    assert leapt.scheduler.spec._rng.bit_generator.state == \
        stepped.scheduler.spec._rng.bit_generator.state
    assert leapt.leaper.num_steps > share * b.steps["step_us"].shape[0], case
    interval = deployment.get("scheduler_recv_interval")
    if interval:               # leaps cross receives that take nothing in (`epsim.sim.quiet`)
        assert leapt.leaper.longest_leap > interval, case
    if case.startswith("kv_bound"):
        assert b.kv_cache["can_bind"] and b.kv_cache["held_frac"] > 0
