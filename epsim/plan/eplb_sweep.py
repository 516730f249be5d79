"""When does EPLB pay, and how often should it rebalance? Runs of one scenario side by side.

`compare_eplb` simulates a scenario as given and without EPLB (static contiguous placement, no
redundant experts); `sweep_rebalance_interval` simulates it at several
`eplb_rebalance_num_iterations` and names the best. Rebalancing too often pays the weight moves
too often; too rarely lets the placement go stale while popularity drifts.

    from epsim.plan.eplb_sweep import sweep_rebalance_interval
    sweep = sweep_rebalance_interval(load_scenario("scenarios/eplb_interval_drift.yaml"),
                                     [25, 50, 100, 200, 400, 800])
    print(sweep.table(), sweep.best["interval"])
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from epsim.errors import SpecError
from epsim.io.write import write_figure
from epsim.report.summary import summarize
from epsim.sim.engine import simulate
from epsim.spec.scenario import scenario_from_dict

METRIC = "output_tokens_per_s_per_gpu"


def _with_deployment(scenario, **values):
    """`scenario` with deployment fields replaced (validated again, so bad values fail here)."""
    data = scenario.model_dump()
    data["deployment"] = {**data["deployment"], **values}
    return scenario_from_dict(data, where=scenario.name, base_dir=scenario.base_dir)


def without_eplb(scenario):
    """The scenario served with the static contiguous placement: no EPLB, no redundant experts."""
    return _with_deployment(scenario, enable_eplb=False, ep_num_redundant_experts=0)


def run_row(scenario, seed: int | None = None, profile=None) -> dict:
    """Simulate once and return the numbers the comparisons use (a flat dict)."""
    s = summarize(simulate(scenario, profile=profile, seed=seed))
    eplb = s.get("eplb", {})
    return {
        "interval": scenario.deployment.eplb_rebalance_num_iterations if scenario.deployment.enable_eplb else None,
        "enable_eplb": scenario.deployment.enable_eplb,
        "output_tokens_per_s_per_gpu": s["output_tokens_per_s_per_gpu"],
        "throughput_tokens_per_s_per_gpu": s["throughput_tokens_per_s_per_gpu"],
        "tpot_ms_p50": s["tpot_ms"]["p50"], "tpot_ms_p99": s["tpot_ms"]["p99"],
        "ttft_ms_p50": s["ttft_ms"]["p50"],
        "keeps_up": s["keep_up"]["ok"], "keep_up": s["keep_up"]["verdict"],
        "step_ms_p50": s["step_ms"]["p50"], "balancedness": s["balancedness"],
        "num_rebalances": eplb.get("num_rebalances", 0),
        "stall_s": eplb.get("stall_us_total", 0.0) * 1e-6,
        "spread_s": eplb.get("spread_us_total", 0.0) * 1e-6,
        "moved_gb": eplb.get("moved_bytes_total", 0.0) / 1e9,
        "num_steps": s["num_steps"],
    }


def _run_all(scenarios: list, seed: int | None, profile, workers: int) -> list[dict]:
    if workers <= 1 or len(scenarios) <= 1:
        return [run_row(sc, seed, profile) for sc in scenarios]
    # spawn, as epsim.plan's pool: a forked child of a threaded host (the app's server) inherits
    # its locks and state; a fresh interpreter does not
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(run_row, sc, seed, profile) for sc in scenarios]
        return [f.result() for f in futures]


def compare_eplb(scenario, seed: int | None = None, profile=None, workers: int = 1) -> dict:
    """Throughput and balance with the scenario's EPLB and without EPLB.

    Returns:
        {"eplb": row, "static": row, "gain_frac": relative change of output tokens/s/GPU}.
    Raises:
        SpecError: a scenario without `enable_eplb`.
    """
    if not scenario.deployment.enable_eplb:
        raise SpecError(f"{scenario.name}: deployment.enable_eplb (False) must be true to compare "
                        f"with and without EPLB")
    with_eplb, static = _run_all([scenario, without_eplb(scenario)], seed, profile, workers)
    return {"eplb": with_eplb, "static": static,
            "gain_frac": with_eplb[METRIC] / static[METRIC] - 1.0 if static[METRIC] > 0 else float("nan")}


@dataclass(frozen=True)
class IntervalSweep:
    """Runs at several rebalance intervals, plus one without EPLB.

    Attributes:
        rows: one `run_row` dict per interval, in the order given.
        baseline: the run without EPLB (None if not asked for).
        metric: what `best` maximises.
    """

    rows: list
    baseline: dict | None
    metric: str = METRIC

    @property
    def best(self) -> dict:
        """The row with the highest `metric`."""
        return max(self.rows, key=lambda row: row[self.metric])

    @property
    def is_interior(self) -> bool:
        """The best interval is neither the shortest nor the longest tried (a clear optimum)."""
        intervals = [row["interval"] for row in self.rows]
        return min(intervals) < self.best["interval"] < max(intervals)

    def table(self) -> str:
        """A plain-text table of the sweep (best marked)."""
        lines = [f"{'interval':>9} {'tok/s/GPU':>10} {'step p50 ms':>11} {'balancedness':>12} "
                 f"{'rebalances':>10} {'stall s':>8} {'spread s':>8} {'moved GB':>9}"]
        best = self.best
        for row in self.rows + ([self.baseline] if self.baseline else []):
            name = str(row["interval"]) if row["enable_eplb"] else "no EPLB"
            lines.append(f"{name:>9} {row[self.metric]:>10.1f} {row['step_ms_p50']:>11.2f} "
                         f"{row['balancedness']:>12.3f} {row['num_rebalances']:>10} {row['stall_s']:>8.2f} "
                         f"{row['spread_s']:>8.2f} {row['moved_gb']:>9.0f}" + ("  <- best" if row is best else ""))
        return "\n".join(lines)


def sweep_rebalance_interval(scenario, intervals, seed: int | None = None, profile=None,
                             baseline: bool = True, metric: str = METRIC,
                             workers: int = 1) -> IntervalSweep:
    """Simulate `scenario` at each `eplb_rebalance_num_iterations` in `intervals`.

    Args:
        scenario: a validated Scenario with `enable_eplb`.
        intervals: forward passes between rebalances, each > 0.
        baseline: also run without EPLB.
        metric: a `run_row` key to maximise (default output tokens/s per GPU).
        workers: processes to run the simulations in.
    Raises:
        SpecError: no EPLB in the scenario, no or non-positive intervals, an unknown metric.
    """
    intervals = list(intervals)
    if not scenario.deployment.enable_eplb:
        raise SpecError(f"{scenario.name}: deployment.enable_eplb (False) must be true to sweep the "
                        f"rebalance interval")
    if not intervals or any(not isinstance(n, int) or n <= 0 for n in intervals):
        raise SpecError(f"intervals ({intervals}) must be one or more positive integers (forward passes)")
    scenarios = [_with_deployment(scenario, eplb_rebalance_num_iterations=n) for n in intervals]
    if baseline:
        scenarios.append(without_eplb(scenario))
    rows = _run_all(scenarios, seed, profile, workers)
    if metric not in rows[0]:
        numeric = sorted(k for k, v in rows[0].items() if isinstance(v, float))
        raise SpecError(f"metric ({metric!r}) must be one of {numeric}")
    return IntervalSweep(rows[:len(intervals)], rows[-1] if baseline else None, metric)


def interval_figure(sweep: IntervalSweep, path: str | Path, title: str = "") -> None:
    """Throughput, balancedness and stall time against the interval (log x), best starred."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = [row["interval"] for row in sweep.rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(xs, [row[sweep.metric] for row in sweep.rows], marker="o", label="EPLB")
    best = sweep.best
    left.plot([best["interval"]], [best[sweep.metric]], "*", ms=16, color="gold", mec="black",
              label=f"best: every {best['interval']} passes")
    right.plot(xs, [row["balancedness"] for row in sweep.rows], marker="o", label="balancedness (per step)")
    if sweep.baseline is not None:
        left.axhline(sweep.baseline[sweep.metric], color="0.5", ls="--", label="no EPLB")
        right.axhline(sweep.baseline["balancedness"], color="0.5", ls="--", label="no EPLB")
    stalls = right.twinx()
    stalls.plot(xs, [row["stall_s"] + row["spread_s"] for row in sweep.rows], marker="s",
                color="tab:red", alpha=0.7, label="weight-move time (s)")
    stalls.set_ylabel("weight-move time, whole run (s)", color="tab:red")
    for ax, label in ((left, sweep.metric.replace("_", " ")), (right, "balancedness (mean/max)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("rebalance interval (forward passes)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower center")
    fig.suptitle(title or "EPLB rebalance interval")
    fig.tight_layout()
    try:
        write_figure(fig, path)
    finally:
        plt.close(fig)
