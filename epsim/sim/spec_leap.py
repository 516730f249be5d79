"""The fast engine's leap over quiet speculative (MTP) decode steps: many verify cycles at once.

A speculative run (`epsim.sim.speculative`) is quiet while every running request decodes, none
joins and none finishes (`epsim.sim.quiet`'s conditions). Each step is then a draft cycle and a
verify step over the same requests, whose contexts grow by the tokens each request gets: the
acceptance draws (`Acceptance.draw`, one per decoding slot and step, from their own stream),
which are drawn ahead here (the stream gives the same numbers drawn at once as one step at a
time), so the steps' contexts are known before they run. The leap ends before the first step
whose commit would end a request (its client may send again then) and before the next arrival
where a slot is free, as the quiet leap does.

Pricing follows `epsim.sim.leap`: the target's verify steps in one `CostModel.decode_steps` call
(MLA prices a verify step's queries as decode rows over their contexts, the same arithmetic), the
draft's forwards likewise on its one-layer model, their MoE layers from the pools the one-step
loop would use (the run's stream for the target's rows, the draft's pick stream for its rows,
drawn one at a time in the cycle's order), up to the first step a pool could not serve (no use
left, past its drift window: that step is stepped as usual and draws a new pool). The steps are
then applied as the one-step loop's plans and commits would have: the same bits
(tests/epsim/sim/test_spec_leap.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.sim.quiet import MAX_QUIET, decode_batch, held_steps, quiet_limit, waiting_seen
from epsim.sim.saturation import Applied
from epsim.sim.speculative import verify_counts
from epsim.sim.stepper import nearby

FIRST_DRAW_STEPS = 16    # verify steps drawn ahead in the first block (`_draw_to_end`)


@dataclass(frozen=True, eq=False)
class SpecQuiet:
    """Up to `num` quiet verify steps: `batch` the first's plan batch (before `verify_counts`),
    `context` [num, dp] each step's `decode_context` (the requests' contexts + 1 each),
    `slots` [count] the decoding flat slots, `made` [num, count] the tokens each gets per step,
    `grown` [num, dp] what the steps before each added to each rank's contexts, `stop_s` and
    `held` as `epsim.sim.quiet.Quiet`'s."""

    num: int
    batch: BatchCounts
    context: np.ndarray
    slots: np.ndarray
    made: np.ndarray
    grown: np.ndarray
    stop_s: float
    held: bool


def spec_quiet_steps(sched, now_s: float, max_steps: int) -> SpecQuiet | None:
    """The next quiet verify steps (at most `max_steps`) from `now_s` on, formed without
    changing anything (module doc); None: fewer than two.

    Args:
        sched: the run's `epsim.sim.batching.Scheduler` (the per-slot path, every rank alive).
    """
    state = sched.state
    used = state.used
    if (sched.spec is None or sched.mode == "prefill" or sched.decode_path is not None
            or not used.any()):
        return None
    if sched.mode != "decode" and (sched.prefill_left[used] > 0).any():
        return None
    limit = quiet_limit(sched, now_s, min(max_steps, MAX_QUIET))
    if limit is None:
        return None
    num, held, stop_s = limit
    slots = np.flatnonzero(used)
    made, num = _draw_to_end(sched.spec, num, sched._out_left.reshape(-1)[slots])
    if held:                   # a colocated pool's rule loosens step by step (`held_steps`)
        per_slot = np.zeros((num, used.size), dtype=np.int64)
        per_slot[:, slots] = made[:num]
        num = held_steps(sched, now_s, num, per_slot)
    if num < 2:
        return None
    made = made[:num]
    per_rank = np.zeros((num, used.shape[0]), dtype=np.int64)   # [steps, dp] tokens made
    ranks = slots // used.shape[1]                                  # ascending, as `slots`
    first = np.flatnonzero(np.concatenate([[True], ranks[1:] != ranks[:-1]]))
    per_rank[:, ranks[first]] = np.add.reduceat(made, first, axis=1)  # integers: exact sums
    grown = np.cumsum(per_rank, axis=0) - per_rank
    context = state.context_sum if sched.mode == "decode" else (sched._context * used).sum(axis=1)
    batch = decode_batch(sched, context)
    return SpecQuiet(num, batch, (context + grown) + batch.decode_tokens, slots, made, grown,
                     stop_s, held)


