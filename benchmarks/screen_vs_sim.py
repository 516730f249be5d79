"""The analytic screen against the simulation (two-tier planning, docs/planning.md).

    python benchmarks/screen_vs_sim.py            # print
    python benchmarks/screen_vs_sim.py --write    # also record benchmarks/results/screen_vs_sim.md
    python benchmarks/screen_vs_sim.py --quick --write   # reduced size: benchmarks/results/quick/

Part 1, speed: the screen alone on a large sweep of `scenarios/qwen235b_h200_decode.yaml`
(5,760 configurations: EP size x backend x dispatch dtype x batch limit x two-batch overlap x
arrival rate x skew), on the local executor with `--workers` processes.

Part 2, agreement, on a stated sample: the 200-point Cartesian sweep `SAMPLE_SWEEP` of the same
scenario (30 simulated s per point, statistics after 10 s), every point simulated (`epsim plan`
without a screen; started empty, and again from the screen's steady batch, `--warm-start`) and
screened. Recorded: Spearman rank correlation and relative error of the
screen's TPOT (against the simulation's mean and p99) and throughput per GPU, keep-up agreement,
and whether `epsim plan --screen` (simulating only the screen's candidates and neighbours)
gives the same answer as simulating all 200.

`--quick` runs the same two parts on `QUICK_SPEED_SWEEP` and `QUICK_SAMPLE_SWEEP` (seconds, not
minutes); its every number but the wall times and load averages regenerates, which
tests/benchmarks/test_recorded_results.py checks against benchmarks/results/quick/screen_vs_sim.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "qwen235b_h200_decode.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "screen_vs_sim.md"
QUICK_RESULTS = ROOT / "benchmarks" / "results" / "quick" / "screen_vs_sim.md"

SPEED_SWEEP = ["deployment.ep_size=8:128:x2", "deployment.moe_a2a_backend=deepep,mooncake",
               "deployment.dispatch_dtype=bf16,fp8", "deployment.max_running_requests=32,64,128,256",
               "deployment.enable_two_batch_overlap=false,true",
               "workload.arrivals.rate_per_s=50:600:+50", "workload.skew.alpha=0.4,0.8,1.2"]
SAMPLE_SWEEP = ["deployment.ep_size=8:128:x2", "deployment.moe_a2a_backend=deepep,mooncake",
                "deployment.max_running_requests=32,64,128,256",
                "workload.arrivals.rate_per_s=100:500:+100"]
QUICK_SPEED_SWEEP = ["deployment.ep_size=8:128:x2", "deployment.moe_a2a_backend=deepep,mooncake",
                     "workload.arrivals.rate_per_s=100:500:+100"]
QUICK_SAMPLE_SWEEP = ["deployment.ep_size=8:128:x2", "deployment.moe_a2a_backend=deepep",
                      "workload.arrivals.rate_per_s=100,200"]
CONSTRAINTS = ["tpot_ms.p99<=50"]


def screen_speed(workers: int, sweep: list[str]) -> dict:
    """Build and screen every point of `sweep` (no simulation)."""
    from epsim.plan.points import load_base
    from epsim.plan.runner import _axes, _build_points
    from epsim.plan.tiers import screen_points
    start = time.perf_counter()
    points, skipped = _build_points(load_base(SCENARIO), _axes(sweep), None)
    built = time.perf_counter()
    screened = screen_points(points, None, "local", workers, None, progress=False)
    end = time.perf_counter()
    return {"points": len(points), "skipped": len(skipped), "build_s": built - start,
            "screen_s": end - built, "total_s": end - start,
            "priced": sum(1 for v in screened.values() if v)}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr
    ok = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[ok], b[ok]).statistic) if ok.sum() > 2 else float("nan")


def rel_err(est: np.ndarray, ref: np.ndarray) -> np.ndarray:
    ok = np.isfinite(est) & np.isfinite(ref) & (ref > 0)
    return np.abs(est[ok] - ref[ok]) / ref[ok]


def compare(screened, simulated) -> dict:
    """The screen's estimates (`screened`: a `--screen` plan's rows) against one all-simulated
    plan of the same points: rank correlations and relative errors over the points that keep up
    by both, and over those of them whose run settled (`keep_up.settled`: the window reached a
    steady batch, epsim/report/keep_up.py), and keep-up agreement."""
    col = lambda res, name: res.column(name)                        # noqa: E731
    keeps = col(screened, "screen.keep_up") == 1.0
    sim_keeps = col(simulated, "keep_up.ok") == 1.0
    settled = col(simulated, "keep_up.settled") == 1.0
    s_tpot = col(screened, "screen.tpot_ms")
    s_thr = col(screened, "screen.throughput_tokens_per_s_per_gpu")
    tpot_mean, tpot_p99 = col(simulated, "tpot_ms.mean"), col(simulated, "tpot_ms.p99")
    thr = col(simulated, "throughput_tokens_per_s_per_gpu")
    out = {"num_settled": int(settled.sum()),
           "rho_throughput": spearman(s_thr, thr),
           "keep_up_agree": float((keeps == sim_keeps).mean()),
           "keep_up_agree_settled": (float((keeps == sim_keeps)[settled].mean())
                                     if settled.any() else float("nan")),
           "screen_only_keeps": int((keeps & ~sim_keeps).sum()),
           "sim_only_keeps": int((~keeps & sim_keeps).sum()),
           "sim_only_keeps_unsettled": int((~keeps & sim_keeps & ~settled).sum())}
    for suffix, rows in (("", keeps & sim_keeps), ("_settled", keeps & sim_keeps & settled)):
        out.update({f"num_rows{suffix}": int(rows.sum()),
                    f"rho_tpot_mean{suffix}": spearman(s_tpot[rows], tpot_mean[rows]),
                    f"rho_tpot_p99{suffix}": spearman(s_tpot[rows], tpot_p99[rows]),
                    f"err_tpot_mean{suffix}": rel_err(s_tpot[rows], tpot_mean[rows]),
                    f"err_tpot_p99{suffix}": rel_err(s_tpot[rows], tpot_p99[rows]),
                    f"err_throughput{suffix}": rel_err(s_thr[rows], thr[rows])})
    return out


def answers(res) -> list[str]:
    return [f"{a.describe()}: " + ("none" if a.best is None else res.describe(a.best))
            for a in res.answers]


def num_same(a, b) -> int:
    """Workload points where plans `a` and `b` choose the same deployment (or none)."""
    def chosen(res, answer):
        return None if answer.best is None else {k: res.rows[answer.best][k] for k in res.keys}
    return sum(chosen(a, x) == chosen(b, y) for x, y in zip(a.answers, b.answers))


def agreement(workers: int, out: Path, sweep: list[str]) -> dict:
    """Every point simulated, started empty and from the screen's steady batch
    (`--warm-start`), and the two-tier plan of each, against the screen."""
    from epsim.plan.runner import run_plan
    common = dict(constraints=CONSTRAINTS, executor="local", workers=workers, out=out,
                  progress=False, plots=False, require_feasible=False)
    plans, wall_s = {}, {}
    for name, kw in (("full", {}), ("two", {"screen": True}), ("warm", {"warm_start": True}),
                     ("warm_two", {"screen": True, "warm_start": True})):
        start = time.perf_counter()
        plans[name] = run_plan(SCENARIO, sweep, **kw, **common)   # later plans reuse runs
        wall_s[name] = time.perf_counter() - start
    two, full, warm, warm_two = plans["two"], plans["full"], plans["warm"], plans["warm_two"]
    return {
        "points": len(full.rows), "wall_s": wall_s,
        "simulated_by_two_tier": int(sum(1 for r in two.rows if r["tier"] == "simulated")),
        "cold": compare(two, full), "warm": compare(two, warm),
        "answers": {name: answers(res) for name, res in plans.items()},
        "num_answers": len(full.answers), "same_two": num_same(full, two),
        "same_warm_two": num_same(warm, warm_two), "same_cold_warm": num_same(full, warm),
    }


def agreement_lines(c: dict, points: int) -> list[str]:
    """The agreement table and keep-up line of one `compare` result."""
    def row(label: str, key: str, rho: bool = True) -> str:
        return (f"| {label} | {c['rho_' + key]:.3f} | " if rho else f"| {label} | - | ") + \
            f"{pct(c['err_' + key], 50)} | {pct(c['err_' + key], 90)} |"
    return [
        "| quantity | Spearman rank correlation | median abs. rel. error | p90 abs. rel. error |",
        "|---|---:|---:|---:|",
        row("screen TPOT vs simulated TPOT mean", "tpot_mean"),
        row("screen TPOT vs simulated TPOT p99", "tpot_p99"),
        row("screen vs simulated throughput per GPU", "throughput"),
        row("screen TPOT vs simulated TPOT mean, settled runs", "tpot_mean_settled"),
        row("screen TPOT vs simulated TPOT p99, settled runs", "tpot_p99_settled"),
        row("screen vs simulated throughput per GPU, settled runs", "throughput_settled", False), "",
        f"TPOT rows: the {c['num_rows']} points that keep up by both (a point that does not keep "
        "up has no steady-state TPOT); throughput correlation over all points, errors over those "
        f"that keep up by both. *Settled runs*: the {c['num_rows_settled']} of them whose "
        "simulation reached a steady batch in its window (`keep_up.settled`: the running "
        "requests grew or shrank by less than 10 % of the offered rate, or within arrival noise, "
        f"over the window's second half); {points - c['num_settled']} of the {points} "
        "simulations are not settled.", "",
        f"Keep-up verdicts agree on {c['keep_up_agree'] * 100:.1f} % of the points "
        f"({c['screen_only_keeps']} keep up by the screen only, {c['sim_only_keeps']} by the "
        f"simulation only, {c['sim_only_keeps_unsettled']} of those in runs not settled); on "
        f"{c['keep_up_agree_settled'] * 100:.1f} % of the settled runs.", ""]


def pct(errors: np.ndarray, q: float) -> str:
    return f"{np.percentile(errors, q) * 100:.1f} %" if errors.size else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "runs" / "screen_vs_sim"),
                        help="results directory of the sample's plans")
    parser.add_argument("--write", action="store_true", help=f"record results in {RESULTS}")
    parser.add_argument("--quick", action="store_true",
                        help=f"the reduced sweeps (seconds); --write records {QUICK_RESULTS}")
    args = parser.parse_args(argv)
    import warnings
    warnings.simplefilter("ignore")
    speed_sweep = QUICK_SPEED_SWEEP if args.quick else SPEED_SWEEP
    sample_sweep = QUICK_SAMPLE_SWEEP if args.quick else SAMPLE_SWEEP
    results = QUICK_RESULTS if args.quick else RESULTS
    speed = screen_speed(args.workers, speed_sweep)
    load_speed = os.getloadavg()[0]
    print(f"screen: {speed}", file=sys.stderr)
    agree = agreement(args.workers, Path(args.out) / ("quick" if args.quick else ""), sample_sweep)
    load_agree = os.getloadavg()[0]
    print({k: v for k, v in agree.items() if k not in ("cold", "warm")}, file=sys.stderr)
    lines = [
        "## Speed: the screen alone", "",
        f"`{SCENARIO.name}` swept over {len(speed_sweep)} axes: "
        + "; ".join(f"`{s}`" for s in speed_sweep) + ".", "",
        "| configurations | skipped (invalid) | build s | screen s | total s | configurations/s | "
        "workers | load average (1 min) |", "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {speed['points']} | {speed['skipped']} | {speed['build_s']:.1f} | {speed['screen_s']:.1f} "
        f"| {speed['total_s']:.1f} | {speed['points'] / speed['total_s']:.0f} | {args.workers} "
        f"| {load_speed:.1f} |", "",
        "## Agreement with the simulation (stated sample)", "",
        f"Sample: the {agree['points']}-point Cartesian sweep "
        + "; ".join(f"`{s}`" for s in sample_sweep)
        + f" of `{SCENARIO.name}` (30 simulated s per point, statistics after 10 s), constraint "
        + ", ".join(f"`{c}`" for c in CONSTRAINTS) + ", keep-up required.", "",
        "### Simulations started empty (the scenario as written)", "",
        *agreement_lines(agree["cold"], agree["points"]),
        "A run that starts empty fills its batch over about a request's lifetime, longer near "
        "capacity; the runs not settled end while it is still filling, so they see a smaller "
        "batch and a shorter TPOT than the steady state the screen computes, and keep up.", "",
        "### Simulations started at the screen's steady batch (`--warm-start`)", "",
        *agreement_lines(agree["warm"], agree["points"]),
        "## Does the answer change?", "",
        f"The arrival rate is a workload key, so the plan answers each of the "
        f"{agree['num_answers']} rates separately (least GPUs, then throughput per GPU).", "",
        f"All {agree['points']} simulated, started empty ({agree['wall_s']['full']:.0f} s):", "",
        *[f"- {line}" for line in agree["answers"]["full"]], "",
        f"Two tiers, {agree['simulated_by_two_tier']} of {agree['points']} simulated (the plan "
        "reuses the first plan's simulations from the results directory, so its "
        f"{agree['wall_s']['two']:.0f} s is the screen and the choice only):", "",
        *[f"- {line}" for line in agree["answers"]["two"]], "",
        f"Same answer for **{agree['same_two']} of {agree['num_answers']}** rates.", "",
        f"All {agree['points']} simulated from the screen's steady batch, `--warm-start` "
        f"({agree['wall_s']['warm']:.0f} s):", "",
        *[f"- {line}" for line in agree["answers"]["warm"]], "",
        f"Two tiers with `--warm-start`: same answer as all simulated with `--warm-start` for "
        f"**{agree['same_warm_two']} of {agree['num_answers']}** rates; all simulated, started "
        f"empty or from the steady batch: same answer for {agree['same_cold_warm']} of "
        f"{agree['num_answers']}.", "",
        f"Load average (1 min) at the end of the agreement runs: {load_agree:.1f} on 2 cores "
        "shared with other work, so wall times are upper bounds.",
    ]
    report = "\n".join(lines)
    print(report)
    if args.write:
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(
            "# Two-tier planning: the analytic screen against the simulation "
            "(benchmarks/screen_vs_sim.py)\n\n"
            f"Recorded with `python benchmarks/screen_vs_sim.py {' '.join(sys.argv[1:])}` on "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}.\n\n" + report + "\n")
        print(f"\nwrote {results}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
