"""TPOT and ITL from inter-token gaps: unfinished requests count, stalls count, `-` says why."""

from __future__ import annotations

import re

import numpy as np
import pytest

from epsim.report import summarize
from epsim.report.summary import tpot_ms
from epsim.report.table import format_table
from epsim.sim import Simulation, simulate
from epsim.sim.arrivals import Requests
from epsim.sim.batching import Scheduler
from tests.epsim.sim.test_engine import tiny_scenario


def _requests(arrival, input_len, output_len) -> Requests:
    return Requests(np.asarray(arrival, float), np.asarray(input_len, np.int64),
                    np.asarray(output_len, np.int64))


def test_gaps_count_unfinished_requests_and_the_stall_they_lived_through():
    # one decode rank, two requests; steps end at 1, 2, 3, then a 4-s stall, then 8
    sched = Scheduler(_requests([0.0, 0.0], [5, 5], [3, 100]), num_ranks=1, max_running=4,
                      chunk_tokens=100, mode="decode", window_start_s=0.0)
    gaps = [sched.commit(sched.plan(start), end) for start, end in ((0, 1), (1, 2), (2, 3), (7, 8))]
    assert [g.count for g in gaps] == [0, 2, 2, 1]                 # request 0 finished at 3
    assert gaps[3].mean_s == pytest.approx(5.0) and gaps[3].max_s == pytest.approx(5.0)
    window = sched.window_gaps()
    assert window.count.tolist() == [2, 3]                         # request 1 is still running
    np.testing.assert_allclose(window.span_s, [2.0, 7.0])          # 1->3 and 1->8, stall inside


def test_window_start_anchors_at_the_last_token_before_it():
    sched = Scheduler(_requests([0.0], [5], [100]), num_ranks=1, max_running=4, chunk_tokens=100,
                      mode="decode", window_start_s=2.5)
    for start, end in ((0, 1), (1, 2), (2, 3), (3, 4.5)):
        sched.commit(sched.plan(start), end)
    window = sched.window_gaps()
    # the window opens with the step starting at 3; the request's last token before it came
    # at 3, so its gaps in the window are 3 -> 4.5 only
    assert window.count.tolist() == [1] and window.span_s.tolist() == [1.5]


def test_unfinished_decode_window_has_tpot_and_says_why_e2e_is_missing():
    # long outputs: nothing finishes in 0.3 s, yet every running request has inter-token gaps
    sc = tiny_scenario(deployment={"disaggregation_mode": "decode"},
                       workload={"output_len": {"kind": "fixed", "value": 5000},
                                 "initial_running_per_rank": 8, "duration_s": 0.3,
                                 "warmup_s": 0.1, "arrivals": {"kind": "poisson", "rate_per_s": 100.0}})
    res = simulate(sc)
    assert not np.isfinite(res.finish_s).any()
    s = summarize(res)
    assert s["e2e_ms"]["count"] == 0 and "finished within it" in s["latency_notes"]["e2e_ms"]
    assert s["tpot_ms"]["count"] >= 4 * 8                         # t=0 requests and new ones
    measured = res.steps["start_us"] >= 0.1e6
    # decode: every gap is one step (no stall), so TPOT and ITL sit at the step time
    assert s["tpot_ms"]["p50"] == pytest.approx(np.median(res.steps["step_us"][measured]) * 1e-3, rel=0.05)
    assert s["itl_ms"]["count"] == int(res.steps["itl_count"][measured].sum())
    table = format_table(s)
    e2e = [line for line in table.splitlines() if line.startswith("e2e ")]
    assert len(e2e) == 1 and re.search(r" - .*\(none of the \d+ requests.*outlast", e2e[0])
    assert "tpot" in table and "keep-up" in table


def test_a_stall_shows_in_tpot_and_itl():
    sc = tiny_scenario(deployment={"disaggregation_mode": "decode"},
                       workload={"output_len": {"kind": "fixed", "value": 5000},
                                 "initial_running_per_rank": 8, "duration_s": 0.6, "warmup_s": 0.1,
                                 "arrivals": {"kind": "poisson", "rate_per_s": 10.0}})
    plain = summarize(simulate(sc))
    sim = Simulation(sc)

    def stop_the_world(s):
        yield s.env.timeout(0.3e6)
        s.stall(200_000.0, "eplb")

    sim.add_process(stop_the_world)
    res = sim.run()
    stalled = summarize(res)
    # the step after the stall closes gaps of one step plus the 200 ms
    after = np.flatnonzero(res.steps["start_us"] >= 0.5e6)[0]
    assert res.steps["itl_mean_us"][after] == pytest.approx(200_000.0 + res.steps["step_us"][after], rel=1e-6)
    # every request lived through the 200-ms stall: its mean gap grows by 200 ms / its gaps
    assert stalled["tpot_ms"]["mean"] > plain["tpot_ms"]["mean"] * 1.1
    assert stalled["itl_ms"]["mean"] > plain["itl_ms"]["mean"]


def test_no_step_in_the_window_is_said():
    sc = tiny_scenario(deployment={"disaggregation_mode": "decode"},
                       workload={"output_len": {"kind": "fixed", "value": 50}, "duration_s": 0.02,
                                 "warmup_s": 0.01999, "initial_running_per_rank": 16,
                                 "arrivals": {"kind": "poisson", "rate_per_s": 1.0}})
    res = simulate(sc)
    s = summarize(res)
    assert tpot_ms(res).size == 0 and s["tpot_ms"]["p50"] is None
    assert "no step started" in s["latency_notes"]["tpot_ms"]