def _draw_to_end(spec, num: int, left: np.ndarray) -> tuple[np.ndarray, int]:
    """(made [n, slots] tokens each decoding slot's verify gives at each of the next n >= the
    steps returned, those steps): `num`, or fewer, up to the step whose commit ends a request
    (it gets all it has left, `left` [slots], and is stepped as usual). Drawn ahead and the
    stream left where it was; in blocks of steps that double, stopping at the block that holds
    the end (each value the bits of one draw of them all: `random` takes one 64-bit output a
    value, and the sums are integers), not `num` steps of every slot each time (up to
    `MAX_QUIET` x 512 draws, most after a request's end)."""
    rng = spec._rng
    saved = rng.bit_generator.state
    blocks, total, done, size = [], np.zeros(left.shape[0], dtype=np.int64), 0, FIRST_DRAW_STEPS
    while done < num:
        size = min(size, num - done)
        block = spec.draw(size * left.shape[0]).reshape(size, left.shape[0])
        blocks.append(block)
        grown = np.cumsum(block, axis=0) + total
        ends = (grown >= left).any(axis=1)
        if ends.any():
            num = done + int(np.argmax(ends))
            break
        total, done, size = grown[-1], done + size, 2 * size
    rng.bit_generator.state = saved
    return (blocks[0] if len(blocks) == 1 else np.concatenate(blocks)), num


def apply_spec_quiet(sched, sq: SpecQuiet, num: int, start_s: np.ndarray,
                     end_s: np.ndarray) -> tuple[Applied, list[float]]:
    """Apply the first `num` steps of `sq` ([num] s `start_s`, `end_s`) to the scheduler: what
    `plan` and `commit` of each would have done. Returns what `apply_quiet` does and the tokens
    each step gave."""
    state = sched.state
    sched._dropped = False
    count = sq.slots.shape[0]
    sched.spec.draw(num * count)        # the commits' draws: `sq.made`'s first num rows
    if sched.kv is not None:   # each plan records the pool's use (none admitted)
        sched.kv.record_full_steps(start_s, sched._kv_used() + sq.grown[:num],
                                   sq.batch.decode_tokens, sq.held)
        sched._kv_held = sq.held
    decoding = state.used.copy()
    made = np.zeros(decoding.shape, dtype=np.int32)
    flat = made.reshape(-1)
    gaps, emitted = [], []
    for i, now in enumerate(end_s.tolist()):               # `Scheduler.commit`, num times
        flat[sq.slots] = sq.made[i]
        gaps.append(state.clock.emit(now, decoding, made))
        sched._context += made
        state.context_sum += made.sum(axis=1)
        sched._out_left -= made
        sched.emitted_tokens = float(made.sum())
        state.output_tokens_done += sched.emitted_tokens
        emitted.append(sched.emitted_tokens)
    if state.clock.opened_s is not None:               # the accept length's window counts
        sched.spec_tokens += int(sq.made[:num].sum())
        sched.spec_verifies += num * count
    num_used = int(state.occupied.sum())
    return Applied(gaps, waiting_seen(sched, start_s), [num_used] * num), emitted


@dataclass(frozen=True, eq=False)
class SpecBlock:
    """Verify steps of one leap: the target's `block`, its MoE costs `moes`, the draft's
    forwards `draft_us` [n] and the steps' times `start_us`, `end_us` [n] (µs)."""

    moes: list
    block: object
    draft_us: np.ndarray
    start_us: np.ndarray
    end_us: np.ndarray
    loads: list


def _draft_forwards(draft, requests: np.ndarray, context: np.ndarray):
    """The draft cycle's decode forward and extend batches over the first step's `context`
    ([dp]), and each step's contexts of the two ([num, dp] from `context` [num, dp]), as
    `DraftPricer.cycle_us` forms them."""
    per = np.where(requests > 0, context / np.maximum(requests, 1), 0.0)
    z = np.zeros_like(requests)
    tokens = requests * draft.topk
    extend = requests * (draft.steps + 1)
    forward = BatchCounts(tokens, tokens * (per[0] + 1), z, z, z, tokens, "decode")
    extended = BatchCounts(extend, extend * (per[0] + 1), z, z, z, requests, "decode")
    return forward, tokens * (per + 1), extended, extend * (per + 1)


def _draft_pool(draft, batch: BatchCounts, which: int, start_s: float):
    """The pool of the cycle's forward `which` over `batch` if it serves one at `start_s` (as
    `DraftPricer._pooled_moe` would find it), else None."""
    cost_model = draft.cost_model
    pool = draft._pools.get((which, batch.phase, cost_model.uses_graph(batch)))
    if (pool is None or pool.used >= pool.max_uses or start_s - pool.t_s >= draft.drift_window_s
            or not nearby(np.asarray(cost_model.ep_tokens(batch), dtype=np.float64), pool.total,
                          pool.most)):
        return None
    return pool


