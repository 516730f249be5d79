"""Sweep speed: 640 configurations of the Qwen3-235B-A22B decode scenario with `epsim plan`, in
one run side by side: every point simulated with the reference engine, every point simulated
with the fast engine, and two tiers (`--screen`: every point screened, the candidates simulated
with the fast engine) on local processes and on a local Ray runtime, on all cores of this
machine; then all simulated and two tiers again with `--warm-start` (each simulation starts at
the screen's steady batch). The two-tier tables of both executors must be byte-identical (same seed, same points).

    python benchmarks/plan_sweep.py            # run every variant, print the numbers
    python benchmarks/plan_sweep.py --write    # also record benchmarks/results/plan_sweep.md
    python benchmarks/plan_sweep.py --quick --write   # 8 points: benchmarks/results/quick/

`--quick` sweeps `QUICK_SWEEPS` the same way (seconds); every number of its table but the wall
times, speeds and load averages regenerates, which tests/benchmarks/test_recorded_results.py
checks against benchmarks/results/quick/plan_sweep.md.

Each point simulates 6 s (statistics after 2 s) instead of the scenario's 30 s, which keeps the
whole sweep to a few minutes on 2 cores; the timings measure the sweep machinery and the
simulator, not the planning answer (scenarios/qwen235b_h200_decode.py gives that).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "qwen235b_h200_decode.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "plan_sweep.md"
QUICK_RESULTS = ROOT / "benchmarks" / "results" / "quick" / "plan_sweep.md"
SWEEPS = [
    "deployment.ep_size=8:128:x2",
    "workload.arrivals.rate_per_s=50:400:+50",
    "deployment.moe_a2a_backend=deepep,mooncake",
    "deployment.dispatch_dtype=bf16,fp8",
    "deployment.max_running_requests=64,128",
    "deployment.enable_two_batch_overlap=false,true",
]
QUICK_SWEEPS = [
    "deployment.ep_size=8,16",
    "workload.arrivals.rate_per_s=100,200",
    "deployment.moe_a2a_backend=deepep,mooncake",
]
OVERRIDES = ["workload.duration_s=6", "workload.warmup_s=2"]
CONSTRAINTS = ["tpot_ms.p99<=50", "ttft_ms.p99<=2000", "hbm_headroom_gib>=0"]
OBJECTIVES = ["min:num_gpus", "max:throughput_tokens_per_s_per_gpu"]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# variant -> (engine, executor, two tiers)
VARIANTS = {     # engine, executor, screen, warm start
    "reference engine, all simulated": ("reference", "local", False, False),
    "fast engine, all simulated": ("fast", "local", False, False),
    "two tiers (screen + fast engine), local": ("fast", "local", True, False),
    "two tiers (screen + fast engine), Ray": ("fast", "ray", True, False),
    "fast engine, all simulated, --warm-start": ("fast", "local", False, True),
    "two tiers (screen + fast engine), local, --warm-start": ("fast", "local", True, True),
}


def run(variant: str, out: Path, workers: int | None, progress: bool,
        sweeps: list[str] = SWEEPS) -> tuple[object, float, float]:
    """(result, wall seconds, 1-minute load average at the end: other work on the machine)."""
    from epsim.plan import run_plan
    from epsim.sim.stepper import ENGINE_VARIABLE
    engine, executor, screen, warm_start = VARIANTS[variant]
    os.environ[ENGINE_VARIABLE] = engine           # worker processes inherit it
    try:
        start = time.perf_counter()
        result = run_plan(SCENARIO, sweeps, constraints=CONSTRAINTS, objectives=OBJECTIVES,
                          overrides=OVERRIDES, executor=executor, workers=workers, out=out,
                          progress=progress, require_feasible=False, screen=screen,
                          warm_start=warm_start)
        return result, time.perf_counter() - start, os.getloadavg()[0]
    finally:
        del os.environ[ENGINE_VARIABLE]


def answers(result) -> list[str]:
    """Each workload point's answer by its swept values (point ids differ between engines)."""
    return [("none" if a.best is None else result.describe(a.best)) for a in result.answers]


