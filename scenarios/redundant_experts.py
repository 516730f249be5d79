"""Redundant experts vs memory vs balancedness (Qwen3-235B-A22B decode, EP 32, Zipf 1.0).

For each number of redundant experts R (a multiple of the EP size) and each way tokens pick
among an expert's replicas (`ep_dispatch_algorithm`: SGLang's default `static` -- the replica
on the sender's GPU, else its node, else any -- or `random`, an even split), places the
experts with EPLB (`epsim.eplb`, DeepSeek's algorithm) from the skew model's true popularity
-- the placement a rebalance settles on when popularity holds still -- and reports:
balancedness (mean/max GPU load, expected from the popularity, and per simulated step), the
expert weights per GPU (memory), and simulated decode throughput and TPOT with that placement
installed. The baseline is the static contiguous placement (no EPLB). The answer is the
fewest redundant experts whose balancedness reaches 0.9, per replica selection.

    python scenarios/redundant_experts.py [--quick | --lite] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import epsim
from epsim.plan import derived_columns, summary_metrics
from epsim.commands.scripting import answer, save_figure, script_args, settled_eplb_simulation, use_agg
from epsim.report import summarize
from epsim.sim import Simulation

SCENARIO = Path(__file__).with_suffix(".yaml")
TARGET_BALANCEDNESS = 0.9
SELECTIONS = ("static", "random")


def run_one(overrides: dict, eplb: bool) -> dict:
    """Simulate with EPLB's settled placement installed (or the contiguous one, no EPLB)."""
    scenario = epsim.load_scenario(SCENARIO, overrides)
    if eplb:
        sim, expected = settled_eplb_simulation(scenario)
    else:
        sim = Simulation(scenario)
        popularity = sim.skew.popularity(0.0)                                   # [layers, experts]
        per_rank = popularity.reshape(popularity.shape[0], scenario.deployment.ep_size, -1).sum(axis=2)
        expected = float((per_rank.mean(axis=1) / per_rank.max(axis=1)).mean())
    metrics = summary_metrics(summarize(sim.run()))
    return {**derived_columns(scenario), **metrics, "expected_balancedness": expected,
            "redundant": scenario.deployment.ep_num_redundant_experts,
            "selection": scenario.deployment.ep_dispatch_algorithm}


def main(argv=None) -> dict:
    args = script_args(__doc__, argv)
    ep = epsim.load_scenario(SCENARIO).deployment.ep_size
    # quick keeps the full EP size: a smaller instance is less skewed and answers otherwise
    quick = ({"workload.duration_s": 0.6, "workload.warmup_s": 0.2} if args.quick else
             {"workload.duration_s": 2.0, "workload.warmup_s": 0.5} if args.lite else {})
    counts = [0, ep] if args.quick else [0, ep, 2 * ep] if args.lite else [0, ep, 2 * ep, 3 * ep, 4 * ep]
    baseline = run_one({**quick, "deployment.ep_num_redundant_experts": 0, "deployment.enable_eplb": False}, False)
    rows = {sel: [run_one({**quick, "deployment.ep_num_redundant_experts": r, "deployment.ep_dispatch_algorithm": sel},
                          True) for r in counts] for sel in SELECTIONS}

    print(f"{'placement':>24} {'slots/GPU':>9} {'expert GiB/GPU':>14} {'HBM left GiB':>12} "
          f"{'balancedness':>12} {'(per step)':>10} {'tok/s/GPU':>9} {'TPOT ms':>8}")
    for row in [baseline] + rows["static"] + rows["random"]:
        label = (f"EPLB {row['selection']}, R={row['redundant']}" if row is not baseline
                 else "contiguous, no EPLB")
        print(f"{label:>24} {row['expert_slots_per_gpu']:>9g} {row['expert_weights_gib_per_gpu']:>14.1f} "
              f"{row['hbm_headroom_gib']:>12.1f} {row['expected_balancedness']:>12.3f} {row['balancedness']:>10.3f} "
              f"{row['output_tokens_per_s_per_gpu']:>9.0f} {row['step_ms.p50']:>8.2f}")
    parts = []
    for sel in SELECTIONS:
        enough = [row for row in rows[sel] if row["expected_balancedness"] >= TARGET_BALANCEDNESS]
        best = max(rows[sel], key=lambda row: row["expected_balancedness"])
        if enough:
            pick = enough[0]
            extra = pick["expert_weights_gib_per_gpu"] - baseline["expert_weights_gib_per_gpu"]
            parts.append(f"with {sel} replica selection {pick['redundant']} redundant experts "
                         f"(+{extra:.1f} GiB per GPU) reach balancedness {pick['expected_balancedness']:.3f} and "
                         f"TPOT {pick['step_ms.p50']:.1f} ms (no EPLB: {baseline['step_ms.p50']:.1f} ms)")
        else:
            parts.append(f"with {sel} replica selection no R up to {counts[-1]} reaches {TARGET_BALANCEDNESS} "
                         f"(best {best['expected_balancedness']:.3f} at R={best['redundant']})")
    shown = next((row for row in rows["random"] if row["expected_balancedness"] >= TARGET_BALANCEDNESS),
                 rows["random"][-1])
    answer_line = answer(args, "; ".join(parts) + f" (keep-up and shares below: random selection, "
                                                  f"R={shown['redundant']})", shown,
                         epsim.load_scenario(SCENARIO, quick).workload, saturated=True)
    static = rows["static"]
    direction = "more balanced" if static[1]["expected_balancedness"] > static[0]["expected_balancedness"] \
        else "not more balanced"

    use_agg()
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for sel in SELECTIONS:
        mem = [row["expert_weights_gib_per_gpu"] for row in rows[sel]]
        line, = ax.plot(mem, [row["expected_balancedness"] for row in rows[sel]], marker="o",
                        label=f"EPLB, {sel} selection")
        ax.plot(mem, [row["balancedness"] for row in rows[sel]], marker="s", linestyle=":",
                color=line.get_color(), label=f"{sel}, per simulated step")
        ax2.plot(mem, [row["output_tokens_per_s_per_gpu"] for row in rows[sel]], marker="o",
                 color=line.get_color(), label=f"EPLB, {sel} selection")
        for row, x in zip(rows[sel], mem):
            ax.annotate(f"R={row['redundant']}", (x, row["expected_balancedness"]), fontsize=7,
                        textcoords="offset points", xytext=(4, -10))
    ax.axhline(baseline["expected_balancedness"], color="0.5", linestyle="--", label="no EPLB")
    ax.axhline(TARGET_BALANCEDNESS, color="tab:red", linestyle="--", linewidth=1, label="target")
    ax2.axhline(baseline["output_tokens_per_s_per_gpu"], color="0.5", linestyle="--", label="no EPLB")
    ax.set_ylabel("balancedness (mean / max GPU load)")
    ax2.set_ylabel("output tokens/s per GPU")
    for a in (ax, ax2):
        a.set_xlabel("expert weights per GPU (GiB)")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    save_figure(fig, args.out, "redundant_experts",
                f"Redundant experts: memory vs balancedness vs throughput (EP {ep}, Zipf 1.0)")
    return {"answer": answer_line, "direction": direction}


if __name__ == "__main__":
    main()
