"""Sweep speed: 640 configurations of the Qwen3-235B-A22B decode scenario with `epsim plan`,
once with local processes and once on a local Ray runtime, on all cores of this machine; the
two results tables must be byte-identical (same seed, same points).

    python benchmarks/plan_sweep.py            # run both executors, print the numbers
    python benchmarks/plan_sweep.py --write    # also record benchmarks/results/plan_sweep.md

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
SWEEPS = [
    "deployment.ep_size=8:128:x2",
    "workload.arrivals.rate_per_s=50:400:+50",
    "deployment.moe_a2a_backend=deepep,mooncake",
    "deployment.dispatch_dtype=bf16,fp8",
    "deployment.max_running_requests=64,128",
    "deployment.enable_two_batch_overlap=false,true",
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


def run(executor: str, out: Path, workers: int | None, progress: bool) -> tuple[object, float, float]:
    """(result, wall seconds, 1-minute load average at the end: other work on the machine)."""
    from epsim.plan import run_plan
    start = time.perf_counter()
    result = run_plan(SCENARIO, SWEEPS, constraints=CONSTRAINTS, objectives=OBJECTIVES,
                      overrides=OVERRIDES, executor=executor, workers=workers, out=out,
                      progress=progress, require_feasible=False)
    return result, time.perf_counter() - start, os.getloadavg()[0]


def report(runs: dict, identical: bool, workers: int) -> str:
    import numpy as np
    import ray

    import epsim
    first = next(iter(runs.values()))[0]
    best = first.best_row
    num_points = len(first.rows) + len(first.skipped)
    lines = [
        "# `epsim plan` sweep speed: 640 configurations, local processes vs Ray",
        "",
        "Recorded by `python benchmarks/plan_sweep.py --write` "
        f"(epsim {epsim.__version__}, commit {commit()}).",
        "",
        f"- machine: {cpu_model()}, {workers} cores used ({os.cpu_count()} visible), "
        f"{platform.platform()}, Python {platform.python_version()}, numpy {np.__version__}, "
        f"ray {ray.__version__}",
        f"- scenario: `scenarios/qwen235b_h200_decode.yaml` with `--set {' --set '.join(OVERRIDES)}` "
        "(6 simulated seconds per point, statistics after 2 s)",
        "- sweep (Cartesian, "
        f"{num_points} points): " + "; ".join(f"`{s}`" for s in SWEEPS),
        f"- constraints {', '.join(f'`{c}`' for c in CONSTRAINTS)}; objectives "
        f"{', '.join(f'`{o}`' for o in OBJECTIVES)}",
        "",
        "| executor | points computed | wall (s) | points/s | simulated s per wall s | load average at end |",
        "|---|---|---|---|---|---|",
    ]
    for executor, (result, wall_s, load) in runs.items():
        lines.append(f"| {executor} | {result.num_computed} | {wall_s:.1f} | {result.num_computed / wall_s:.2f} "
                     f"| {result.num_computed * 6.0 / wall_s:.1f} | {load:.1f} |")
    lines += [
        "",
        "Wall time is the whole `run_plan` call: point validation, the runs, choosing, tables and plots; "
        "for Ray it includes starting and stopping the local runtime. The 1-minute load average shows "
        f"how busy the {workers} cores were (above {workers}: other work shared them). Ray's own "
        "processes (GCS, raylet, workers' start-up) share the same cores, so on one small machine "
        "it trails the process pool; it is there for sweeps that outgrow one machine.",
        "",
        "Six simulated seconds are enough for step times and TPOT but too few for a queue that grows "
        "slowly to push TTFT past its bound, so this table's best point is not the planning answer "
        "(`scenarios/qwen235b_h200_decode.py` simulates 30 s per point).",
        "",
        f"Tables identical (results.csv byte for byte): **{'yes' if identical else 'NO'}**.",
        "",
        f"Feasible points: {sum(1 for r in first.rows if r['feasible'])} of {len(first.rows)}; best: "
        + (f"`{first.describe(first.best)}` (TPOT p99 {best['tpot_ms.p99']:.1f} ms, "
           f"{best['throughput_tokens_per_s_per_gpu']:.0f} tokens/s/GPU)" if best else "none")
        + f"; {len(first.frontier)} points on the Pareto frontier.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--executors", default="local,ray")
    parser.add_argument("--workers", type=int, default=None, help="default: all cores")
    parser.add_argument("--out", default=None, help="keep the results directories here")
    args = parser.parse_args()
    from epsim.plan.executors import default_workers
    workers = args.workers or default_workers()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="plan_sweep_"))
    runs = {}
    for executor in args.executors.split(","):
        out = base / executor
        if (out / "points.jsonl").exists():
            raise SystemExit(f"{out} already holds results; the benchmark needs a fresh directory")
        result, wall_s, load = run(executor, out, workers, sys.stderr.isatty())
        runs[executor] = (result, wall_s, load)
        print(f"{executor}: {result.num_computed} points in {wall_s:.1f} s", flush=True)
    tables = [(base / e / "results.csv").read_bytes() for e in runs]
    identical = all(t == tables[0] for t in tables)
    text = report(runs, identical, workers)
    print(text)
    if args.write:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
