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
import tempfile
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


# runs one scenario's fast engine twice in the checkout on sys.path[0] (`--instructions`): the
# first run and the imports uncounted, then, once the parent has switched callgrind's counting
# on (the file at argv[3] appears), the second run. It polls rather than blocking in a read, since
# callgrind takes `callgrind_control`'s commands only while the program runs.
_COUNT_WORKER = """
import os, sys, time, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("ignore")
from epsim.spec import load_scenario
from epsim.sim import simulate
scenario = load_scenario(sys.argv[2])
simulate(scenario, engine="fast")
print("ready", flush=True)
while not os.path.exists(sys.argv[3]):
    time.sleep(0.01)
result = simulate(scenario, engine="fast")
print(result.steps["step_us"].shape[0], flush=True)
while os.path.exists(sys.argv[3]):
    time.sleep(0.01)
"""


def count_instructions(tree: Path, scenario: Path) -> tuple[int, int]:
    """(instructions, steps) of one warm fast-engine run of `scenario` in checkout `tree`, under
    callgrind with counting switched on for that run only. Counting whole processes and taking
    one run from two (the earlier way) left the imports' own variation in the difference:
    3.5M of a process's 2.95G instructions from one process to the next (pydantic-core hashes
    with a random state, which PYTHONHASHSEED does not fix), 4 % of a short run's 82M."""
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                 "--callgrind-out-file=/dev/null", sys.executable, "-c", _COUNT_WORKER,
                                 str(tree), str(scenario), str(go)], cwd=tree, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"})
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"valgrind failed ({proc.wait()}): {proc.stderr.read()[-500:]}")
            _callgrind(proc.pid, "on")
            go.touch()
            steps = int(proc.stdout.readline())
            _callgrind(proc.pid, "off")
            go.unlink()
            err = proc.stderr.read()
        except BaseException:
            proc.kill()                               # never leave a worker polling forever
            raise
        if proc.wait():
            raise RuntimeError(f"valgrind failed ({proc.returncode}): {err[-500:]}")
    total = next(line for line in err.splitlines() if "Collected :" in line)
    return int(total.split(":")[-1].strip()), steps


def _callgrind(pid: int, state: str) -> None:
    """Switch callgrind's counting in process `pid` on or off (it answers once it has)."""
    subprocess.run(["callgrind_control", "--instr=" + state, str(pid)], check=True,
                   capture_output=True, timeout=120)


def instruction_rows(checkouts: dict[str, Path], scenarios: list[Path]) -> list[str]:
    """Instructions of one warm fast-engine run of each scenario in each checkout (the count
    does not depend on what else runs on the machine)."""
    rows = []
    for path in scenarios:
        counts = {name: count_instructions(tree, path) for name, tree in checkouts.items()}
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
                  "(valgrind's callgrind, counting switched on for the second run only: imports and "
                  "first-run work drop out): "
                  "the same to a fraction of a percent on a busy machine as on an idle one "
                  "(addresses and collection moments still vary a little), so a change's effect "
                  "shows where the timings above are within their noise. Fewer instructions need not "
                  "mean proportionally less time (memory stalls count for nothing here).", "",
                  "| scenario | steps | then k instructions/step | now k instructions/step | "
                  "then / now |", "|---|---:|---:|---:|---:|"]
        lines += instruction_rows(checkouts, [scenario_file(name) for name in INSTRUCTION_SCENARIOS])
    return lines
