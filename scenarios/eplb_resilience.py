"""How often to rebalance and how many redundant experts to keep, under GPU failures
(DeepSeek-V3 decode, EP 64 on 8 x 8 H200, 1e-4 failures per GPU-hour).

For each EP size (32, 64, 128) with and without redundant experts, the resilience columns of a
plan (`epsim.plan.resilience`): the stall of one rebalance as SGLang runs it (term by term,
`epsim.eplb.host_terms`), rebalances and stall seconds per hour at the scenario's interval,
the placement's balancedness fresh and after an interval of drift, the interruption of one GPU
failure (the dispatch timeout, reloads, the rebalance over the survivors; without redundant
experts the instance restarts) and the instance-seconds a failure costs, and the goodput.

Then, at EP 64, the rebalance interval and the redundant experts: the served share is goodput
times the balance factor (the MoE share of a step, from a short simulation at a fresh placement,
scales with the busiest rank; `epsim.plan.resilience.serving_frac`), relative to the best
balance any choice reaches. The answer keeps the fewest redundant experts whose best interval
serves within one point (`WITHIN`) of the best choice's share (each redundant slot costs an
expert's weights on every GPU), and names that interval.

    python scenarios/eplb_resilience.py [--quick | --lite] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import epsim
from epsim.plan.columns import derived_columns
from epsim.plan.resilience import resilience_columns, serving_frac
from epsim.commands.scripting import answer, save_figure, script_args, settled_eplb_simulation, use_agg
from epsim.report import summarize

SCENARIO = Path(__file__).with_suffix(".yaml")
MOE_PARTS = ("dispatch", "experts", "combine")
WITHIN = 0.01       # served share a redundancy may give up against the best to save memory


def moe_frac(overrides: dict) -> float:
    """Share of a decode step in dispatch, experts and combine at EPLB's settled placement
    (a short simulation)."""
    scenario = epsim.load_scenario(SCENARIO, {**overrides, "workload.duration_s": 1.0,
                                              "workload.warmup_s": 0.2})
    sim, _ = settled_eplb_simulation(scenario)
    breakdown = summarize(sim.run())["time_breakdown_frac"]
    return float(sum(breakdown.get(part, 0.0) for part in MOE_PARTS))


def main(argv=None) -> dict:
    args = script_args(__doc__, argv)
    if args.quick:
        sizes, intervals, redundancy = (32, 64), (100, 1000), (0, 64)
    elif args.lite:
        sizes, intervals, redundancy = (32, 64, 128), (100, 1000, 10000), (0, 64, 128)
    else:
        sizes, intervals = (32, 64, 128), (50, 100, 200, 500, 1000, 2000, 5000, 10000)
        redundancy = (0, 64, 128)
    base = epsim.load_scenario(SCENARIO)
    rate = base.deployment.failures_per_gpu_hour

    print(f"{'EP':>4} {'redundant':>9} {'stall s':>8} {'stall s/h':>9} {'bal fresh':>9} "
          f"{'bal stale':>9} {'failure s':>9} {'lost s':>8} {'goodput':>8}")
    by_size = {}
    for ep in sizes:
        for red in (0, ep):
            sc = epsim.load_scenario(SCENARIO, {"deployment.ep_size": ep, "cluster.num_nodes": ep // 8,
                                                "deployment.ep_num_redundant_experts": red})
            row = resilience_columns(sc)
            by_size[(ep, red)] = row
            print(f"{ep:>4} {red:>9} {row['rebalance_stall_s']:>8.2f} {row['rebalance_stall_s_per_hour']:>9.1f} "
                  f"{row['balancedness_fresh']:>9.3f} {row['balancedness_stale']:>9.3f} "
                  f"{row['failure_interruption_s']:>9.1f} {row['failure_lost_s']:>8.1f} "
                  f"{row['goodput_frac']:>8.4f}")

    # EP 64: interval x redundancy, served share relative to the best fresh balance of any choice
    moe = moe_frac({})
    grid = {}
    for red in redundancy:
        for interval in intervals:
            sc = epsim.load_scenario(SCENARIO, {"deployment.ep_num_redundant_experts": red,
                                                "deployment.eplb_rebalance_num_iterations": interval,
                                                "deployment.expert_distribution_recorder_buffer_size":
                                                    min(interval, 1000)})
            grid[(red, interval)] = {**resilience_columns(sc), **derived_columns(sc)}
    best_fresh = max(row["balancedness_fresh"] for row in grid.values())
    served = {key: serving_frac(row, moe, best_fresh) for key, row in grid.items()}
    print(f"\nEP 64, {rate:g} failures per GPU-hour; MoE share of a step at a fresh placement {moe:.2f}")
    print(f"{'redundant':>9} {'interval':>8} {'stall s/h':>9} {'bal mean':>8} {'goodput':>8} "
          f"{'served':>7} {'experts GiB/GPU':>15}")
    for (red, interval), row in grid.items():
        mean = (row["balancedness_fresh"] + row["balancedness_stale"]) / 2
        print(f"{red:>9} {interval:>8} {row['rebalance_stall_s_per_hour']:>9.1f} {mean:>8.3f} "
              f"{row['goodput_frac']:>8.4f} {served[(red, interval)]:>7.3f} "
              f"{row['expert_weights_gib_per_gpu']:>15.1f}")
    best = max(served.values())
    red = min(r for r in redundancy if max(served[(r, i)] for i in intervals) >= best - WITHIN)
    interval = max(intervals, key=lambda i: served[(red, i)])
    row = grid[(red, interval)]
    text = (f"rebalance every {interval} forward passes and keep {red} redundant experts at EP 64: "
            f"{served[(red, interval)] * 100:.1f} % of a balanced failure-free instance's throughput "
            f"(goodput {row['goodput_frac'] * 100:.2f} %: {row['rebalance_stall_s_per_hour']:.1f} s/h of "
            f"rebalance stalls of {row['rebalance_stall_s']:.2f} s each, {row['failure_interruption_s']:.1f} s "
            f"per GPU failure at {rate:g} per GPU-hour; balancedness {row['balancedness_fresh']:.3f} fresh, "
            f"{row['balancedness_stale']:.3f} after an interval of drift; "
            f"{row['expert_weights_gib_per_gpu']:.1f} GiB of expert weights per GPU; the best choice "
            f"serves {best * 100:.1f} %)")
    answer_line = answer(args, text, workload=base.workload)

    use_agg()
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in redundancy:
        ax.plot(intervals, [served[(r, i)] for i in intervals], marker="o", label=f"{r} redundant")
    ax.set_xscale("log")
    ax.set_xlabel("rebalance interval (forward passes)")
    ax.set_ylabel("served share of a balanced, failure-free instance")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    labels = [f"EP {ep}\n{r} red." for ep, r in by_size]
    ax2.bar(labels, [row["failure_lost_s"] for row in by_size.values()], color="tab:red", alpha=0.6)
    ax2.set_yscale("log")
    ax2.set_ylabel("instance-seconds lost per GPU failure")
    ax2.grid(alpha=0.3, axis="y")
    save_figure(fig, args.out, "eplb_resilience", "EPLB and GPU failures, DeepSeek-V3 decode")
    return {"answer": answer_line, "interval": interval, "redundant": red,
            "direction": "redundant experts" if red else "no redundant experts"}


if __name__ == "__main__":
    main()
