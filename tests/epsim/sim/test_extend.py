"""A closed-loop run extended to a longer duration (`Simulation.extend`) gives the bits of a run
of that duration from t=0: benchmark runs of fixed requests (aggregated, MTP, a prefill
instance whose clients think and leave it idle), each cut mid-leap and extended twice."""

from __future__ import annotations

import warnings

import pytest

from epsim.report import summarize
from epsim.sim import Simulation
from tests.epsim.sim.test_leap import assert_same
from tests.epsim.sim.test_quiet_leap import scenario
from tests.epsim.sim.test_spec_leap import NEXTN

BENCH = {"kind": "concurrency", "clients": 16, "num_requests": 48}
DURATIONS_S = (0.6, 1.2, 2.4)
IDLE_CUTS_S = (0.4, 1.0, 2.4)     # the prefill case's: each cut while its clients think


def _same_results(a, b) -> None:
    assert_same(a.steps, b.steps, "steps")
    assert_same(a.layer_mean_us, b.layer_mean_us, "layer_mean_us")
    for name in ("rank_pairs_mean", "arrival_s", "first_token_s", "finish_s", "output_len"):
        assert_same(getattr(a, name), getattr(b, name), name)
    assert_same(a.window_gaps.count, b.window_gaps.count, "window_gaps.count")
    assert_same(a.window_gaps.span_s, b.window_gaps.span_s, "window_gaps.span_s")
    assert (a.kv_cache, a.accept_length, a.duration_s) == (b.kv_cache, b.accept_length,
                                                           b.duration_s)
    drop = ("wall_seconds",)
    assert_same({k: v for k, v in summarize(a).items() if k not in drop},
                {k: v for k, v in summarize(b).items() if k not in drop}, "summary")


@pytest.mark.parametrize("case, deployment, arrivals, durations_s", [
    ("agg", {}, BENCH, DURATIONS_S),
    ("agg_mtp", NEXTN, BENCH, DURATIONS_S),
    # clients that think between requests: the prefill instance idles while they do (a wave
    # of 16 prompts takes 0.27 s, its clients think 0.3 s), and the run is cut there
    ("prefill_think", {"disaggregation_mode": "prefill", "scheduler_recv_interval": 10},
     {**BENCH, "think_time_s": 0.3}, IDLE_CUTS_S),
])
def test_an_extended_run_is_the_longer_run(case, deployment, arrivals, durations_s):
    def make(duration_s: float) -> Simulation:
        return Simulation(scenario(deployment, arrivals=arrivals, duration_s=duration_s,
                                   warmup_s=0.0), coarse_pools=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        extended = make(durations_s[0])
        first = extended.run()
        assert first.first_token_s.shape[0] < arrivals["num_requests"], case   # cut short
        for duration_s in durations_s[1:]:
            _same_results(extended.extend(duration_s), make(duration_s).run())
    if deployment.get("disaggregation_mode") != "prefill":       # steps cut mid-leap
        assert extended.leaper is not None and extended.leaper.num_steps > 0, case


def test_only_a_closed_loop_run_extends_and_only_forward():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulation(scenario(arrivals={"kind": "poisson", "rate_per_s": 20.0},
                                  duration_s=0.5, warmup_s=0.0))
        sim.run()
        with pytest.raises(ValueError, match=r"workload.arrivals.kind \('poisson'\) must be "
                                             r"'concurrency'"):
            sim.extend(1.0)
        sim = Simulation(scenario(arrivals=BENCH, duration_s=0.5, warmup_s=0.0))
        sim.run()
        with pytest.raises(ValueError, match=r"duration_s \(0.5\) must be after the run's end"):
            sim.extend(0.5)
