"""A change's speed, this checkout's fast engine against another's (`benchmarks/sim_speed.py
--against CHECKOUT`): CPU time per step in two worker processes that take turns run by run, so
both see the machine in the same state; and (`--instructions`) the machine instructions of one
warm run in each under valgrind's callgrind, a count that does not move with the machine's load,
for changes smaller than the timings' noise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sim_speed_common import EPLB_SCENARIOS, R1, ROOT, scenario_file

AGAINST_ROUNDS = 10     # runs per checkout and scenario for `--against`
# counted under callgrind (`--instructions`): ~50x slower than native, so R1 and two EPLB runs
INSTRUCTION_SCENARIOS = ("r1_qwen235b_ep64_decode", "eplb_redundancy_32gpu", "elastic_ep64_failure")


# a worker that times the fast engine of the checkout on sys.path[0] (`--against`), one run per
# scenario path read from stdin, answering "CPU seconds, steps, simulated seconds"; one
# long-lived process per checkout, each importing its own epsim once
_CHECKOUT_WORKER = """
import gc, sys, time, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
from epsim.spec import load_scenario
from epsim.sim import simulate
for line in sys.stdin:
    scenario = load_scenario(line.strip())
    result = None                  # the last run's objects go before the clock starts
    gc.collect()
    cpu = time.process_time()
    result = simulate(scenario, engine="fast")
    cpu = time.process_time() - cpu
    print(cpu, result.steps["step_us"].shape[0], result.duration_s, flush=True)
"""


def against_rows(checkouts: dict[str, Path], scenarios: list[Path], rounds: int) -> list[str]:
    """The fast engine of each checkout on each scenario, by CPU time: one worker process per
    checkout, the two taking turns run by run (`rounds` runs each, the fastest counts), so
    both see the machine in the same state."""
    workers = {name: subprocess.Popen([sys.executable, "-c", _CHECKOUT_WORKER, str(tree)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                      cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
               for name, tree in checkouts.items()}
    rows = []
    try:
        for path in scenarios:
            best: dict[str, tuple[float, int, float]] = {}
            for _ in range(rounds):
                for name, worker in workers.items():
                    worker.stdin.write(f"{path}\n")
                    worker.stdin.flush()
                    cpu, steps, sim_s = worker.stdout.readline().split()
                    if name not in best or float(cpu) < best[name][0]:
                        best[name] = (float(cpu), int(steps), float(sim_s))
            (old_cpu, steps, sim_s), (new_cpu, _, _) = best["then"], best["now"]
            rows.append(f"| `{path.stem}` | {steps} | {old_cpu / steps * 1e6:.0f} | "
                        f"{new_cpu / steps * 1e6:.0f} | {sim_s / old_cpu:.0f} | "
                        f"**{sim_s / new_cpu:.0f}** | {old_cpu / new_cpu:.2f} |")
            print(rows[-1], file=sys.stderr)
    finally:
        for worker in workers.values():
            worker.stdin.close()
            worker.wait()
    return rows


# runs one scenario's fast engine `runs` times in the checkout on sys.path[0] (`--instructions`)
_COUNT_WORKER = """
import sys, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
from epsim.spec import load_scenario
from epsim.sim import simulate
scenario = load_scenario(sys.argv[2])
for _ in range(int(sys.argv[3])):
    result = simulate(scenario, engine="fast")
print(result.steps["step_us"].shape[0])
"""


def count_instructions(tree: Path, scenario: Path, runs: int) -> subprocess.Popen:
    """callgrind counting every instruction of `runs` fast-engine runs of `scenario` in
    checkout `tree` (imports included), started: `collected` reads its count."""
    return subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                             sys.executable, "-c", _COUNT_WORKER, str(tree), str(scenario),
                             str(runs)], cwd=tree, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            # one hash seed: the same dict and set orders, so the same count
                            env={**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"})


def collected(proc: subprocess.Popen) -> tuple[int, int]:
    """(instructions, steps of one run) of a finished `count_instructions`."""
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"valgrind failed ({proc.returncode}): {err[-500:]}")
    total = next(line for line in err.splitlines() if "Collected :" in line)
    return int(total.split(":")[-1].strip()), int(out.split()[-1])


def instruction_rows(checkouts: dict[str, Path], scenarios: list[Path]) -> list[str]:
    """Instructions of one warm fast-engine run (two runs less one: the imports and the first
    run's one-time work drop out) of each scenario in each checkout, the four processes of a
    scenario two at a time (a count does not depend on what else runs)."""
    rows = []
    for path in scenarios:
        counts = {}
        for name, tree in checkouts.items():
            procs = [count_instructions(tree, path, runs) for runs in (1, 2)]
            (one, steps), (two, _) = (collected(proc) for proc in procs)
            counts[name] = (two - one, steps)
        (then, steps), (now, _) = counts["then"], counts["now"]
        rows.append(f"| `{path.stem}` | {steps} | {then / steps / 1e3:.0f} | {now / steps / 1e3:.0f} "
                    f"| **{then / now:.2f}** |")
        print(rows[-1], file=sys.stderr)
    return rows


def checkout_sections(against: Path, instructions: bool) -> list[str]:
    """The report's sections on this checkout against `against`'s: CPU time per step and, with
    `instructions`, instructions per step."""
    then = subprocess.run(["git", "-C", str(against), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    checkouts = {"then": against.resolve(), "now": ROOT}
    lines = ["", f"## Against the fast engine of commit {then}", "",
             f"The same scenarios in two checkouts, this one and `{then}`'s, one worker "
             f"process each, taking turns run by run ({AGAINST_ROUNDS} runs each, the "
             "fastest counts), by CPU time: what the code changed, with the machine in the "
             "same state for both.", "",
             "| scenario | steps | then CPU us/step | now CPU us/step | then sim s / CPU s | "
             "now sim s / CPU s | now / then speed |", "|---|---:|---:|---:|---:|---:|---:|"]
    lines += against_rows(checkouts, [R1] + [scenario_file(name) for name in EPLB_SCENARIOS],
                          AGAINST_ROUNDS)
    if instructions:
        lines += ["", f"## Instructions, against commit {then}", "",
                  "Machine instructions of one warm fast-engine run in each checkout "
                  "(valgrind's callgrind, two runs less one: imports and first-run work drop out): "
                  "the same to a fraction of a percent on a busy machine as on an idle one "
                  "(addresses and collection moments still vary a little), so a change's effect "
                  "shows where the timings above are within their noise. Fewer instructions need not "
                  "mean proportionally less time (memory stalls count for nothing here).", "",
                  "| scenario | steps | then k instructions/step | now k instructions/step | "
                  "then / now |", "|---|---:|---:|---:|---:|"]
        lines += instruction_rows(checkouts, [scenario_file(name) for name in INSTRUCTION_SCENARIOS])
    return lines
