"""Simulator speed, fast engine against the reference engine side by side: R1 (Qwen3-235B-A22B
decode, EP 64 on 8x8 H200) and the scenarios with EPLB on, in simulated seconds per wall second
on one core, and wall time as EP size (8 -> 128) and layer count (24 -> 94) grow.

    python benchmarks/sim_speed.py                 # print the tables
    python benchmarks/sim_speed.py --write         # also record benchmarks/results/sim_speed.md
    git worktree add /tmp/then <commit>
    python benchmarks/sim_speed.py --against /tmp/then   # also: this fast engine against that one
    python benchmarks/sim_speed.py --speculation   # only: how far ahead unsaturated batches are known

Everything runs in this one single-threaded process (one BLAS thread; `--pin` also pins it
to one CPU), so the numbers are ratios measured side by side. Each configuration runs
`--repeats` times per engine, the engines alternating; the fastest run counts (the least
disturbed by other work on the machine). Every run is timed from a clean heap: the last run's
objects are released and collected before the clock starts (freeing a run's results had
fallen inside the next run's time). `--against` runs both checkouts' fast engines in
two worker processes taking turns run by run, so a change's speed-up is measured with the
machine in the same state for both. `--instructions` (with `--against`) also counts the
machine instructions of one warm fast-engine run in each checkout under valgrind's callgrind:
a count that does not move with the machine's load, for changes smaller than its noise. The
scenario that misses its target, `elastic_ep64_failure`, is also timed stage by stage (`STAGES`).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"     # before numpy loads: one core means one BLAS thread too

import argparse  # noqa: E402
import gc  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def scenario_file(name: str) -> Path:
    """scenarios/NAME.yaml."""
    return ROOT / "scenarios" / f"{name}.yaml"


R1 = scenario_file("r1_qwen235b_ep64_decode")
RESULTS = ROOT / "benchmarks" / "results" / "sim_speed.md"
ENGINES = ("reference", "fast")
EPLB_SCENARIOS = ("eplb_redundancy_32gpu", "eplb_interval_drift", "redundant_experts",
                  "deepseek_v3_decode", "deepseek_v3_prefill", "elastic_ep64_failure")
# counted under callgrind (`--instructions`): ~50x slower than native, so R1 and two EPLB runs
INSTRUCTION_SCENARIOS = ("r1_qwen235b_ep64_decode", "eplb_redundancy_32gpu", "elastic_ep64_failure")


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


def time_run(scenario, repeats: int) -> dict[str, dict]:
    """Per engine, the fastest of `repeats` runs (engines alternating): wall seconds, steps,
    simulated seconds per wall second, and the mean step time (the two engines must agree);
    also the least CPU time of this process over the runs (`cpu_*`: what the run itself cost,
    less disturbed than wall time when other work shares the cores)."""
    from epsim.sim import Simulation
    best: dict[str, dict] = {}
    for _ in range(repeats):
        for engine in ENGINES:
            # the last run's objects go before the clock starts (freeing them is no part of this run)
            sim = result = None
            gc.collect()
            cpu_start, start = time.process_time(), time.perf_counter()
            sim = Simulation(scenario, engine=engine)       # what `simulate` does
            result = sim.run()
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            steps = int(result.steps["step_us"].shape[0])
            if engine not in best or wall < best[engine]["wall_s"]:
                best[engine] = {"wall_s": wall, "steps": steps, "sim_s": result.duration_s,
                                "leapt": sim.leaper.num_steps if sim.leaper is not None else 0,
                                "speed": result.duration_s / wall,
                                "wall_us_per_step": wall / steps * 1e6,
                                "step_ms": float(result.steps["step_us"].mean() * 1e-3),
                                "cpu_s": best.get(engine, {}).get("cpu_s", np.inf)}
            cpu = min(cpu, best[engine]["cpu_s"])
            best[engine].update(cpu_s=cpu, cpu_speed=result.duration_s / cpu,
                                cpu_us_per_step=cpu / steps * 1e6)
    return best


def profile_run(scenario, engine: str, top: int = 20) -> str:
    """cProfile of one run: the functions with the most cumulative and the most own time."""
    import cProfile
    import io
    import pstats

    from epsim.sim import simulate
    prof = cProfile.Profile()
    prof.enable()
    simulate(scenario, engine=engine)
    prof.disable()
    out = []
    for order in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(order).print_stats(top)
        text = buf.getvalue()
        total = next((line.strip() for line in text.splitlines() if "function calls" in line), "")
        table = text[text.index("ncalls") - 3:] if "ncalls" in text else text
        out.append(f"by {order} time ({total}):\n{table.rstrip()}\n")
    return "\n".join(out)


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


def shape_effect_rows(name: str = "elastic_ep64_failure", num_draws: int = 64) -> list[str]:
    """Why an unsaturated step gets its own pool: the MoE time (dispatch + experts + combine,
    summed over layers) of `num_draws` draws priced at a step's batch shape and at the shape a
    few steps later (the same draws, scaled to its tokens), against the draws' own spread."""
    from epsim.cost.model import CostModel
    from epsim.sim import Simulation
    from epsim.spec import load_scenario
    seen = []                                  # each priced batch: tokens per rank, tables
    moe = CostModel.moe

    def spy(self, loads, tokens, tables, *args, **kwargs):
        seen.append((np.array(tokens, dtype=np.float64), tables, args, kwargs))
        return moe(self, loads, tokens, tables, *args, **kwargs)

    CostModel.moe = spy
    try:
        with warnings.catch_warnings():       # the profile's extrapolation: the timed runs say it
            warnings.simplefilter("ignore")
            sim = Simulation(load_scenario(scenario_file(name)), engine="fast")
            sim.run()
    finally:
        CostModel.moe = moe
    rng = np.random.default_rng(17)

    def moe_us(loads, tokens, tables, args, kwargs) -> np.ndarray:
        """[draws] MoE microseconds per step."""
        m = moe(sim.cost_model, loads, tokens, tables, *args, **kwargs)
        return m.dispatch_us.sum(-1) + m.experts_us.sum(-1) + m.combine_us.sum(-1)

    rows = []
    for first in (50, 150, 250):
        tokens, tables, args, kwargs = seen[first]
        num_tokens = int(round(tokens.sum()))
        loads = sim.skew.loads_block(num_draws, num_tokens, rng, 10.0, first)
        base = moe_us(loads, tokens, tables, args, kwargs)
        for later in (1, 2, 4, 8):
            other, other_tables = seen[first + later][:2]
            if other_tables is not tables:           # a rebalance between: another placement
                continue
            shift = moe_us(loads * (other.sum() / num_tokens), other, tables, args, kwargs) - base
            rows.append(f"| {first} | +{later} | {num_tokens} -> {other.sum():.0f} | "
                        f"{np.abs(other - tokens).sum():.0f} | {base.mean() / 1e3:.2f} | "
                        f"{base.std():.0f} | {shift.mean():+.0f} | "
                        f"{abs(shift.mean()) / base.std():.1f} |")
    return rows


