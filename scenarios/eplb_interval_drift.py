"""EPLB rebalance interval under popularity drift (Qwen3-235B-A22B decode, EP 32).

Sweeps `eplb_rebalance_num_iterations` (forward passes between rebalances) and compares each
with serving without EPLB. The best interval maximises output tokens per GPU: short intervals
pay the weight-move stalls too often, long ones let the placement go stale as hot experts move.
When no interval beats serving without EPLB, the answer is to turn EPLB off. TPOT counts the
rebalance stalls every request lived through (docs/model.md).

The EPLB process (statistics window, rebalance, weight moves) runs inside the simulator's engine;
if the engine at hand has none, every interval gives the same result, and this script says so
instead of naming an optimum.

    python scenarios/eplb_interval_drift.py [--quick | --lite] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import epsim
from epsim.plan import run_plan
from epsim.commands.scripting import answer, log2_axis, save_figure, script_args, use_agg

SCENARIO = Path(__file__).with_suffix(".yaml")
KEY = "deployment.eplb_rebalance_num_iterations"


def rebalanced(row: dict) -> bool:
    """A run that moved expert weights: stop-the-world stalls, or chunks charged to steps."""
    return row["stall_us_total"] > 0 or row["time_breakdown_frac.extra"] > 0


def main(argv=None) -> dict:
    args = script_args(__doc__, argv)
    if args.quick:
        # the full shape (EP 32, the same skew and drift) over 20 simulated seconds (~120
        # passes): a smaller instance is less skewed, so it would not answer the same question,
        # and a shorter run would measure mostly the placement before the first rebalance (one
        # stop-the-world move costs ~7 passes of serving)
        intervals = "10,25,50"
        overrides = ["workload.duration_s=20", "workload.warmup_s=5"]
    elif args.lite:
        intervals = "5,50,400"
        overrides = ["workload.duration_s=30", "workload.warmup_s=5"]
    else:
        intervals = "5,10,15,25,50,100,200,400"
        overrides = []
    # saturated on purpose (every rank keeps a full batch): a throughput question, so keep-up
    # does not decide among the intervals
    common = dict(overrides=overrides, workers=args.workers, executor=args.executor, progress=args.progress,
                  keep_up=False)
    swept = run_plan(SCENARIO, [f"{KEY}={intervals}"], objectives=["max:output_tokens_per_s_per_gpu"],
                     pareto=[f"min:{KEY}", "max:output_tokens_per_s_per_gpu"],
                     out=args.out / "plan_eplb_interval_drift", require_feasible=False, **common)
    without = run_plan(SCENARIO, {"deployment.enable_eplb": [False]}, plots=False, require_feasible=False,
                       **{**common, "overrides": overrides + ["deployment.ep_num_redundant_experts=0"]}).rows[0]

    print(f"{'interval (passes)':>17} {'tok/s/GPU':>10} {'TPOT p50 ms':>11} {'TPOT p99 ms':>11} "
          f"{'balancedness':>12} {'stall s':>8}")
    for row in swept.rows:
        print(f"{row[KEY]:>17} {row['output_tokens_per_s_per_gpu']:>10.0f} {row['tpot_ms.p50']:>11.2f} "
              f"{row['tpot_ms.p99']:>11.2f} {row['balancedness']:>12.3f} {row['stall_us_total'] * 1e-6:>8.2f}")
    print(f"{'no EPLB':>17} {without['output_tokens_per_s_per_gpu']:>10.0f} {without['tpot_ms.p50']:>11.2f} "
          f"{without['tpot_ms.p99']:>11.2f} {without['balancedness']:>12.3f} {0:>8.2f}")
    title = "EPLB interval under popularity drift"
    workload = epsim.load_scenario(SCENARIO, overrides).workload
    # the best interval by output tokens per GPU, among the runs that keep up with the load
    best = swept.best_row or max(swept.rows, key=lambda r: r["output_tokens_per_s_per_gpu"])
    gain = best["output_tokens_per_s_per_gpu"] / without["output_tokens_per_s_per_gpu"] - 1.0
    if not any(rebalanced(row) for row in swept.rows):
        title += " (no rebalance ran)"
        direction = "none"
        answer_line = answer(args, f"no rebalance ran in any of the {len(swept.rows)} runs (no stalls, no "
                            f"weight-move time): every interval is longer than the run; lengthen "
                            f"workload.duration_s")
    elif gain > 0:
        direction = "eplb"
        answer_line = answer(args, f"rebalance every {best[KEY]} forward passes: "
                            f"{best['output_tokens_per_s_per_gpu']:.0f} tok/s/GPU, {gain * 100:+.1f}% over no "
                            f"EPLB (TPOT p99 {best['tpot_ms.p99']:.1f} vs {without['tpot_ms.p99']:.1f} ms, "
                            f"stalls included; balancedness {best['balancedness']:.3f} vs "
                            f"{without['balancedness']:.3f})", best, workload, saturated=True)
    else:
        direction = "off"
        answer_line = answer(args, f"turn EPLB off: no interval swept beats serving without it (the best, "
                            f"every {best[KEY]} passes, gives {best['output_tokens_per_s_per_gpu']:.0f} "
                            f"tok/s/GPU, {gain * 100:+.1f}% against no EPLB; its weight-move stalls cost "
                            f"more than its balance gains: TPOT p99 {best['tpot_ms.p99']:.1f} vs "
                            f"{without['tpot_ms.p99']:.1f} ms)", without, workload, saturated=True)

    use_agg()
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [row[KEY] for row in swept.rows]
    ax.plot(xs, [row["output_tokens_per_s_per_gpu"] for row in swept.rows], marker="o", label="EPLB")
    ax.axhline(without["output_tokens_per_s_per_gpu"], color="0.5", linestyle="--", label="no EPLB")
    ax2.plot(xs, [row["balancedness"] for row in swept.rows], marker="o", label="balancedness")
    ax2.axhline(without["balancedness"], color="0.5", linestyle="--", label="no EPLB")
    ax2b = ax2.twinx()
    ax2b.bar(xs, [row["stall_us_total"] * 1e-6 for row in swept.rows], width=[x * 0.3 for x in xs],
             color="tab:red", alpha=0.3, label="rebalance stalls (s)")
    ax2b.set_ylabel("rebalance stalls (s)")
    for a, label in ((ax, "output tokens/s per GPU"), (ax2, "balancedness (mean/max, per step)")):
        log2_axis(a)
        a.set_xlabel("rebalance interval (forward passes)")
        a.set_ylabel(label)
        a.grid(alpha=0.3)
        a.legend(fontsize=8, loc="upper right")
    save_figure(fig, args.out, "eplb_interval_drift", title)
    return {"answer": answer_line, "direction": direction, "gain": gain}


if __name__ == "__main__":
    main()
