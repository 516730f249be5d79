"""EPLB over time and elastic EP in the simulator: the numbers and figures of docs/eplb.md.

    python benchmarks/eplb_over_time.py                 # everything (a few minutes on 2 cores)
    python benchmarks/eplb_over_time.py --only speed    # one part: sweep | redundancy | elastic | speed
    python benchmarks/eplb_over_time.py --write         # also record results and figures
    python benchmarks/eplb_over_time.py --only sweep --intervals 400,800   # some rows of a part
    python benchmarks/eplb_over_time.py --only speed --repeats 1           # its counts, one timing

Every number but the wall times regenerates from the committed code (same seeds, same result):
tests/benchmarks/test_recorded_results.py reruns the redundancy part, the sweep's longest
intervals and the speed part's counts, and compares them with the recorded ones.

Parts:
  sweep       scenarios/eplb_interval_drift.yaml at rebalance intervals 5..800 passes, and without
              EPLB: the best interval (docs/img/eplb_interval_sweep.png).
  redundancy  scenarios/eplb_redundancy_32gpu.yaml with EPLB (random and static replica choice)
              and without: busiest-GPU/mean before and after the first rebalance, throughput
              (docs/img/eplb_redundancy_32gpu.png).
  elastic     scenarios/elastic_ep64_failure.yaml with EPLB settled (every 300 passes) and rank 5
              lost at 15 s, back 20 s later (the first 10 s waiting out the dispatch timeout),
              against the same run without the failure
              (docs/img/elastic_ep64_failure_latency.png).
  speed       R1 (benchmarks/sim_speed.py's scenario) in simulated s per wall s, EPLB off and on.

Every run uses datasheet H200 costs (no fitted component), so the numbers show the EPLB and
elastic mechanics independent of the calibration profile shipped at the time.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")      # before numpy loads: BLAS threads only fight each other

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
IMG = ROOT / "docs" / "img"
RESULTS = ROOT / "benchmarks" / "results" / "eplb_over_time.md"
INTERVALS = [5, 10, 25, 50, 100, 200, 400, 800]


def datasheet():
    from epsim.profile import Profile
    return Profile(name="datasheet-H200", hardware="H200")


def sweep(write: bool, workers: int, intervals: list[int] = INTERVALS) -> list[str]:
    from epsim.plan.eplb_sweep import interval_figure, sweep_rebalance_interval
    from epsim.spec import load_scenario
    scenario = load_scenario(SCENARIOS / "eplb_interval_drift.yaml")
    result = sweep_rebalance_interval(scenario, intervals, profile=datasheet(), workers=workers)
    best = result.best
    gain = best["output_tokens_per_s_per_gpu"] / result.baseline["output_tokens_per_s_per_gpu"] - 1
    lines = ["## Rebalance interval under drift (scenarios/eplb_interval_drift.yaml)", "",
             "```", result.table(), "```", "",
             f"Best: every {best['interval']} forward passes, {best['output_tokens_per_s_per_gpu']:.0f} "
             f"output tokens/s/GPU ({gain:+.0%} over no EPLB); interior optimum: {result.is_interior}."]
    if write:
        skew = scenario.workload.skew
        interval_figure(result, IMG / "eplb_interval_sweep.png",
                        f"{scenario.model.name} decode EP {scenario.deployment.ep_size}, Zipf {skew.alpha:g} "
                        f"drifting {skew.drift_rate_per_s:g} swaps/expert/s: EPLB interval")
    return lines


def redundancy(write: bool) -> list[str]:
    from epsim.report.figures import eplb_timeline
    from epsim.report.summary import summarize
    from epsim.sim import simulate
    from epsim.plan.eplb_sweep import without_eplb
    from epsim.spec import load_scenario
    path = SCENARIOS / "eplb_redundancy_32gpu.yaml"
    lines = ["## 32 redundant experts on 32 GPUs (scenarios/eplb_redundancy_32gpu.yaml)", "",
             "| run | busiest/mean before the 1st rebalance | after (per step) | after (window) | "
             "output tok/s/GPU | step p50 ms | rebalance stalls s |", "|---|---:|---:|---:|---:|---:|---:|"]
    runs = [("EPLB deepseek_global, random", load_scenario(path)),
            ("EPLB deepseek_global, static", load_scenario(path, ["deployment.ep_dispatch_algorithm=static"])),
            ("EPLB deepseek (hierarchical), random", load_scenario(path, ["deployment.eplb_algorithm=deepseek"])),
            ("no EPLB, no redundancy", without_eplb(load_scenario(path)))]
    for name, scenario in runs:
        res = simulate(scenario, profile=datasheet())
        s = summarize(res)
        imb = res.steps["imbalance"]
        if res.rebalances:
            k = res.rebalances[0]["step"]
            first = res.rebalances[0]
            before, after = imb[:k + 1].mean(), imb[k + 1:].mean()
            window = f"{1 / first['balancedness_after']:.3f}"
        else:
            before = after = imb.mean()
            window = "-"
        lines.append(f"| {name} | {before:.2f} | {after:.3f} | {window} | "
                     f"{s['output_tokens_per_s_per_gpu']:.0f} | {s['step_ms']['p50']:.1f} | "
                     f"{s.get('eplb', {}).get('stall_us_total', 0.0) * 1e-6:.2f} |")
        if write and name.endswith("global, random"):
            eplb_timeline(res, IMG / "eplb_redundancy_32gpu.png")
    return lines


def elastic(write: bool) -> list[str]:
    from epsim.report.figures import failure_latency
    from epsim.report.summary import latency_windows, summarize
    from epsim.sim import simulate
    from epsim.spec import load_scenario
    # rank 5 down from 15 s for 20 s: the survivors first wait out the dispatch timeout
    # (deployment.moe_dispatch_timeout_s, 10 s), then serve on 63 ranks until it is back
    overrides = {"deployment.eplb_rebalance_num_iterations": 300, "workload.duration_s": 50.0,
                 "deployment.failures": [{"at_s": 15.0, "rank": 5, "recover_after_s": 20.0}]}
    failing = load_scenario(SCENARIOS / "elastic_ep64_failure.yaml", overrides)
    healthy = load_scenario(SCENARIOS / "elastic_ep64_failure.yaml", {**overrides, "deployment.failures": []})
    with_failure, without = simulate(failing, profile=datasheet()), simulate(healthy, profile=datasheet())
    s = summarize(with_failure)
    fail, back = s["elastic"]["events"]
    detected_s = 15.0 + fail["detection_us"] * 1e-6
    w, b = latency_windows(with_failure, 1.0), latency_windows(without, 1.0)
    after = (w["t_s"] > detected_s + 1.0) & (w["t_s"] < 35.0)
    worst = int(np.nanargmax(np.where(after, w["step_ms"] / b["step_ms"], np.nan)))
    lines = ["## One rank of EP 64 lost (scenarios/elastic_ep64_failure.yaml, EPLB every 300 passes, "
             "rank 5 down 15-35 s)", "",
             f"- failure at {fail['at_s']:.1f} s: {fail['lost_requests']} requests lost, "
             f"{fail['reloaded_experts']} expert slots reloaded ({fail['reload_bytes'] / 1e9:.1f} GB), "
             f"stall {fail['stall_us'] * 1e-3:.0f} ms (detection {fail['detection_us'] * 1e-3:.0f} ms); "
             f"recovery at {back['at_s']:.1f} s (rejoin resync stall {back['stall_us'] * 1e-3:.1f} ms)",
             "- rebalances: " + ", ".join(f"{e['reason']} at {e['at_s']:.1f} s (stall {e['stall_us'] * 1e-3:.0f} ms, "
                                          f"window balancedness {e['balancedness_before']:.2f} -> "
                                          f"{e['balancedness_after']:.2f})" for e in s["eplb"]["rebalances"]),
             f"- worst 1-s window on 63 ranks: step {w['step_ms'][worst]:.1f} ms vs {b['step_ms'][worst]:.1f} ms "
             f"without the failure (t = {w['t_s'][worst]:.1f} s); TTFT {np.nanmax(w['ttft_ms']):.0f} ms "
             f"at worst (arrivals waiting out the detection) vs "
             f"{np.nanmean(np.where(after, b['ttft_ms'], np.nan)):.0f} ms",
             f"- mean step 5-15 s {np.nanmean(w['step_ms'][(w['t_s'] > 5) & (w['t_s'] < 15)]):.2f} ms, "
             f"{detected_s + 1:.0f}-35 s {np.nanmean(w['step_ms'][after]):.2f} ms, "
             f"36-50 s {np.nanmean(w['step_ms'][w['t_s'] > 36]):.2f} ms (without: "
             f"{np.nanmean(np.where(after, b['step_ms'], np.nan)):.2f} ms at {detected_s + 1:.0f}-35 s)"]
    # without elastic EP: nothing serves the lost rank's experts until it is back and reloaded
    paused = simulate(load_scenario(SCENARIOS / "elastic_ep64_failure.yaml",
                                    {**overrides, "deployment.elastic_recovery": "reload"}),
                      profile=datasheet())
    p = latency_windows(paused, 1.0)
    event = paused.elastic_events[0]
    lines.append(f"- `elastic_recovery: reload` instead: serving pauses {event['stall_us'] * 1e-6:.2f} s "
                 f"({event['reload_bytes'] / 1e9:.1f} GB reloaded once the rank is back), TTFT peaks at "
                 f"{np.nanmax(p['ttft_ms']) / 1e3:.1f} s, {event['lost_requests']} requests lost")
    if write:
        failure_latency(with_failure, IMG / "elastic_ep64_failure_latency.png", 1.0, baseline=without)
    return lines


def speed(repeats: int = 3) -> list[str]:
    from epsim.sim import simulate
    from epsim.spec import load_scenario
    r1 = SCENARIOS / "r1_qwen235b_ep64_decode.yaml"
    lines = [f"## Speed (R1: Qwen3-235B-A22B decode, EP 64, 60 simulated s; fastest of {repeats}, one thread)", "",
             "| EPLB | rebalances | steps | wall s | sim s / wall s |", "|---|---:|---:|---:|---:|"]
    cases = [("off", []),
             ("on, every 100 passes, static dispatch", ["deployment.enable_eplb=true",
                                                        "deployment.ep_num_redundant_experts=64",
                                                        "deployment.eplb_rebalance_num_iterations=100",
                                                        "deployment.expert_distribution_recorder_buffer_size=100"]),
             ("on, every 100 passes, random dispatch", ["deployment.enable_eplb=true",
                                                        "deployment.ep_num_redundant_experts=64",
                                                        "deployment.eplb_rebalance_num_iterations=100",
                                                        "deployment.expert_distribution_recorder_buffer_size=100",
                                                        "deployment.ep_dispatch_algorithm=random"])]
    for name, sets in cases:
        scenario = load_scenario(r1, sets)
        best, res = None, None
        for _ in range(repeats):
            start = time.perf_counter()
            res = simulate(scenario, profile=datasheet())
            wall = time.perf_counter() - start
            best = wall if best is None else min(best, wall)
        lines.append(f"| {name} | {len(res.rebalances)} | {res.steps['step_us'].size} | {best:.2f} | "
                     f"{res.duration_s / best:.0f} |")
        print(lines[-1], file=sys.stderr)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["sweep", "redundancy", "elastic", "speed"])
    parser.add_argument("--write", action="store_true", help=f"record {RESULTS} and the figures")
    parser.add_argument("--workers", type=int, default=2, help="processes for the interval sweep")
    parser.add_argument("--intervals", default=",".join(map(str, INTERVALS)),
                        help="sweep: comma list of rebalance intervals (forward passes)")
    parser.add_argument("--repeats", type=int, default=3, help="speed: timings per case (fastest kept)")
    args = parser.parse_args(argv)
    try:
        intervals = [int(n) for n in args.intervals.split(",")]
    except ValueError:
        parser.error(f"--intervals ({args.intervals!r}) must be a comma list of integers")
    if args.repeats < 1:
        parser.error(f"--repeats ({args.repeats}) must be >= 1")
    if args.write and (intervals != INTERVALS or args.repeats != 3):
        parser.error("--write records the full run: drop --intervals and --repeats")
    parts = {"sweep": lambda: sweep(args.write, args.workers, intervals),
             "redundancy": lambda: redundancy(args.write), "elastic": lambda: elastic(args.write),
             "speed": lambda: speed(args.repeats)}
    report = []
    for name, run in parts.items():
        if args.only in (None, name):
            start = time.perf_counter()
            report += run() + ["", f"({name}: {time.perf_counter() - start:.0f} s wall)", ""]
            print("\n".join(report[-3:]), file=sys.stderr)
    text = "\n".join(report)
    print(text)
    if args.write and args.only is None:
        RESULTS.write_text("# EPLB over time and elastic EP (benchmarks/eplb_over_time.py)\n\n"
                           "Recorded with `python benchmarks/eplb_over_time.py --write` on the 2-core "
                           "development machine (shared, so wall times vary +-30 %), datasheet H200 "
                           "costs.\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