# the stages of a step timed by `stage_rows`: (label, module, class, method); none runs inside
# another (`stage_times` checks), so their times add up (the rest is the event loop, metrics
# and bookkeeping)
STAGES = (
    ("MoE loads drawn (a pool's draws)", "epsim.routing.skew", "SkewModel", "loads_block"),
    ("MoE priced (traffic, experts, dispatch / combine)", "epsim.cost.model", "CostModel", "moe"),
    ("observers' fresh loads (EPLB's window)", "epsim.sim.stepper", "PoolStepper", "take"),
    ("rest of the step priced (attention, dense, overhead)", "epsim.cost.model", "CostModel",
     "step"),
    ("scheduler: admit and pick", "epsim.sim.batching", "Scheduler", "plan"),
    ("scheduler: commit tokens and finishes", "epsim.sim.batching", "Scheduler", "commit"),
    ("EPLB: window and rebalances", "epsim.sim.eplb_process", "EPLBManager", "on_step"),
)
MOE_STAGES = 3            # the first three: what a step's MoE layers cost the engine


def stage_times(name: str = "elastic_ep64_failure",
                repeats: int = 3) -> tuple[float, int, float, list[float]]:
    """Where a fast-engine step's wall time goes: each of `STAGES` timed around its calls (a
    perf_counter pair per call, ~1 us against the ~1 ms steps timed here), in the run of
    `repeats` whose total was least.

    Returns:
        (total wall s, steps, simulated s, [stages] wall s).
    """
    import importlib

    from epsim.sim import Simulation
    from epsim.spec import load_scenario
    spent = [0.0] * len(STAGES)
    originals = []
    running: list[int] = []             # the stage being timed (none may run inside another)

    def timed(index: int, function):
        def call(*args, **kwargs):
            if running:
                raise RuntimeError(f"stage {STAGES[index][3]} runs inside stage "
                                   f"{STAGES[running[-1]][3]}: its time would count twice")
            running.append(index)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[index] += time.perf_counter() - start
                running.pop()
        return call

    for index, (_, module, owner, attr) in enumerate(STAGES):
        holder = getattr(importlib.import_module(module), owner)
        originals.append((holder, attr, getattr(holder, attr)))
        setattr(holder, attr, timed(index, originals[-1][2]))
    scenario = load_scenario(scenario_file(name))
    best = None
    try:
        with warnings.catch_warnings():       # the profile's extrapolation: the timed runs say it
            warnings.simplefilter("ignore")
            for _ in range(repeats):
                spent[:] = [0.0] * len(STAGES)
                sim = result = None
                gc.collect()
                start = time.perf_counter()
                sim = Simulation(scenario, engine="fast")
                result = sim.run()
                wall = time.perf_counter() - start
                if best is None or wall < best[0]:
                    best = (wall, int(result.steps["step_us"].shape[0]), result.duration_s,
                            list(spent))
    finally:
        for holder, attr, function in originals:
            setattr(holder, attr, function)
    return best


