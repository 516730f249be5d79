"""One rank lost in EP 64 with elastic EP: requests lost, the transient, the new steady state.

Three runs with the same seed, all starting from the placement EPLB settles on for the skew
(an instance that has served a while; periodic rebalances keep it fresh): without the failure,
with it (rank 5 lost at 15 s), and with the rank lost from the start (before the measurement
window), which is the new steady state at the same offered load. The answer keeps like with
like:

- requests lost: the failed rank's running and queued requests (a client would resend them);
- the transient: the recovery stall (expert reload, the rebalance onto the survivors), then a
  lighter load while arrivals refill the lost requests' places -- steps are quicker then
  because fewer requests run, which is not a speed-up;
- the new steady state: the rank-lost-from-the-start run against the healthy one over the
  same window at the same offered load (mean step and TPOT; keep-up of both).

Failures and recovery are modelled in the simulator's engine (`epsim.sim.elastic`).

    python scenarios/elastic_ep64_failure.py [--quick | --lite] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import epsim
from epsim.commands.scripting import answer, save_figure, script_args, settled_eplb_simulation, use_agg
from epsim.report import summarize

SCENARIO = Path(__file__).with_suffix(".yaml")
REFILLED = 0.98          # the lost requests count as replaced once this share of the running
                         # requests before the failure runs again


def windows(result, window_s: float) -> dict[str, np.ndarray]:
    """Per window of simulated time: mean gap between decode step starts (ms, stalls included),
    each gap counted in the window where it ends (when the token comes out: a stall after a
    failure shows after the failure, not in the window before it), and mean TTFT of the
    requests arriving in it (ms)."""
    edges = np.arange(0.0, result.duration_s + window_s / 2, window_s)
    start_s = result.steps["start_us"] * 1e-6
    end_s = np.append(start_s[1:], result.duration_s)                # the next step's start
    gap_ms = (end_s - start_s) * 1e3
    which = np.digitize(end_s, edges) - 1
    gap = np.array([gap_ms[which == i].mean() if (which == i).any() else np.nan
                    for i in range(len(edges) - 1)])
    ttft_ms = (result.first_token_s - result.arrival_s) * 1e3
    arrived = np.digitize(result.arrival_s, edges) - 1
    measured = ~result.is_initial & np.isfinite(ttft_ms)
    ttft = np.array([np.mean(ttft_ms[measured & (arrived == i)]) if (measured & (arrived == i)).any()
                     else np.nan for i in range(len(edges) - 1)])
    return {"t_s": edges[:-1] + window_s / 2, "token_ms": gap, "ttft_ms": ttft}


def transient(steps: dict, fail_s: float, settle_s: float) -> dict:
    """The failure's transient from the step table of the run with it.

    Returns:
        `running_before` (median running requests over `settle_s` before the failure),
        `running_low` (fewest after it), `refill_s` (from the failure until running requests are
        back to `REFILLED` of before; NaN if never in the run), `step_ratio` (mean step during the
        refill over the mean before).
    """
    t = steps["start_us"] * 1e-6
    running, step_ms = steps["num_running"], steps["step_us"] * 1e-3
    before = (t >= fail_s - settle_s) & (t < fail_s)
    after = t >= fail_s
    level = float(np.median(running[before]))
    back = after & (running >= REFILLED * level)
    refill_s = float(t[np.flatnonzero(back)[0]] - fail_s) if back.any() else float("nan")
    refilling = after & (t < fail_s + (refill_s if np.isfinite(refill_s) else np.inf))
    return {"running_before": level, "running_low": float(running[after].min()),
            "refill_s": refill_s,
            "step_ratio": float(step_ms[refilling].mean() / step_ms[before].mean()) if refilling.any()
            else float("nan")}


def main(argv=None) -> dict:
    args = script_args(__doc__, argv)
    overrides = {}
    if args.quick:
        overrides = {"workload.duration_s": 4.0, "workload.warmup_s": 1.5, "deployment.ep_size": 16,
                     "cluster.num_nodes": 2, "deployment.ep_num_redundant_experts": 16,
                     "workload.arrivals.rate_per_s": 60, "workload.initial_running_per_rank": 4,
                     "workload.output_len": {"kind": "fixed", "value": 24},
                     "deployment.eplb_rebalance_num_iterations": 100_000,
                     # a 4-s run: the failure is detected after 0.2 s, not SGLang's 10 s
                     "deployment.moe_dispatch_timeout_s": 0.2,
                     "deployment.failures": [{"at_s": 2.5, "rank": 5}]}
    elif args.lite:
        # long enough to see the survivors serve after the 10-s dispatch timeout
        overrides = {"workload.duration_s": 24.0, "workload.warmup_s": 3.0,
                     "deployment.failures": [{"at_s": 6.0, "rank": 5}]}
    failing = epsim.load_scenario(SCENARIO, overrides)
    failure = failing.deployment.failures[0]
    healthy = epsim.load_scenario(SCENARIO, {**overrides, "deployment.failures": []})
    # the new steady state: the same rank lost at the start of the warm-up, so the measurement
    # window sees the survivors serving the full offered load (not a load that dropped with the
    # loss), its recovery stall long over -- detected at once (its dispatch timeout, 10 s in
    # SGLang, is the transient's, not the steady state's, and would outlast the warm-up)
    # Periodic rebalances are left out of both steady-state runs: each stalls every rank for ~1 s
    # and lands at a different moment in each run's window, which would swing the TPOT mean by
    # a few % either way (the failure's own rebalance stays, inside the warm-up).
    steady = {**overrides, "deployment.eplb_rebalance_num_iterations": 100_000}
    early = epsim.load_scenario(SCENARIO, {**steady, "deployment.moe_dispatch_timeout_s": 0.001,
                                           "deployment.failures": [{"at_s": 0.02, "rank": failure.rank}]})
    healthy_steady = epsim.load_scenario(SCENARIO, {**steady, "deployment.failures": []})
    failed_run = settled_eplb_simulation(failing)[0].run()
    healthy_run = settled_eplb_simulation(healthy)[0].run()
    window_s = 0.25 if args.quick else 1.0
    with_failure, without = windows(failed_run, window_s), windows(healthy_run, window_s)
    settle_s = 1.0 if args.quick else 5.0 if not args.lite else 2.0
    ep = failing.deployment.ep_size
    rate = failing.workload.arrivals.rate_per_s

    lost = sum(e.get("lost_requests", 0) for e in failed_run.elastic_events if e["kind"] == "failure")
    stall_ms = sum(e["stall_us"] for e in failed_run.elastic_events) * 1e-3
    stall_ms += sum(e["stall_us"] for e in failed_run.rebalances
                    if failure.at_s <= e["at_s"] < failure.at_s + 1.0 and e["reason"] == "failure") * 1e-3
    for event in failed_run.elastic_events:
        print(f"engine: {event['kind']} of rank {event['rank']} at {event['at_s']:g} s: "
              f"{event.get('lost_requests', 0)} requests lost, {event.get('reloaded_experts', 0)} experts "
              f"reloaded, stall {event['stall_us'] * 1e-3:.1f} ms")
    for event in failed_run.rebalances:
        if failure.at_s <= event["at_s"] < failure.at_s + 1.0:
            print(f"engine: EPLB rebalance ({event['reason']}) at {event['at_s']:.2f} s onto "
                  f"{event['num_alive']} ranks, stall {event['stall_us'] * 1e-3:.1f} ms")
    trans = transient(failed_run.steps, failure.at_s, settle_s)
    base = summarize(settled_eplb_simulation(healthy_steady)[0].run())
    new = summarize(settled_eplb_simulation(early)[0].run())
    step_change = new["step_ms"]["mean"] / base["step_ms"]["mean"] - 1.0
    tpot_change = new["tpot_ms"]["mean"] / base["tpot_ms"]["mean"] - 1.0
    lighter_phase = trans["running_low"] < REFILLED * trans["running_before"]
    if not lighter_phase:
        lighter = ("no lighter-load phase (arrivals queued during the stall refilled the lost "
                   "requests' places at once)")
    else:
        refill = (f"{trans['refill_s']:.1f} s" if np.isfinite(trans["refill_s"])
                  else "the rest of the run")
        lighter = (f"then a lighter load for {refill} ({trans['running_low']:.0f} of "
                   f"{trans['running_before']:.0f} requests running at the lowest, until arrivals "
                   f"refill them; steps {trans['step_ratio']:.2f}x meanwhile because fewer requests "
                   f"run -- not a speed-up)")
    text = (f"losing rank {failure.rank} of {ep} at {failure.at_s:g} s loses {lost} requests; "
            f"transient: {stall_ms:.0f} ms recovery stall, {lighter}; new steady state at the same "
            f"{rate:g} req/s on {ep - 1} ranks: "
            f"step {new['step_ms']['mean']:.2f} ms vs {base['step_ms']['mean']:.2f} ms on {ep} "
            f"({step_change * 100:+.1f} %), TPOT {new['tpot_ms']['mean']:.2f} vs "
            f"{base['tpot_ms']['mean']:.2f} ms ({tpot_change * 100:+.1f} %); keep-up on {ep - 1} "
            f"ranks: {new['keep_up']['verdict']}")
    from epsim.plan import summary_metrics
    answer_line = answer(args, text, summary_metrics(new), failing.workload)

    use_agg()
    import matplotlib.pyplot as plt
    fig, (ax, ax2, ax3) = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
    t_steps = failed_run.steps["start_us"] * 1e-6
    for data, run, label, style in ((without, healthy_run, "no failure", "--"),
                                    (with_failure, failed_run, f"rank {failure.rank} lost", "-")):
        # each window's mean drawn across its window, so a value sits where it was measured
        ax.plot(data["t_s"], data["token_ms"], style, label=label, drawstyle="steps-mid")
        ax2.plot(data["t_s"], data["ttft_ms"], style, label=label, drawstyle="steps-mid")
        ax3.plot(run.steps["start_us"] * 1e-6, run.steps["num_running"], style, label=label)
    ax.axhline(new["tpot_ms"]["mean"], color="tab:purple", linewidth=1, linestyle=":",
               label=f"new steady state on {ep - 1} ranks (same load)")
    for a in (ax, ax2, ax3):
        a.axvline(failure.at_s, color="tab:red", linewidth=1, label="failure")
        a.grid(alpha=0.3)
    if lighter_phase and np.isfinite(trans["refill_s"]):      # only the phase the answer names
        ax3.axvspan(failure.at_s, failure.at_s + trans["refill_s"], color="tab:orange", alpha=0.15,
                    label="lighter load while lost requests are replaced")
    ax.set_ylabel(f"ms per output token\n({window_s:g}-s mean, stalls included)")
    ax2.set_ylabel("TTFT by arrival (ms)")
    ax3.set_ylabel("running requests")
    ax3.set_xlim(0, max(t_steps.max() if t_steps.size else 0, failing.workload.duration_s))
    ax3.set_xlabel("simulated time (s)")
    ax.legend(fontsize=7)
    ax3.legend(fontsize=7)
    save_figure(fig, args.out, "elastic_ep64_failure", f"Elastic EP {ep}: one rank lost")
    return {"answer": answer_line, "direction": "slower" if step_change >= 0 and tpot_change >= 0 else "faster",
            "step_change": step_change, "tpot_change": tpot_change, "lost": lost}


if __name__ == "__main__":
    main()
