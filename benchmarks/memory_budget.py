"""The run-memory budget (`epsim.budget`) against measured peak resident memory: each row
simulates and summarises one scenario (as a plan worker's point does) in a fresh process, and
records the budget's estimate beside the process's peak RSS growth over the run (VmHWM after,
less VmRSS before: the interpreter, imports and a warm-up run are `base`).

The budget must be an upper bound of the growth on every row (`ratio` = growth / estimate
<= 1; the test holds the recorded table to it), and a plan worker is charged `base` plus the
estimate when workers are capped by memory (`epsim.plan.executors.memory_workers`). Sizes
are chosen so that the estimated term of each row (requests, slots, steps, EPLB) dominates.

    python benchmarks/memory_budget.py --write        # record benchmarks/results/memory_budget.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from plan_sweep import cpu_model          # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "memory_budget.md"
ADDRESS_SPACE_BYTES = 16 * 2**30      # each row's hard limit (a wrong estimate fails, not the host)

# (row, scenario file, overrides): what dominates its estimate, at a size far above the base
ROWS = [
    ("requests: prefill overload, 2M", "qwen30b_ep_backend",
     {"workload.arrivals.rate_per_s": 100_000, "workload.duration_s": 20}),
    ("requests: decode overload, 1M", "default",
     {"workload.arrivals.rate_per_s": 50_000, "workload.duration_s": 20,
      "workload.initial_running_per_rank": 0}),
    ("requests: bursty cv 3, 1M", "default",
     {"workload.arrivals": {"kind": "bursty", "rate_per_s": 50_000, "cv": 3.0},
      "workload.duration_s": 20, "workload.initial_running_per_rank": 0}),
    ("requests: EPLB on, 1M", "eplb_interval_drift",
     {"workload.arrivals.rate_per_s": 50_000, "workload.duration_s": 20}),
    ("requests: a failure, 200k", "elastic_ep64_failure",
     {"workload.arrivals.rate_per_s": 20_000, "workload.duration_s": 10}),
    ("slots: 8 x 200k running", "default",
     {"deployment.max_running_requests": 200_000, "workload.arrivals.rate_per_s": 60,
      "workload.initial_running_per_rank": 0, "workload.duration_s": 10}),
    ("steps: a long steady run", "default", {"workload.duration_s": 200}),
    ("EPLB: 2048 slots over 2 ranks", "eplb_interval_drift",
     {"deployment.ep_size": 2, "deployment.ep_num_redundant_experts": 1920,
      "deployment.eplb_rebalance_num_iterations": 5,
      "deployment.expert_distribution_recorder_buffer_size": 5, "workload.duration_s": 4,
      "workload.warmup_s": 1}),
]

CHILD = r"""
import json, sys, time
from pathlib import Path
def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
import warnings
warnings.simplefilter("ignore")
from epsim.budget import run_cost
from epsim.report import summarize
from epsim.sim import simulate
from epsim.spec import load_scenario
path, overrides = sys.argv[1], json.loads(sys.argv[2])
scenario = load_scenario(path, overrides)
cost = run_cost(scenario)
summarize(simulate(load_scenario(path, {"workload.duration_s": 0.5, "workload.warmup_s": 0})))
base = status("VmRSS")
Path("/proc/self/clear_refs").write_text("5")            # VmHWM from here
start = time.perf_counter()
result = simulate(scenario)
summarize(result)
print(json.dumps({"estimate": cost.bytes, "requests": cost.num_requests, "slots": cost.num_slots,
                  "max_steps": cost.max_steps, "eplb_bytes": cost.eplb_bytes,
                  "steps": int(result.steps["step_us"].shape[0]),
                  "arrived": int((~result.is_initial).sum()), "base": base,
                  "peak": status("VmHWM"), "wall_s": time.perf_counter() - start}))
"""


def _limit() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def measure(scenario: str, overrides: dict) -> dict:
    path = ROOT / "scenarios" / f"{scenario}.yaml"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(overrides)],
                          capture_output=True, text=True, cwd=ROOT, preexec_fn=_limit,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode:
        raise RuntimeError(f"{scenario} {overrides}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[tuple[str, dict]]) -> str:
    mib = 2.0**20
    lines = ["| row | requests | steps (bound) | estimate MiB | base MiB | peak MiB | growth MiB "
             "| growth / estimate |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in rows:
        growth = m["peak"] - m["base"]
        lines.append(f"| {name} | {m['arrived']:,} | {m['steps']:,} ({m['max_steps']:.3g}) | "
                     f"{m['estimate'] / mib:.0f} | {m['base'] / mib:.0f} | {m['peak'] / mib:.0f} | "
                     f"{growth / mib:.0f} | {growth / m['estimate']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    from epsim import budget
    from epsim.plan.executors import WORKER_BASE_BYTES
    measured = []
    for name, scenario, overrides in ROWS:
        measured.append((name, measure(scenario, overrides)))
        print(name, json.dumps(measured[-1][1]), flush=True)
    worst = max((m["peak"] - m["base"]) / m["estimate"] for _, m in measured)
    base = max(m["base"] for _, m in measured)
    text = "\n".join([
        "# Run memory: the budget's estimate against peak resident memory",
        "",
        "Regenerate: `python benchmarks/memory_budget.py --write` (see its docstring). Machine: "
        f"{cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.platform()}.",
        "",
        f"Budget constants: {budget.BYTES_PER_REQUEST} B per request, {budget.BYTES_PER_SLOT} B "
        f"per slot, {budget.BYTES_PER_STEP} B per step (bound), EPLB "
        f"{budget.EPLB_BYTES_PER_SLOT} B per layer-slot + {budget.EPLB_BYTES_PER_MOVE_CELL} B per "
        f"move cell; a worker is charged {WORKER_BASE_BYTES / 2**20:.0f} MiB besides.",
        "",
        table(measured),
        "",
        f"Largest growth / estimate: {worst:.2f} (must be <= 1: the estimate bounds the growth); "
        f"largest base {base / 2**20:.0f} MiB (<= the {WORKER_BASE_BYTES / 2**20:.0f} MiB "
        f"a worker is charged).",
        ""])
    print(text)
    if args.write:
        from epsim.io.write import write_text
        write_text(RESULTS, text)
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0 if worst <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