def stage_rows(name: str = "elastic_ep64_failure", repeats: int = 3) -> tuple[list[str], str]:
    """`stage_times` as table rows (us per step, share) and the bound they set: the speed the
    run would reach if its MoE layers (`MOE_STAGES`) cost nothing and the rest stayed."""
    wall_s, steps, sim_s, spent = stage_times(name, repeats)
    rows = [f"| {label} | {t / steps * 1e6:.0f} | {t / wall_s:.0%} |"
            for (label, *_), t in zip(STAGES, spent)]
    rest = wall_s - sum(spent)
    rows.append(f"| the rest: SimPy, metrics, failures, setup | {rest / steps * 1e6:.0f} | "
                f"{rest / wall_s:.0%} |")
    rows.append(f"| **whole run** | **{wall_s / steps * 1e6:.0f}** | 100% |")
    without = wall_s - sum(spent[:MOE_STAGES])
    bound = (f"{steps} steps, {sim_s:.0f} simulated s in {wall_s:.3f} wall s: "
             f"{sim_s / wall_s:.0f}x "
             f"real time (timers included). With its MoE layers free (the first "
             f"{MOE_STAGES} rows) the rest alone would take {without / steps * 1e6:.0f} us per "
             f"step: {sim_s / without:.0f}x, against the {TARGETS['EPLB']:.0f}x target.")
    return rows, bound


BLOCK_DRAWS = (1, 2, 4, 8, 16)    # draws priced in one `CostModel.moe` call (`block_rows`)


def block_rows(name: str = "elastic_ep64_failure", calls: int = 100) -> tuple[list[str], float]:
    """Whether pricing many steps' MoE layers in one call would pay, and what drawing and
    pricing them costs at the least: a pool's draws (`SkewModel.loads_block`) and their pricing
    (`price_draws`: one `CostModel.moe` call) at a step's batch (the first of the run), on
    blocks of `BLOCK_DRAWS` draws, each timed alone (the least of 3 runs of `calls` calls each).

    Returns:
        (table rows: wall us per call and per draw, priced; drawn; both per draw),
        the least wall us per draw of drawing and pricing together over the block sizes.
    """
    import epsim
    from epsim.sim import Simulation
    with warnings.catch_warnings():           # the profile's extrapolation: the timed runs say it
        warnings.simplefilter("ignore")
        sim = Simulation(epsim.load_scenario(scenario_file(name)), engine="fast")
    from epsim.sim.stepper import price_draws
    batch = sim.scheduler.plan(0.0).batch
    cost_model, tables = sim.cost_model, sim.placement.tables
    num_tokens = batch.routed_tokens
    rng = np.random.default_rng(23)

    def least_s(function) -> float:
        function()
        best = np.inf
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(calls):
                function()
            best = min(best, (time.perf_counter() - start) / calls)
        return best

    rows, least_us = [], np.inf
    for num in BLOCK_DRAWS:
        loads = sim.skew.loads_block(num, num_tokens, rng)
        priced = least_s(lambda: price_draws(cost_model, tables, batch, loads))  # as a pool prices them
        drawn = least_s(lambda: sim.skew.loads_block(num, num_tokens, rng))      # as a pool draws them
        if not rows:
            alone = priced
        both_us = (priced + drawn) / num * 1e6
        least_us = min(least_us, both_us)
        rows.append(f"| {num} | {priced * 1e6:.0f} | {priced / num * 1e6:.0f} | "
                    f"{alone / (priced / num):.2f} | {drawn / num * 1e6:.0f} | {both_us:.0f} |")
    return rows, least_us


