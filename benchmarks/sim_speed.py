"""Simulator speed: R1 (Qwen3-235B-A22B decode, EP 64 on 8x8 H200) in simulated seconds per
wall second on one core, and wall time as EP size (8 -> 128) and layer count (24 -> 94) grow.

    python benchmarks/sim_speed.py                 # print the tables
    python benchmarks/sim_speed.py --write         # also record benchmarks/results/sim_speed.md

Everything runs in this one single-threaded process (one BLAS thread; `--pin` also pins it
to one CPU), so the numbers are ratios measured side by side. Each configuration runs `--repeats` times; the
fastest run counts (the least disturbed by other work on the machine).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"     # before numpy loads: one core means one BLAS thread too

import argparse  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
R1 = ROOT / "scenarios" / "r1_qwen235b_ep64_decode.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "sim_speed.md"


def one_core(pin: bool) -> str:
    """The process is single-threaded (one BLAS thread); optionally pin it to one CPU too."""
    if pin and hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"single-threaded, pinned to CPU {cpu}"
    return "single-threaded (one BLAS thread), not pinned"


def r1_variant(ep_size: int | None = None, num_layers: int | None = None, duration_s: float | None = None):
    """R1 with another EP size (nodes = EP / 8, same tokens per rank) or layer count."""
    import yaml

    from epsim.spec import scenario_from_dict
    from epsim.zoo import get_model
    data = yaml.safe_load(R1.read_text())
    if ep_size is not None:
        data["deployment"]["ep_size"] = ep_size
        data["cluster"]["num_nodes"] = max(1, ep_size // 8)
    if num_layers is not None:
        data["model"] = {**get_model(data["model"]).model_dump(), "num_layers": num_layers}
    if duration_s is not None:
        data["workload"]["duration_s"] = duration_s
        data["workload"]["warmup_s"] = min(data["workload"]["warmup_s"], duration_s / 4)
    return scenario_from_dict(data, where=str(R1), base_dir=R1.parent)


def time_run(scenario, repeats: int) -> dict:
    """Fastest of `repeats` runs: wall seconds, steps, simulated seconds per wall second."""
    from epsim.sim import simulate
    best = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = simulate(scenario)
        wall = time.perf_counter() - start
        if best is None or wall < best["wall_s"]:
            steps = int(result.steps["step_us"].shape[0])
            best = {"wall_s": wall, "steps": steps, "sim_s": result.duration_s,
                    "speed": result.duration_s / wall, "wall_us_per_step": wall / steps * 1e6,
                    "step_ms": float(result.steps["step_us"].mean() * 1e-3)}
    return best


def profile_r1(scenario, top: int = 15) -> str:
    """cProfile of one R1 run: the functions with the most own time."""
    import cProfile
    import io
    import pstats

    from epsim.sim import simulate
    prof = cProfile.Profile()
    prof.enable()
    simulate(scenario)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def machine() -> str:
    try:
        cpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = "\n".join(cpu.splitlines()[:10])
    except (OSError, subprocess.CalledProcessError):
        cpu = platform.processor() or "unknown CPU"
    import simpy
    return (f"{cpu}\n\npython {platform.python_version()}, numpy {np.__version__}, "
            f"simpy {simpy.__version__}, {platform.platform()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweep-seconds", type=float, default=20.0,
                        help="simulated seconds per EP / layer sweep point")
    parser.add_argument("--write", action="store_true", help=f"record results in {RESULTS}")
    parser.add_argument("--profile", action="store_true", help="append a cProfile of R1")
    parser.add_argument("--pin", action="store_true",
                        help="pin to one CPU (on a shared machine the OS may do better unpinned)")
    args = parser.parse_args(argv)
    pinned = one_core(args.pin)

    r1 = time_run(r1_variant(), args.repeats)
    lines = [f"## R1: {R1.name}", "",
             f"{r1['sim_s']:g} simulated s in {r1['wall_s']:.3f} wall s -> "
             f"**{r1['speed']:.0f}x real time** ({r1['steps']} steps of {r1['step_ms']:.1f} ms mean, "
             f"{r1['wall_us_per_step']:.0f} us wall per step; fastest of {args.repeats})", ""]

    base = None
    lines += ["## EP size (R1, tokens per rank fixed, nodes = EP / 8)", "",
              "| EP | steps | wall s | wall us/step | vs EP 8 per step | EP ratio | sim s / wall s |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for ep in (8, 16, 32, 64, 128):
        row = time_run(r1_variant(ep_size=ep, duration_s=args.sweep_seconds), args.repeats)
        base = base or row
        lines.append(f"| {ep} | {row['steps']} | {row['wall_s']:.3f} | {row['wall_us_per_step']:.0f} | "
                     f"{row['wall_us_per_step'] / base['wall_us_per_step']:.2f} | {ep / 8:g} | "
                     f"{row['speed']:.0f} |")
        print(lines[-1], file=sys.stderr)
    base = None
    lines += ["", "## Layers (R1 at EP 64)", "",
              "| layers | steps | wall s | wall us/step | vs 24 layers per step | sim s / wall s |",
              "|---:|---:|---:|---:|---:|---:|"]
    for layers in (24, 48, 94):
        row = time_run(r1_variant(num_layers=layers, duration_s=args.sweep_seconds), args.repeats)
        base = base or row
        lines.append(f"| {layers} | {row['steps']} | {row['wall_s']:.3f} | {row['wall_us_per_step']:.0f} | "
                     f"{row['wall_us_per_step'] / base['wall_us_per_step']:.2f} | {row['speed']:.0f} |")
        print(lines[-1], file=sys.stderr)
    report = "\n".join(lines)
    if args.profile:
        report += "\n\n## cProfile of R1 (own time)\n\n```\n" + profile_r1(r1_variant()) + "```"
    print(report)
    if args.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            "# Simulator speed (benchmarks/sim_speed.py)\n\n"
            f"Recorded with `python benchmarks/sim_speed.py {' '.join(sys.argv[1:])}` ({pinned}; "
            f"fastest of {args.repeats} runs per configuration: the machine is shared, so expect "
            "+-20 % between recordings).\n\n"
            "Steps take different simulated time at each EP size and layer count (more nodes, more "
            "layers), so growth is judged per step: wall time per step should grow no faster than "
            "EP size. It stays nearly flat: the per-step work is dominated by sampling the "
            "`[layers, experts]` loads, which does not depend on EP size.\n\n"
            + report + "\n\n## Machine\n\n```\n" + machine() + "\n```\n")
        print(f"\nwrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