def report(runs: dict, identical: bool, workers: int, sweeps: list[str] = SWEEPS,
           command: str = "python benchmarks/plan_sweep.py --write") -> str:
    import numpy as np
    import ray

    import epsim
    first = runs["fast engine, all simulated"][0]
    num_points = len(first.rows) + len(first.skipped)
    ref_wall = runs["reference engine, all simulated"][1]
    lines = [
        f"# `epsim plan` sweep speed: {num_points} configurations, reference and fast engine, "
        "two tiers, local processes and Ray",
        "",
        f"Recorded by `{command}` "
        f"(epsim {epsim.__version__}, commit {commit()}), every variant in one run, one after the "
        "other: the machine is shared by other agents, so the ratios between variants of this one "
        "run are what counts, not the absolute times.",
        "",
        f"- machine: {cpu_model()}, {workers} cores used ({os.cpu_count()} visible), "
        f"{platform.platform()}, Python {platform.python_version()}, numpy {np.__version__}, "
        f"ray {ray.__version__}",
        f"- scenario: `scenarios/qwen235b_h200_decode.yaml` with `--set {' --set '.join(OVERRIDES)}` "
        "(6 simulated seconds per point, statistics after 2 s)",
        "- sweep (Cartesian, "
        f"{num_points} points): " + "; ".join(f"`{s}`" for s in sweeps),
        f"- constraints {', '.join(f'`{c}`' for c in CONSTRAINTS)}; objectives "
        f"{', '.join(f'`{o}`' for o in OBJECTIVES)}",
        "",
        "| variant | points simulated | wall (s) | points/s (all points) | vs reference engine | "
        "load average at end |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant, (result, wall_s, load) in runs.items():
        lines.append(f"| {variant} | {result.num_computed} | {wall_s:.1f} | "
                     f"{len(result.rows) / wall_s:.2f} | {ref_wall / wall_s:.2f}x | {load:.1f} |")
    ref = answers(runs["reference engine, all simulated"][0])
    fast = answers(first)
    two = answers(runs["two tiers (screen + fast engine), local"][0])
    warm = answers(runs["fast engine, all simulated, --warm-start"][0])
    warm_two = answers(runs["two tiers (screen + fast engine), local, --warm-start"][0])
    lines += [
        "",
        "Wall time is the whole `run_plan` call: point validation, the screen, the runs, choosing, "
        "tables and plots; for Ray it includes starting and stopping the local runtime. The "
        f"1-minute load average shows how busy the {workers} cores were (above {workers}: other "
        "work shared them).",
        "",
        f"The sweep has {len(fast)} workload points (arrival rates), each with its own answer. "
        f"Fast engine vs reference engine: same answer for **{sum(a == b for a, b in zip(ref, fast))} "
        f"of {len(fast)}**; two tiers vs every point simulated (fast engine): same answer for "
        f"**{sum(a == b for a, b in zip(fast, two))} of {len(fast)}**.",
        "",
        "Six simulated seconds are enough for step times and TPOT but too few for a queue that grows "
        "slowly to push TTFT past its bound, so these answers are not the planning answer "
        "(`scenarios/qwen235b_h200_decode.py` simulates 30 s per point). The same shortness is "
        "where the two tiers part: a decode batch that the steady state fills past its limit (the "
        "screen: does not keep up, or TPOT above the bound) is still filling after 6 s, so the "
        "short simulation passes points the screen ranks out; with 30 s per point the two tiers "
        "give the all-simulated answer (benchmarks/results/screen_vs_sim.md).",
        "",
        "`--warm-start` starts every simulated point at the screen's steady batch, so the 6 s "
        "measure the steady state instead of the fill. Two tiers vs every point simulated, both "
        "with `--warm-start`: same answer for "
        f"**{sum(a == b for a, b in zip(warm, warm_two))} of {len(fast)}**; every point simulated, "
        "started empty vs with `--warm-start`: same answer for "
        f"{sum(a == b for a, b in zip(fast, warm))} of {len(fast)}.",
        "",
        "Answers per arrival rate (all simulated with the fast engine | two tiers | all simulated "
        "with `--warm-start` | two tiers with `--warm-start`):",
        "",
        *[f"- {a} | {b} | {c} | {d}" for a, b, c, d in zip(fast, two, warm, warm_two)],
        "",
        f"Two-tier tables of local processes and Ray identical (results.csv byte for byte): "
        f"**{'yes' if identical else 'NO'}**.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--workers", type=int, default=None, help="default: all cores")
    parser.add_argument("--out", default=None, help="keep the results directories here")
    parser.add_argument("--quick", action="store_true",
                        help=f"sweep QUICK_SWEEPS (8 points); --write records {QUICK_RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    sweeps, results = (QUICK_SWEEPS, QUICK_RESULTS) if args.quick else (SWEEPS, RESULTS)
    from epsim.plan.executors import default_workers
    workers = args.workers or default_workers()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="plan_sweep_"))
    runs = {}
    for i, variant in enumerate(VARIANTS):
        out = base / f"variant{i}"
        if (out / "points.jsonl").exists():
            raise SystemExit(f"{out} already holds results; the benchmark needs a fresh directory")
        result, wall_s, load = run(variant, out, workers, sys.stderr.isatty(), sweeps)
        runs[variant] = (result, wall_s, load)
        print(f"{variant}: {result.num_computed} points simulated in {wall_s:.1f} s", flush=True)
    tables = [(base / f"variant{i}" / "results.csv").read_bytes() for i in (2, 3)]
    identical = tables[0] == tables[1]
    command = "python benchmarks/plan_sweep.py" + (" --quick" if args.quick else "") + " --write"
    text = report(runs, identical, workers, sweeps, command)
    print(text)
    if args.write:
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(text)
        print(f"wrote {results}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