SPECULATION_CAP = 32      # steps ahead a speculation is followed, at most


def speculation_depths(name: str = "elastic_ep64_failure") -> np.ndarray:
    """How far an unsaturated run's batches are known ahead, a bound for leaping them: from each
    step k (k >= 1, with `SPECULATION_CAP` steps after it), guess that each next step lasts as
    long as step k - 1 and count the steps until an arrival falls between a guessed step start
    and the actual one. Until then every step admits the requests it actually admits (admission
    reads which requests have arrived and the batch), so its batch is known: a lower bound on
    how many steps such a guess holds.

    Returns:
        [steps - 1 - SPECULATION_CAP] int, steps each speculation holds (at most the cap).
    """
    from epsim.sim import simulate
    from epsim.spec import load_scenario
    with warnings.catch_warnings():           # the profile's extrapolation: the timed runs say it
        warnings.simplefilter("ignore")
        result = simulate(load_scenario(scenario_file(name)), engine="fast")
    start_s = result.steps["start_us"] * 1e-6
    step_s = result.steps["step_us"] * 1e-6
    arrivals = np.sort(np.asarray(result.arrival_s)[~np.asarray(result.is_initial)])
    ahead = np.arange(1, SPECULATION_CAP + 1)
    depths = []
    for k in range(1, start_s.shape[0] - SPECULATION_CAP):
        guessed = start_s[k] + ahead * step_s[k - 1]
        actual = start_s[k + ahead]                  # (stalls between steps count as actual)
        lo, hi = np.minimum(guessed, actual), np.maximum(guessed, actual)
        crossed = np.searchsorted(arrivals, hi, "right") > np.searchsorted(arrivals, lo, "right")
        depths.append(int(np.argmax(crossed)) if crossed.any() else SPECULATION_CAP)
    return np.asarray(depths, dtype=np.int64)


def speculation_line(name: str = "elastic_ep64_failure") -> str:
    depths = speculation_depths(name)
    if depths.shape[0] == 0:
        return f"{name}: {SPECULATION_CAP + 1} steps or fewer, nothing to speculate over"
    return (f"{name}: guessing each next step as long as the one before holds the batches of "
            f"{depths.mean():.1f} steps on average (median {np.median(depths):.0f}, 10th "
            f"percentile {np.percentile(depths, 10):.0f}, >= 4 steps {np.mean(depths >= 4):.0%}; "
            f"{depths.shape[0]} speculations, at most {SPECULATION_CAP} steps each)")


def engine_row(label: str, row: dict[str, dict]) -> str:
    ref, fast = row["reference"], row["fast"]
    return (f"| {label} | {ref['steps']} | {ref['step_ms']:.2f} / {fast['step_ms']:.2f} | "
            f"{ref['wall_us_per_step']:.0f} | {fast['wall_us_per_step']:.0f} | "
            f"{ref['speed']:.0f} | **{fast['speed']:.0f}** | {ref['wall_s'] / fast['wall_s']:.2f} | "
            f"{fast['cpu_us_per_step']:.0f} | {fast['cpu_speed']:.0f} | {fast['leapt']} |")


