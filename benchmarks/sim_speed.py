"""Simulator speed, fast engine against the reference engine side by side: R1 (Qwen3-235B-A22B
decode, EP 64 on 8x8 H200) and the scenarios with EPLB on, in simulated seconds per wall second
on one core, and wall time as EP size (8 -> 128) and layer count (24 -> 94) grow.

    python benchmarks/sim_speed.py                 # print the tables
    python benchmarks/sim_speed.py --write         # also record benchmarks/results/sim_speed.md
    git worktree add /tmp/then <commit>
    python benchmarks/sim_speed.py --against /tmp/then   # also: this fast engine against that one
    python benchmarks/sim_speed.py --speculation   # only: how far ahead unsaturated batches are known

Everything runs in this one single-threaded process (one BLAS thread; `--pin` also pins it
to one CPU), so the numbers are ratios measured side by side. The parts, by what they measure:

  sim_speed_runs.py         whole runs against the reference engine, the speed targets and the
                            EP / layer sweeps (`--repeats` runs per engine, the fastest counts);
                            `--profile`: the cProfile of R1
  sim_speed_checkouts.py    `--against`: this checkout's fast engine against another's, by CPU
                            time; `--instructions`: by instructions under valgrind's callgrind
  sim_speed_stages.py       where a step of `elastic_ep64_failure`, the scenario that misses its
                            target, spends its time: stage by stage and its MoE draws in blocks
  sim_speed_speculation.py  `--speculation`: how far ahead an unsaturated run's batches are known
  sim_speed_common.py       where things are, the targets, the machine
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"     # before numpy loads: one core means one BLAS thread too

import argparse  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from sim_speed_checkouts import checkout_sections  # noqa: E402
from sim_speed_common import RESULTS, ROOT, machine, one_core, scenario_file  # noqa: E402
from sim_speed_runs import profile_sections, speed_sections  # noqa: E402
from sim_speed_speculation import speculation_line  # noqa: E402
from sim_speed_stages import unsaturated_sections  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweep-seconds", type=float, default=20.0,
                        help="simulated seconds per EP / layer sweep point")
    parser.add_argument("--write", action="store_true", help=f"record results in {RESULTS}")
    parser.add_argument("--profile", action="store_true", help="append a cProfile of R1")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT",
                        help="also time this checkout's fast engine against another's (e.g. "
                             "`git worktree add /tmp/then <commit>`), side by side")
    parser.add_argument("--instructions", action="store_true",
                        help="with --against: also count both checkouts' instructions per run "
                             "under valgrind (minutes; independent of the machine's load)")
    parser.add_argument("--speculation", metavar="SCENARIO", nargs="?",
                        const="elastic_ep64_failure",
                        help="only print how many steps ahead an unsaturated run's batches are "
                             "known (a bound for leaping them; default elastic_ep64_failure)")
    parser.add_argument("--pin", action="store_true",
                        help="pin to one CPU (on a shared machine the OS may do better unpinned)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats ({args.repeats}) must be >= 1")
    if args.against is not None and not (args.against / "epsim" / "sim" / "engine.py").is_file():
        parser.error(f"--against ({args.against}) must be an epsim checkout (e.g. `git worktree "
                     "add /tmp/then <commit>`)")
    if args.instructions and (args.against is None or shutil.which("valgrind") is None):
        missing = "no --against" if args.against is None else "no valgrind on PATH"
        parser.error(f"--instructions ({missing}) needs --against CHECKOUT and valgrind on PATH")
    if args.speculation is not None:
        if not scenario_file(args.speculation).is_file():
            parser.error(f"--speculation ({args.speculation}) must name a scenario in "
                         f"{ROOT / 'scenarios'} (without .yaml)")
        print(speculation_line(args.speculation))
        return 0
    pinned = one_core(args.pin)
    lines, eplb_rows = speed_sections(args.repeats, args.sweep_seconds)
    if args.against is not None:
        lines += checkout_sections(args.against, args.instructions)
    lines += unsaturated_sections(args.repeats,
                                  eplb_rows["elastic_ep64_failure"]["fast"]["step_ms"])
    report = "\n".join(lines)
    if args.profile:
        report += profile_sections()
    print(report)
    if args.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        text = ("# Simulator speed (benchmarks/sim_speed.py)\n\n"
                f"Recorded with `python benchmarks/sim_speed.py {' '.join(sys.argv[1:])}` ({pinned}; "
                f"fastest of {args.repeats} runs per configuration, each timed from a clean heap (the last "
                "run's objects freed before the clock starts): the machine is shared, so expect "
                "+-20 % between recordings).\n\n"
                "The fast engine (`epsim.sim.stepper` and `epsim.sim.leap`, docs/model.md) against "
                "the reference engine, side by side in one process. Steps take different simulated time at "
                "each EP size and layer count, so growth is judged per step.\n\n"
                + report + "\n\n## Machine\n\n```\n" + machine() + "\n```\n")
        tmp = RESULTS.with_suffix(".md.tmp")
        tmp.write_text(text)
        tmp.replace(RESULTS)                    # a recording is never left half-written
        print(f"\nwrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
