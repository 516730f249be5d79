"""The fast engine's leap: many saturated decode steps priced and applied at once.

A decode instance whose batches stay full (every slot a step frees refilled at the next from
requests already waiting, none of them finishing within the steps ahead) runs steps whose
batches are known before the steps ahead of them run: full on every rank, the contexts
following from the requests that end and start (`Scheduler.saturated`). While the fast
engine's pool of MoE draws serves them (`epsim.sim.stepper`), all that is left to find is
their times. The leap prices up to the pool's remaining uses in one vectorised call
(`CostModel.decode_steps`), keeps the steps that start within the pool's drift window (and
before the measurement window opens, if it has yet to) and end before the run does, and applies them to the scheduler and the recorder as the one-step loop
would have done them: the same random stream, the same bits (tests/epsim/sim/test_leap.py).

It only runs where nothing watches steps one by one: no observer, no added process, neither
EPLB nor failures, nothing stalled or charged; `Simulation(..., leap=False)` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from epsim.cost.model import StepCost
from epsim.sim.stepper import PoolStepper

if TYPE_CHECKING:
    from epsim.sim.engine import Simulation

MAX_LEAP = 32            # steps priced at once, at most (a pool serves no more)


@dataclass(frozen=True, eq=False)
class Leap:
    """Steps a leap applied: their times `step_us` (µs) and, of the last, what `StepInfo`
    holds (loads `[layers, experts]`, tokens `[dp]`)."""

    step_us: list[float]
    last_start_us: float
    last_end_us: float
    last_loads: np.ndarray
    last_tokens: np.ndarray
    last_cost: StepCost
    placement_version: int


class Leaper:
    """Leaps over the saturated steps of one run (module doc)."""

    def __init__(self, sim: "Simulation"):
        self.sim = sim
        self.num_leaps = 0
        self.num_steps = 0
        self._batch = None          # `Scheduler.saturated_batch`, and whether it leaps at all
        self._leaps = False

    @staticmethod
    def applies(sim: "Simulation") -> bool:
        """Whether a run may leap: the fast engine, and nothing that watches steps one by one."""
        stepper = sim.stepper
        return (isinstance(stepper, PoolStepper) and not stepper.fresh_every_step
                and not sim.watched)

    def leap(self, now_us: float) -> Leap | None:
        """Apply the saturated steps from `now_us` on, as many as can be leapt (their times
        are for the engine to wait out), or None: take one step as usual."""
        sim = self.sim
        stepper, sched, cost_model = sim.stepper, sim.scheduler, sim.cost_model
        if sim.time_added or not sim.placement.all_alive:
            return None
        if not sched.may_saturate():           # cheap: most unsaturated steps end here
            return None
        now_s = now_us * 1e-6
        if self._batch is None:                 # a saturated batch is full: always the same
            self._batch = sched.saturated_batch()
            self._leaps = cost_model.leaps(self._batch)
        batch = self._batch
        if not self._leaps:
            return None
        current = stepper.current_pool(batch, now_s)        # its uses left bound the leap
        sat = sched.saturated(now_s, MAX_LEAP if current is None else current.max_uses - current.used)
        if sat is None or sat.num < 2:
            return None
        # the pool this step takes, as `PoolStepper.price` would find it (or draw it) next
        pool = stepper.pool_for(batch, now_s, sim.step_index)
        num = min(sat.num, pool.max_uses - pool.used)
        if num < 2:
            return None
        state = stepper.rng.bit_generator.state
        rows = stepper.draw_rows(pool, num)
        moes = [pool.rows[r] for r in rows]
        block = cost_model.decode_steps(batch, sat.context_sum[:num] + batch.decode_tokens, moes)
        times = np.cumsum(np.concatenate([[now_us], block.step_us]))    # as SimPy adds them
        start_us, end_us = times[:-1], times[1:]
        start_s = start_us * 1e-6
        kept = ((start_s - pool.t_s < stepper.drift_window_s) & (end_us < sim.end_us)
                & (start_s < sched.window_due_s))
        keep = num if kept.all() else int(np.argmin(kept))
        if keep < num:            # the steps past the pool's window or the run's end: undrawn
            stepper.rng.bit_generator.state = state
            if keep < 2:
                return None
            rows = stepper.draw_rows(pool, keep)
            moes = moes[:keep]
        start_us, end_us, step_us = start_us[:keep], end_us[:keep], block.step_us[:keep]
        gaps, waiting, running = sched.apply_saturated(sat, keep, start_us * 1e-6, end_us * 1e-6)
        pool.used += keep
        cost_model.record_decode_steps(block, moes)
        placement = sim.placement
        num_tokens = float(batch.tokens.sum())
        sim.metrics.record_steps(start_us, step_us, block.parts, moes, block.dense_us,
                                 block.overhead_us, num_tokens, float(batch.sampled_tokens.sum()),
                                 running, waiting, placement.version, placement.num_alive, gaps)
        self.num_leaps += 1
        self.num_steps += keep
        last = keep - 1
        return Leap(step_us.tolist(), float(start_us[last]), float(end_us[last]),
                    pool.loads[rows[last]], batch.tokens, block.cost(last, moes[last]),
                    placement.version)
