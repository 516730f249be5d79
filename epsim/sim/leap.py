"""The fast engine's leap: many saturated (or quiet) decode steps priced and applied at once.

A decode instance whose batches stay full (every slot a step frees refilled at the next from
requests already waiting, none of them finishing within the steps ahead) runs steps whose
batches are known before the steps ahead of them run: full on every rank, the contexts
following from the requests that end and start (`Scheduler.saturated`). While the fast
engine's pools of MoE draws serve them (`epsim.sim.stepper`), all that is left to find is
their times. The leap takes up to `MAX_LEAP` of them in segments, one per pool: a segment
prices up to its pool's remaining uses in one vectorised call (`CostModel.decode_steps`) and
keeps the steps that start within the pool's drift window (and before the measurement window
opens, if it has yet to) and end before the run does; the next segment starts where it
stopped, with the pool the one-step loop would draw there. The steps are then applied to the
scheduler, the recorder and EPLB's statistics window as the one-step loop would have done
them: the same random stream, the same bits (tests/epsim/sim/test_leap.py).

Quiet steps (`epsim.sim.quiet`: every running request decodes, none finishes or joins, closed
loops included) leap the same way, their batches formed by `Scheduler.quiet` and cut before the
next arrival where a slot is free (`stop_s`).

It only runs where nothing watches steps one by one but EPLB's statistics window, which takes
the loads of the passes that only record (`EPLBManager.quiet_steps`; the pass that rebalances
is stepped as usual): no other observer, no added process, no failures, nothing stalled or
charged; `Simulation(..., leap=False)` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.step import StepBlock, StepCost
from epsim.sim.quiet import MAX_QUIET, Quiet
from epsim.sim.saturation import Saturated
from epsim.sim.spec_leap import apply_spec_quiet, spec_block, spec_quiet_steps
from epsim.sim.speculative import verify_counts
from epsim.sim.stepper import PoolStepper

MAX_LEAP = 128           # steps looked at once, at most (one pool serves up to its uses of them)
MIN_HORIZON = 16         # steps looked at once, at least (`Leaper.horizon`)


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


@dataclass(frozen=True, eq=False)
class _Segment:
    """Steps of one leap served by one pool: their MoE costs, block and times (µs, [n])."""

    moes: list
    block: StepBlock
    start_us: np.ndarray
    end_us: np.ndarray
    loads: list          # blocks [steps, layers, experts]: what observers see of each step
                         # (EPLB's fresh loads), or of the last alone


class Leaper:
    """Leaps over the saturated steps of one run (module doc).

    Args:
        sim: the run (`epsim.sim.engine.Simulation`; untyped here, since the engine imports
            this module): its scheduler, stepper, cost model, placement, recorder and EPLB
            manager, which a leap reads and advances as the one-step loop would.
    """

    def __init__(self, sim):
        self.sim = sim
        self.num_leaps = 0
        self.num_steps = 0
        self.longest_leap = 0       # the most steps one leap covered (a receive interval crossed)
        self._batch = None          # `Scheduler.saturated_batch`, and whether it leaps at all
        self._leaps = False
        self._horizon = MIN_HORIZON   # steps the last look found saturated, doubled (`horizon`)

    @staticmethod
    def applies(sim) -> bool:
        """Whether a run may leap: the fast engine, nothing that watches steps one by one
        but EPLB's statistics window (which takes the leapt steps' loads at once), a draft
        model's forwards only from pools (`epsim.sim.spec_leap`)."""
        stepper = sim.stepper
        return (isinstance(stepper, PoolStepper) and not stepper.fresh_every_step
                and not sim.watched and (sim.draft is None or sim.draft.pooled))

    def leap(self, now_us: float) -> Leap | None:
        """Apply the saturated (else the quiet, `epsim.sim.quiet`) steps from `now_us` on, as
        many as can be leapt (their times are for the engine to wait out), or None: take one
        step as usual."""
        sim = self.sim
        if sim.time_added or not sim.placement.all_alive:
            return None
        # EPLB's passes that only record: the one that rebalances is stepped as usual
        quiet = sim.eplb.quiet_steps if sim.eplb is not None else MAX_LEAP
        if sim.draft is not None:
            return self._spec(now_us, quiet)
        # a saturated leap admits waiting requests inside its steps: their prefills must each
        # meet the first-use term (`epsim.sim.first_use`), so it steps them as usual
        found = self._saturated(now_us, quiet) if sim.first_use is None else None
        if found is None:
            found = self._quiet(now_us, quiet)
        if found is None:
            return None
        steps, batch, stop_s = found
        segments, done, start_us = [], 0, now_us
        last_step_s = None                      # the engine's last step, until a segment's
        while done < steps.num:
            segment = self._segment(steps, batch, stop_s, done, start_us, last_step_s)
            if segment is None:
                break
            segments.append(segment)
            done += len(segment.moes)
            start_us = float(segment.end_us[-1])
            # as the engine's `last_step` gives it: end minus start
            last_step_s = (start_us - float(segment.start_us[-1])) * 1e-6
        if not segments:
            return None
        return self._apply(steps, batch, done, segments)

    def _saturated(self, now_us: float, quiet: int) -> tuple | None:
        """(`Saturated`, its batch, no stop) from `now_us` on, or None (an open loop's decode
        instance whose slots stay full, `epsim.sim.saturation`)."""
        sim = self.sim
        sched = sim.scheduler
        if sched.closed is not None or not sched.may_saturate():   # cheap: most steps end here
            return None
        if self._batch is None:                 # a saturated batch is full: always the same
            self._batch = sched.saturated_batch()
            self._leaps = sim.cost_model.leaps(self._batch)
        if not self._leaps:
            return None
        max_steps = min(quiet, self.horizon(now_us))
        sat = sched.saturated(now_s=now_us * 1e-6, max_steps=max_steps)
        num = 0 if sat is None else sat.num
        # saturation that outlasts the look (or EPLB's quiet passes) says nothing of its length
        grown = 2 * self._horizon if num >= max_steps else max(MIN_HORIZON, 2 * num)
        self._horizon = min(MAX_LEAP, grown)
        return (sat, self._batch, np.inf) if num >= 2 else None

    def _quiet(self, now_us: float, quiet: int) -> tuple | None:
        """(`Quiet`, its batch, the next arrival's time) from `now_us` on, or None."""
        sim = self.sim
        if sim.eplb is not None and quiet < 2:
            return None
        steps = sim.scheduler.quiet(now_us * 1e-6, quiet if sim.eplb is not None else MAX_QUIET)
        if steps is None or not sim.cost_model.leaps(steps.batch):
            return None
        return steps, steps.batch, steps.stop_s

    def _spec(self, now_us: float, quiet: int) -> Leap | None:
        """The quiet verify steps from `now_us` on (`epsim.sim.spec_leap`), applied as the
        one-step loop would, or None."""
        sim = self.sim
        sched, placement = sim.scheduler, sim.placement
        if sim.eplb is not None and quiet < 2:
            return None
        steps = spec_quiet_steps(sched, now_us * 1e-6, quiet)
        if steps is None:
            return None
        seg = spec_block(sim, steps, now_us)
        if seg is None:
            return None
        num = len(seg.moes)
        applied, emitted = apply_spec_quiet(sched, steps, num, seg.start_us * 1e-6,
                                            seg.end_us * 1e-6)
        sim.cost_model.record_decode_steps(seg.block, seg.moes)
        step_us = seg.block.step_us[:num] + seg.draft_us
        sim.metrics.record_steps(seg.start_us, step_us, seg.block.parts[:num], seg.moes,
                                 seg.block.dense_us, seg.block.overhead_us, 0.0, 0.0,
                                 applied.num_running, applied.num_waiting, placement.version,
                                 placement.num_alive, applied.gaps, emitted,
                                 seg.draft_us.tolist())
        if sim.eplb is not None:
            sim.eplb.on_quiet_steps(seg.loads)
        self.num_leaps += 1
        self.num_steps += num
        self.longest_leap = max(self.longest_leap, num)
        tokens = verify_counts(steps.batch, sched.draft_tokens).tokens
        return Leap(step_us.tolist(), float(seg.start_us[-1]), float(seg.end_us[-1]),
                    seg.loads[-1][-1], tokens, seg.block.cost(num - 1, seg.moes[-1]),
                    placement.version)

    def horizon(self, now_us: float) -> int:
        """Steps to look at from `now_us` (`Scheduler.saturated` forms every one of them, so
        each costs, used or not): twice what the last look found saturated (twice its
        horizon if all were), at least `MIN_HORIZON`, at most `MAX_LEAP`, and no further than
        the run's end or the measurement window's opening allow at the last step's time (one
        more to spare). A look cut short changes no result: the next look goes on from there,
        and a leap gives the bits of stepping one at a time (module doc)."""
        sim = self.sim
        horizon = self._horizon
        last = sim.last_step
        if last is not None and last.end_us > last.start_us:
            stop_us = min(sim.end_us, sim.scheduler.window_due_s * 1e6)
            horizon = min(horizon, int((stop_us - now_us) / (last.end_us - last.start_us)) + 2)
        return max(horizon, 1)

    def _segment(self, sat: Saturated | Quiet, batch, stop_s: float, done: int, start_us: float,
                 last_step_s: float | None) -> _Segment | None:
        """Steps `done`, `done + 1`, ... of `sat` (of `batch`) from `start_us` on, as far as
        the pool that serves the first of them serves them (its uses and drift window), the
        measurement window's opening, the run's end and `stop_s` (s: the steps start before
        it) allow; None: not one."""
        sim = self.sim
        stepper, sched = sim.stepper, sim.scheduler
        start_s = start_us * 1e-6
        # a step the leap would not keep must not find (or draw) its pool either: a pool drawn
        # for the quiet batch at the next arrival's step (`stop_s`) would take routing draws the
        # one-step loop never takes, since that step's batch has the arrival in it
        if start_us >= sim.end_us or start_s >= sched.window_due_s or start_s >= stop_s:
            return None
        # the pool this step takes, as `PoolStepper.price` would find it (or draw it) next
        step = sim.step_index + done
        pool = stepper.pool_for(batch, start_s, step, last_step_s)
        num = min(sat.num - done, pool.max_uses - pool.used)
        state = stepper.rng.bit_generator.state
        rows = stepper.draw_rows(pool, num)
        moes = [pool.rows[r] for r in rows]
        block = sim.cost_model.decode_steps(
            batch, sat.context_sum[done:done + num] + batch.decode_tokens, moes)
        times = np.cumsum(np.concatenate([[start_us], block.step_us]))    # as SimPy adds them
        starts_us, ends_us = times[:-1], times[1:]
        starts_s = starts_us * 1e-6
        kept = ((starts_s - pool.t_s < stepper.drift_window_s) & (ends_us < sim.end_us)
                & (starts_s < sched.window_due_s) & (starts_s < stop_s))
        keep = num if kept.all() else int(np.argmin(kept))
        if keep < num:            # the steps past the pool's window or the run's end: undrawn
            stepper.rng.bit_generator.state = state
            if keep == 0:
                return None
            rows = stepper.draw_rows(pool, keep)
            moes = moes[:keep]
        if stepper.fresh_for(pool):
            loads = stepper.fresh_loads(pool, starts_s[:keep].tolist(), step)
        else:
            pool.used += keep
            loads = [pool.loads[rows[-1]][None]]
        return _Segment(moes, block, starts_us[:keep], ends_us[:keep], loads)

    def _apply(self, sat: Saturated | Quiet, batch, num: int, segments: list[_Segment]) -> Leap:
        """Apply the first `num` steps of `sat` (of `batch`), priced in `segments`, to the
        scheduler, the cost model's ledger, the recorder and EPLB's window, as the one-step
        loop would."""
        sim = self.sim
        sched, cost_model = sim.scheduler, sim.cost_model
        placement = sim.placement
        start_us = np.concatenate([seg.start_us for seg in segments])
        end_us = np.concatenate([seg.end_us for seg in segments])
        apply = sched.apply_quiet if isinstance(sat, Quiet) else sched.apply_saturated
        applied = apply(sat, num, start_us * 1e-6, end_us * 1e-6)
        num_tokens = float(batch.tokens.sum())
        output_tokens = float(batch.sampled_tokens.sum())
        at = 0
        for seg in segments:
            n = len(seg.moes)
            cost_model.record_decode_steps(seg.block, seg.moes)
            steps = slice(at, at + n)
            sim.metrics.record_steps(seg.start_us, seg.block.step_us[:n], seg.block.parts[:n],
                                     seg.moes, seg.block.dense_us, seg.block.overhead_us,
                                     num_tokens, output_tokens, applied.num_running[steps],
                                     applied.num_waiting[steps], placement.version,
                                     placement.num_alive, applied.gaps[steps])
            at += n
        if sim.eplb is not None:
            sim.eplb.on_quiet_steps([block for seg in segments for block in seg.loads])
        self.num_leaps += 1
        self.num_steps += num
        self.longest_leap = max(self.longest_leap, num)
        last = segments[-1]
        n = len(last.moes) - 1
        step_us = [t for seg in segments for t in seg.block.step_us[:len(seg.moes)].tolist()]
        return Leap(step_us, float(last.start_us[n]), float(last.end_us[n]),
                    last.loads[-1][-1], batch.tokens, last.block.cost(n, last.moes[n]),
                    placement.version)
