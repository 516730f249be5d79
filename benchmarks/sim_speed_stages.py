"""Where an unsaturated step's time goes, on the scenario that misses its speed target
(`elastic_ep64_failure`, fast engine): why each of its steps draws and prices its own MoE
layers (`shape_effect_rows`), each stage of a step timed around its calls (`stage_rows`), and
what drawing and pricing a step's MoE layers costs in blocks of draws (`block_rows`), which
caps the run's speed whatever the rest of a step costs; the closing section of
`benchmarks/sim_speed.py`'s report.
"""

from __future__ import annotations

import gc
import importlib
import time

import numpy as np
from sim_speed_common import TARGETS, quietly, scenario_file

from epsim.cost.model import CostModel
from epsim.sim import Simulation
from epsim.sim.stepper import price_draws
from epsim.spec import load_scenario


def shape_effect_rows(name: str = "elastic_ep64_failure", num_draws: int = 64) -> list[str]:
    """Why an unsaturated step gets its own pool: the MoE time (dispatch + experts + combine,
    summed over layers) of `num_draws` draws priced at a step's batch shape and at the shape a
    few steps later (the same draws, scaled to its tokens), against the draws' own spread."""
    seen = []                                  # each priced batch: tokens per rank, tables
    moe = CostModel.moe

    def spy(self, loads, tokens, tables, *args, **kwargs):
        seen.append((np.array(tokens, dtype=np.float64), tables, args, kwargs))
        return moe(self, loads, tokens, tables, *args, **kwargs)

    CostModel.moe = spy
    try:
        with quietly():
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


def stage_times(name: str = "elastic_ep64_failure", repeats: int = 3,
                stages: tuple = STAGES) -> tuple[float, int, float, list[float]]:
    """Where a fast-engine step's wall time goes: each of `stages` (`STAGES`) timed around its
    calls (a perf_counter pair per call, ~1 us against the ~1 ms steps timed here), in the run
    of `repeats` whose total was least; the methods are as they were after.

    Returns:
        (total wall s, steps, simulated s, [stages] wall s).
    Raises:
        RuntimeError: a stage runs inside another (its time would count twice).
    """
    spent = [0.0] * len(stages)
    originals = []
    running: list[int] = []             # the stage being timed (none may run inside another)

    def timed(index: int, function):
        def call(*args, **kwargs):
            if running:
                raise RuntimeError(f"stage {stages[index][3]} runs inside stage "
                                   f"{stages[running[-1]][3]}: its time would count twice")
            running.append(index)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[index] += time.perf_counter() - start
                running.pop()
        return call

    for index, (_, module, owner, attr) in enumerate(stages):
        holder = getattr(importlib.import_module(module), owner)
        originals.append((holder, attr, getattr(holder, attr)))
        setattr(holder, attr, timed(index, originals[-1][2]))
    scenario = load_scenario(scenario_file(name))
    best = None
    try:
        with quietly():
            for _ in range(repeats):
                spent[:] = [0.0] * len(stages)
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
    with quietly():
        sim = Simulation(load_scenario(scenario_file(name)), engine="fast")
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


def unsaturated_sections(repeats: int, step_ms: float) -> list[str]:
    """The report's sections on `elastic_ep64_failure`'s steps, its stages timed in the least of
    `repeats` runs; `step_ms`: its mean fast-engine step (ms), for the cap its MoE work sets."""
    lines = ["", "## Why an unsaturated step gets its own pool", "",
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
    stages, bound = stage_rows(repeats=repeats)
    blocks, least_us = block_rows()
    ceiling = (f"Every step of `elastic_ep64_failure` draws and prices its own MoE layers (its "
               f"batch changes shape every step, above). At its mean step of {step_ms:.2f} ms "
               f"(fast engine, its row above) and the least this table measures for drawing and "
               f"pricing one step's layers ({least_us:.0f} us a draw, warm, in the best block "
               f"size), that work alone caps the run at **{step_ms * 1e3 / least_us:.0f}x** real "
               f"time, even if nothing else in a step cost anything: the "
               f"{TARGETS['EPLB']:.0f}x target needs fewer or cheaper array elements per step, "
               "not fewer calls.")
    return lines + [
        "", "## Where an unsaturated step's time goes (`elastic_ep64_failure`, fast engine)",
        "", "Each stage timed around its calls in one run (the least of "
        f"{repeats} by total), wall time per step: the profile of the scenario that "
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
