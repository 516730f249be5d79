"""One rank lost in EP 64 with elastic EP: the latency dip and the recovery.

Simulates the scenario twice with the same seed, with and without its rank failure, both
starting from the placement EPLB settles on for the skew (an instance that has served a while;
the periodic rebalances keep it fresh), and follows, per 1-s window, the time between
consecutive decode steps (every running request's time per output token, stalls included) and
TTFT. Reports what the engine did at the failure (requests lost, experts reloaded, stalls),
the dip (the worst window around the failure over the median before it), the recovery (until
a window is back within 10% of the new steady level) and the lasting cost of serving on one
rank fewer (median after the failure against the healthy run's). Medians keep EPLB's periodic
rebalance stalls, which both runs have, out of the levels.

Failures and recovery are modelled in the simulator's engine (`epsim.sim.elastic`); if the
engine at hand does not model them, the two runs are identical and this script says so.

    python scenarios/elastic_ep64_failure.py [--quick] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import epsim
from epsim.plan.scripting import save_figure, script_args, settled_eplb_simulation, use_agg

SCENARIO = Path(__file__).with_suffix(".yaml")
RECOVERED_WITHIN = 0.10


def windows(result, window_s: float) -> dict[str, np.ndarray]:
    """Per window of simulated time: mean gap between decode step starts (ms, stalls included)
    and mean TTFT of the requests arriving in it (ms)."""
    edges = np.arange(0.0, result.duration_s + window_s / 2, window_s)
    start_s = result.steps["start_us"] * 1e-6
    gap_ms = np.diff(start_s, append=result.duration_s) * 1e3       # this step's start to the next
    which = np.digitize(start_s, edges) - 1
    gap = np.array([gap_ms[which == i].mean() if (which == i).any() else np.nan
                    for i in range(len(edges) - 1)])
    ttft_ms = (result.first_token_s - result.arrival_s) * 1e3
    arrived = np.digitize(result.arrival_s, edges) - 1
    measured = ~result.is_initial & np.isfinite(ttft_ms)
    ttft = np.array([np.mean(ttft_ms[measured & (arrived == i)]) if (measured & (arrived == i)).any()
                     else np.nan for i in range(len(edges) - 1)])
    return {"t_s": edges[:-1] + window_s / 2, "token_ms": gap, "ttft_ms": ttft}


def dip_and_recovery(t_s: np.ndarray, token_ms: np.ndarray, fail_s: float, window_s: float,
                     settle_s: float) -> tuple[float, float, float, float]:
    """(baseline, dip ratio, seconds to recover, new level) from per-window ms per token.

    baseline: median of the windows in the `settle_s` before the failure; dip: the worst window
    from the one holding the failure to `settle_s` after it, over the baseline; new level: median
    of the windows from `settle_s` after the failure; recovery: from the failure to the end of
    the first later window within RECOVERED_WITHIN of the new level.
    """
    before = (t_s >= fail_s - settle_s) & (t_s < fail_s)
    around = (t_s >= fail_s - window_s / 2) & (t_s < fail_s + settle_s)
    later = t_s >= fail_s + settle_s
    baseline = float(np.nanmedian(token_ms[before]))
    level = float(np.nanmedian(token_ms[later]))
    worst = float(np.nanmax(token_ms[around]))
    peak_at = t_s[around][int(np.nanargmax(token_ms[around]))]
    back = (t_s > peak_at) & (token_ms <= (1.0 + RECOVERED_WITHIN) * level)
    recovered = float(t_s[np.flatnonzero(back)[0]] + window_s / 2 - fail_s) if back.any() else float("nan")
    return baseline, worst / baseline, recovered, level


def main(argv=None) -> None:
    args = script_args(__doc__, argv)
    overrides = {}
    if args.quick:
        overrides = {"workload.duration_s": 3.0, "workload.warmup_s": 0.5, "deployment.ep_size": 16,
                     "cluster.num_nodes": 2, "deployment.ep_num_redundant_experts": 16,
                     "workload.arrivals.rate_per_s": 60, "workload.initial_running_per_rank": 4,
                     "deployment.eplb_rebalance_num_iterations": 30,
                     "deployment.failures": [{"at_s": 1.5, "rank": 5}]}
    failing = epsim.load_scenario(SCENARIO, overrides)
    healthy = epsim.load_scenario(SCENARIO, {**overrides, "deployment.failures": []})
    failure = failing.deployment.failures[0]
    window_s = 0.25 if args.quick else 1.0
    # settled placement from t=0: otherwise the first periodic rebalance (not the failure) would
    # decide how the runs differ whenever it comes after the failure
    failed_run = settled_eplb_simulation(failing)[0].run()
    with_failure = windows(failed_run, window_s)
    without = windows(settled_eplb_simulation(healthy)[0].run(), window_s)
    t = with_failure["t_s"]
    settle_s = 1.0 if args.quick else 5.0
    before = (t >= failure.at_s - settle_s) & (t < failure.at_s)
    after = t > failure.at_s
    print(f"before the failure (median of the {settle_s:g} s before it): "
          f"{np.nanmedian(with_failure['token_ms'][before]):.2f} ms per output token, "
          f"TTFT {np.nanmedian(with_failure['ttft_ms'][before]):.0f} ms")
    for event in failed_run.elastic_events:
        print(f"engine: {event['kind']} of rank {event['rank']} at {event['at_s']:g} s: "
              f"{event.get('lost_requests', 0)} requests lost, {event.get('reloaded_experts', 0)} experts "
              f"reloaded, stall {event['stall_us'] * 1e-3:.1f} ms")
    for event in failed_run.rebalances:
        if failure.at_s <= event["at_s"] < failure.at_s + 1.0:
            print(f"engine: EPLB rebalance at {event['at_s']:.2f} s onto {event['num_alive']} ranks, "
                  f"stall {event['stall_us'] * 1e-3:.1f} ms")
    title = f"Elastic EP {failing.deployment.ep_size}: one rank lost"
    same = all(np.allclose(with_failure[k], without[k], equal_nan=True) for k in ("token_ms", "ttft_ms"))
    if same:
        title += " (not modelled by this engine: both runs identical)"
        print(f"answer: none yet -- losing rank {failure.rank} at {failure.at_s:g} s changed nothing: this "
              f"epsim.sim does not model rank failures (deployment.failures), so there is no dip to "
              f"measure. Re-run when it does.")
    else:
        baseline, dip, recovered, level = dip_and_recovery(t, with_failure["token_ms"], failure.at_s,
                                                           window_s, settle_s)
        healthy_level = float(np.nanmedian(without["token_ms"][t >= failure.at_s + settle_s]))
        ttft_peak = np.nanmax(np.where(after, with_failure["ttft_ms"], np.nan))
        print(f"answer: losing rank {failure.rank} of {failing.deployment.ep_size} at {failure.at_s:g} s "
              f"makes output tokens {dip:.2f}x slower at worst ({window_s:g}-s windows; TTFT peaks at "
              f"{ttft_peak:.0f} ms) and they are back within {RECOVERED_WITHIN:.0%} of the new level "
              f"{recovered:.1f} s after the failure; on {failing.deployment.ep_size - 1} ranks a token then takes "
              f"{level:.2f} ms ({(level / healthy_level - 1) * 100:+.1f}% against the run without the "
              f"failure; {baseline:.2f} ms before it)")

    use_agg()
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for data, label, style in ((without, "no failure", "--"), (with_failure, f"rank {failure.rank} lost", "-")):
        ax.plot(data["t_s"], data["token_ms"], style, label=label)
        ax2.plot(data["t_s"], data["ttft_ms"], style, label=label)
    for a in (ax, ax2):
        a.axvline(failure.at_s, color="tab:red", linewidth=1, label="failure")
        a.grid(alpha=0.3)
    ax.set_ylabel(f"ms per output token\n({window_s:g}-s mean, stalls included)")
    ax2.set_ylabel("TTFT by arrival (ms)")
    ax2.set_xlabel("simulated time (s)")
    ax.legend(fontsize=8)
    save_figure(fig, args.out, "elastic_ep64_failure", title)


if __name__ == "__main__":
    main()