def _picks(draft, decode_pool, extend_pool, num: int) -> tuple[list, list]:
    """The MoE rows `num` cycles take, in the cycle's order (`DraftPricer._pooled_moe`: one
    draw of the pick stream per forward whose pool holds several rows). The draws are taken
    in one call, a bound per draw in the cycle's order: numpy's bounded integers take the
    same generator outputs so as one at a time (tests/epsim/sim/test_stepper.py)."""
    cycle = [decode_pool] * (draft.steps - 1) + [extend_pool]     # the cycle's forwards
    bounds = [len(pool.rows) for pool in cycle if len(pool.rows) > 1]
    drawn = iter(draft._pick.integers(np.tile(bounds, num)).tolist() if bounds and num else ())
    decode, extend = [], []
    for _ in range(num):
        for pool in cycle[:-1]:
            decode.append(pool.rows[next(drawn)] if len(pool.rows) > 1 else pool.rows[0])
        extend.append(extend_pool.rows[next(drawn)] if len(extend_pool.rows) > 1
                      else extend_pool.rows[0])
    return decode, extend


def spec_block(sim, sq: SpecQuiet, start_us: float) -> SpecBlock | None:
    """The first steps of `sq` from `start_us` on, as far as the pools that serve the first
    (the target's and the draft's two), the measurement window's opening, the run's end and
    `sq.stop_s` allow; None: not one (module doc)."""
    stepper, sched, draft = sim.stepper, sim.scheduler, sim.draft
    start_s = start_us * 1e-6
    if start_us >= sim.end_us or start_s >= sched.window_due_s:
        return None
    requests = sq.batch.decode_tokens
    forward, forward_ctx, extended, extend_ctx = _draft_forwards(draft, requests, sq.context)
    verify = verify_counts(sq.batch, sched.draft_tokens)
    if not (sim.cost_model.leaps(verify) and draft.cost_model.leaps(forward)
            and draft.cost_model.leaps(extended)):
        return None
    decode_pool = _draft_pool(draft, forward, 0, start_s) if draft.steps > 1 else None
    extend_pool = _draft_pool(draft, extended, 1, start_s)
    if extend_pool is None or (draft.steps > 1 and decode_pool is None):
        return None
    num = min(sq.num, extend_pool.max_uses - extend_pool.used)
    if decode_pool is not None:
        num = min(num, (decode_pool.max_uses - decode_pool.used) // (draft.steps - 1))
    pool = stepper.pool_for(verify, start_s, sim.step_index)   # as `PoolStepper.price`
    num = min(num, pool.max_uses - pool.used)
    if num < 1:
        return None
    saved = stepper.rng.bit_generator.state, draft._pick.bit_generator.state
    rows = stepper.draw_rows(pool, num)
    decode_moes, extend_moes = _picks(draft, decode_pool, extend_pool, num)
    q, n = sched.draft_tokens, requests
    extra = n * q * (q - 1) / 2.0                              # as `verify_counts`
    moes = [pool.rows[r] for r in rows]
    block = sim.cost_model.decode_steps(verify, sq.context[:num] * q + extra, moes)
    base = draft.overhead_base_us
    draft_us = np.zeros(num)
    if decode_pool is not None:
        per = draft.steps - 1
        decode = draft.cost_model.decode_steps(forward, np.repeat(forward_ctx[:num], per, axis=0),
                                               decode_moes)
        us = (decode.step_us[:num * per] - base).reshape(num, per)
        for j in range(per):
            draft_us = draft_us + us[:, j]
    extend = draft.cost_model.decode_steps(extended, extend_ctx[:num], extend_moes)
    extend_us = extend.step_us[:num] - base
    # as `DraftPricer.cycle_us`: the cycle's host work under the draft's graphs is hidden
    draft_us = draft_us + extend_us - draft.cost_model.scheduler_host.hidden_us(
        draft_us, extend_us, float(requests.max()))
    times = np.cumsum(np.concatenate([[start_us], block.step_us[:num] + draft_us]))
    starts_us, ends_us = times[:-1], times[1:]
    starts_s = starts_us * 1e-6
    kept = ((starts_s - pool.t_s < stepper.drift_window_s)
            & (starts_s - extend_pool.t_s < draft.drift_window_s)
            & (ends_us < sim.end_us) & (starts_s < sched.window_due_s) & (starts_s < sq.stop_s))
    if decode_pool is not None:
        kept &= starts_s - decode_pool.t_s < draft.drift_window_s
    keep = num if kept.all() else int(np.argmin(kept))
    if keep < num:             # the steps past a pool's window or the run's end: undrawn
        stepper.rng.bit_generator.state, draft._pick.bit_generator.state = saved
        if keep == 0:
            return None
        rows = stepper.draw_rows(pool, keep)
        _picks(draft, decode_pool, extend_pool, keep)
        moes = moes[:keep]
    if decode_pool is not None:
        decode_pool.used += keep * (draft.steps - 1)
    extend_pool.used += keep
    draft.num_forwards += keep * draft.steps
    if stepper.fresh_for(pool):
        loads = stepper.fresh_loads(pool, starts_s[:keep].tolist(), sim.step_index)
    else:
        pool.used += keep
        loads = [pool.loads[rows[-1]][None]]
    return SpecBlock(moes, block, draft_us[:keep], starts_us[:keep], ends_us[:keep], loads)
