"""What a reader must be told before trusting a run's numbers, as one line each: conditions
the run met that make its numbers something other than what its scenario seems to ask.
`epsim simulate` prints them as `note:` lines, the app as warnings.
"""

from __future__ import annotations

# a busiest GPU this far above the mean per step is what EPLB exists to fix
STALE_IMBALANCE = 2.0


def eplb_stale(summary: dict) -> str | None:
    """EPLB on, a high imbalance and no rebalance in the measurement window: the run measures
    the initial placement, not what EPLB would serve with. None when that is not the case."""
    eplb = summary.get("eplb")
    imbalance = summary.get("imbalance_max_over_mean", 1.0)
    if not eplb or not eplb.get("note") or imbalance < STALE_IMBALANCE:
        return None
    start = eplb.get("init_expert_location", "trivial")
    hint = ("set deployment.init_expert_location: from_skew (the placement EPLB settles on)"
            if start == "trivial" else "")
    passes = "or simulate more forward passes than eplb_rebalance_num_iterations"
    return (f"EPLB is on but no rebalance fell in the measurement window and the busiest GPU "
            f"carries {imbalance:.1f}x the mean load per step (balancedness "
            f"{summary['balancedness']:.3f}): these are the initial placement's numbers "
            f"({start}), not EPLB's; {hint + ' ' if hint else ''}{passes}")


def nothing_measured(summary: dict) -> str | None:
    """No step started in the measurement window: the run's throughput and latencies are no
    answer (a plan never calls such a point feasible). None when some step did."""
    if summary["num_measured_steps"]:
        return None
    window_s = summary["sim_seconds"] - summary["warmup_s"]
    return (f"nothing measured: no step started in the {window_s:g}-s measurement window "
            f"(warm-up {summary['warmup_s']:g} s of {summary['sim_seconds']:g} s; "
            f"{summary['num_steps']} step(s) in all): lengthen workload.duration_s or shorten "
            f"workload.warmup_s; the summary holds what the run did")


def cautions(summary: dict) -> list[str]:
    """Every caution that applies to a run (`summary`: `epsim.report.summarize`'s)."""
    return [c for c in (nothing_measured(summary), eplb_stale(summary)) if c]
