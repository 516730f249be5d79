"""The analytic screen: a configuration's steady state from the cost model alone, no event loop.

Tier 1 of `epsim plan --screen` (docs/planning.md, "Two-tier planning"): the steady-batch model
of the engine (`epsim.sim.steady`, whose module doc gives the formulas: the expected batch
priced by the simulator's own `CostModel`, Little's law closing the loop, per decode, prefill
and colocated instance) read as `SCREEN_METRICS`, the simulation's summary columns it
estimates, and `max_rate`, the highest arrival rate whose steady state passes a test. What the
screen leaves out, and the simulation has: queueing variance, per-request length spread, drift
in time, EPLB rebalance costs, stalls. Percentile metrics of the simulation are therefore
compared with the screen's means (`benchmarks/screen_vs_sim.py` records how well they agree).
"""

from __future__ import annotations

from epsim.sim.steady import Steady, SteadyStateModel, steady_state

# screen metrics, named like the simulation's summary columns they estimate
SCREEN_METRICS = ("tpot_ms", "ttft_ms", "step_ms", "throughput_tokens_per_s_per_gpu",
                  "output_tokens_per_s_per_gpu", "requests_per_s", "running_per_rank",
                  "keep_up")


def screen_metrics(scenario, profile=None) -> dict[str, float]:
    """`SCREEN_METRICS` of one scenario (ms for times, per GPU for throughputs).

    Raises:
        SpecError: see `SteadyStateModel`.
    """
    s = steady_state(scenario, profile)
    num_gpus = scenario.deployment.num_gpus
    return {"tpot_ms": s.tpot_s * 1e3, "ttft_ms": s.ttft_s * 1e3, "step_ms": s.step_s * 1e3,
            "throughput_tokens_per_s_per_gpu": s.tokens_per_s / num_gpus,
            "output_tokens_per_s_per_gpu": s.output_per_s / num_gpus,
            "requests_per_s": s.served_rps, "running_per_rank": s.running_per_rank,
            "keep_up": 1.0 if s.keep_up else 0.0}


def max_rate(model: SteadyStateModel, ok, high_per_s: float, rel_tol: float = 0.01) -> tuple[float, Steady | None]:
    """The highest arrival rate (requests/s, whole instance) whose steady state satisfies
    `ok(Steady)`, by bisection below `high_per_s` (ok must fail above a threshold only).

    Returns:
        (rate, its Steady); (0.0, None) when even a trickle fails.
    """
    low, high = 0.0, high_per_s
    best = None
    probe = high_per_s * 1e-3
    state = model.steady(probe)
    if not ok(state):
        return 0.0, None
    low, best = probe, state
    while high - low > rel_tol * high:
        mid = 0.5 * (low + high)
        state = model.steady(mid)
        if ok(state):
            low, best = mid, state
        else:
            high = mid
    return low, best