ENGINE_HEADER = ["| {} | steps | mean step ms (ref / fast) | ref wall us/step | fast wall us/step | "
                 "ref sim s / wall s | fast sim s / wall s | fast / ref speed | "
                 "fast CPU us/step | fast sim s / CPU s | steps leapt (fast) |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
AGAINST_ROUNDS = 10     # runs per checkout and scenario for `--against`
TARGETS = {"R1": 1000.0, "EPLB": 300.0}     # issue #17: simulated s per wall s on one core


def verdict(speed: float, cpu_speed: float, target: float) -> str:
    """Whether a run meets its speed target, by wall time and by CPU time."""
    if speed >= target:
        return "met"
    if cpu_speed >= target:
        return "met by CPU time only"
    return f"not met ({cpu_speed / target:.0%} of it by CPU time)"


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

    from epsim.spec import load_scenario
    load_start = os.getloadavg()[0]
    r1 = time_run(r1_variant(), args.repeats)
    fast = r1["fast"]
    lines = [f"## R1: {R1.name}", "",
             f"60 simulated s: fast engine **{fast['speed']:.0f}x real time** "
             f"({fast['wall_us_per_step']:.0f} us wall per step; {fast['cpu_speed']:.0f}x by "
             f"CPU time, {fast['cpu_us_per_step']:.0f} us per step), reference engine "
             f"{r1['reference']['speed']:.0f}x; fast / reference = "
             f"**{r1['reference']['wall_s'] / fast['wall_s']:.2f}** (fastest of {args.repeats} "
             f"each, engines alternating). The fast engine leapt {fast['leapt']} of its "
             f"{fast['steps']} steps (`epsim.sim.leap`: saturated decode steps priced and "
             "applied many at once).", "",
             ENGINE_HEADER[0].format("scenario"), ENGINE_HEADER[1], engine_row("R1", r1), "",
             "## Scenarios with EPLB on", "",
             ENGINE_HEADER[0].format("scenario"), ENGINE_HEADER[1]]
    targets = [f"- R1 >= {TARGETS['R1']:.0f}x: "
               f"{verdict(fast['speed'], fast['cpu_speed'], TARGETS['R1'])}"]
    eplb_rows = {}
    for name in EPLB_SCENARIOS:
        row = eplb_rows[name] = time_run(load_scenario(scenario_file(name)), args.repeats)
        lines.append(engine_row(f"`{name}`", row))
        print(lines[-1], file=sys.stderr)
        f = row["fast"]
        targets.append(f"- `{name}` >= {TARGETS['EPLB']:.0f}x: "
                       f"{verdict(f['speed'], f['cpu_speed'], TARGETS['EPLB'])}")
    lines += ["", "Targets of issue #17 (fast engine, simulated s per wall s; CPU time where "
              "the wall time was disturbed):", "", *targets]
    lines += ["", "## EP size (R1, tokens per rank fixed, nodes = EP / 8)", "",
              ENGINE_HEADER[0].format("EP"), ENGINE_HEADER[1]]
    for ep in (8, 16, 32, 64, 128):
        row = time_run(r1_variant(ep_size=ep, duration_s=args.sweep_seconds), args.repeats)
        lines.append(engine_row(str(ep), row))
        print(lines[-1], file=sys.stderr)
    lines += ["", "## Layers (R1 at EP 64)", "", ENGINE_HEADER[0].format("layers"), ENGINE_HEADER[1]]
    for layers in (24, 48, 94):
        row = time_run(r1_variant(num_layers=layers, duration_s=args.sweep_seconds), args.repeats)
        lines.append(engine_row(str(layers), row))
        print(lines[-1], file=sys.stderr)
    load_end = os.getloadavg()[0]
    lines += ["", f"Load average (1 min) {load_start:.1f} at the start and {load_end:.1f} at the "
              "end, on 2 cores shared with other work: absolute speeds are lower bounds; the "
              "fast / reference ratios, measured side by side in this one process, are what "
              "this table is for."]
    if args.against is not None:
        then = subprocess.run(["git", "-C", str(args.against), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        lines += ["", f"## Against the fast engine of commit {then}", "",
                  f"The same scenarios in two checkouts, this one and `{then}`'s, one worker "
                  f"process each, taking turns run by run ({AGAINST_ROUNDS} runs each, the "
                  "fastest counts), by CPU time: what the code changed, with the machine in the "
                  "same state for both.", "",
                  "| scenario | steps | then CPU us/step | now CPU us/step | then sim s / CPU s | "
                  "now sim s / CPU s | now / then speed |", "|---|---:|---:|---:|---:|---:|---:|"]
        lines += against_rows({"then": args.against.resolve(), "now": ROOT},
                              [R1] + [scenario_file(name) for name in EPLB_SCENARIOS],
                              AGAINST_ROUNDS)
    if args.instructions:
        lines += ["", f"## Instructions, against commit {then}", "",
                  "Machine instructions of one warm fast-engine run in each checkout "
                  "(valgrind's callgrind, two runs less one: imports and first-run work drop out): "
                  "the same to a fraction of a percent on a busy machine as on an idle one "
                  "(addresses and collection moments still vary a little), so a change's effect "
                  "shows where the timings above are within their noise. Fewer instructions need not "
                  "mean proportionally less time (memory stalls count for nothing here).", "",
                  "| scenario | steps | then k instructions/step | now k instructions/step | "
                  "then / now |", "|---|---:|---:|---:|---:|"]
        lines += instruction_rows({"then": args.against.resolve(), "now": ROOT},
                                  [scenario_file(name)
                                   for name in INSTRUCTION_SCENARIOS])
    lines += ["", "## Why an unsaturated step gets its own pool", "",
              "`elastic_ep64_failure`'s batch changes shape at every step (requests arrive and "
              "finish on a few ranks each step), so each step draws and prices its own loads. "
              "Reusing a neighbour's pool would price a step at another shape: below, "
              "64 draws of a step's MoE layers priced at its own batch and, the same draws "
              "scaled to the tokens, at the batch 1 to 8 steps later. Where the busiest rank's "
              "tokens move, the shift is several times the draws' own spread (the noise pools "
              "may share), so pooling across nearby shapes would bias the step times, not only "
              "correlate them.", "",
              "| step | later | tokens | per-rank tokens moved | MoE ms (mean) | draw sd us | "
              "shift us | shift / sd |", "|---:|---:|---|---:|---:|---:|---:|---:|",
              *shape_effect_rows()]
    stages, bound = stage_rows(repeats=args.repeats)
    blocks, least_us = block_rows()
    step_ms = eplb_rows["elastic_ep64_failure"]["fast"]["step_ms"]
    ceiling = (f"Every step of `elastic_ep64_failure` draws and prices its own MoE layers (its "
               f"batch changes shape every step, above). At its mean step of {step_ms:.2f} ms "
               f"(fast engine, its row above) and the least this table measures for drawing and "
               f"pricing one step's layers ({least_us:.0f} us a draw, warm, in the best block "
               f"size), that work alone caps the run at **{step_ms * 1e3 / least_us:.0f}x** real "
               f"time, even if nothing else in a step cost anything: the "
               f"{TARGETS['EPLB']:.0f}x target needs fewer or cheaper array elements per step, "
               "not fewer calls.")
    lines += ["", "## Where an unsaturated step's time goes (`elastic_ep64_failure`, fast engine)",
              "", "Each stage timed around its calls in one run (the least of "
              f"{args.repeats} by total), wall time per step: the profile of the scenario that "
              "misses its target. " + bound, "",
              "| stage | wall us/step | share |", "|---|---:|---:|", *stages, "",
              "Pricing many steps at once (an unsaturated leap, if the batches ahead were known) "
              "would not change this much: the MoE pricing is bound by the arrays' elements, not "
              "by the calls. A pool's pricing (`price_draws`: one `CostModel.moe` call) and its "
              "draws (`SkewModel.loads_block`) at the run's first batch, on blocks of draws, "
              "each timed alone (in the run the same calls take longer: other work has pushed "
              "their tables out of the cache):", "",
              "| draws per call | priced: wall us per call | priced: wall us per draw | "
              "per draw, against one | drawn: wall us per draw | drawn and priced: wall us per "
              "draw |", "|---:|---:|---:|---:|---:|---:|", *blocks, "", ceiling]
    report = "\n".join(lines)
    if args.profile:
        for engine in ("fast", "reference"):
            report += (f"\n\n## cProfile of R1, {engine} engine (top 20)\n\n```\n"
                       + profile_run(r1_variant(), engine) + "```")
    print(report)
    if args.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            "# Simulator speed (benchmarks/sim_speed.py)\n\n"
            f"Recorded with `python benchmarks/sim_speed.py {' '.join(sys.argv[1:])}` ({pinned}; "
            f"fastest of {args.repeats} runs per configuration, each timed from a clean heap (the last "
            "run's objects freed before the clock starts): the machine is shared, so expect "
            "+-20 % between recordings).\n\n"
            "The fast engine (`epsim.sim.stepper` and `epsim.sim.leap`, docs/model.md) against "
            "the reference engine, side by side in one process. Steps take different simulated time at each EP size "
            "and layer count, so growth is judged per step.\n\n"
            + report + "\n\n## Machine\n\n```\n" + machine() + "\n```\n")
        print(f"\nwrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
