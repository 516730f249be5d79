"""Saturated decode steps, formed and applied many at once (for the fast engine's leap).

A decode instance is saturated while every rank is alive and each step refills every slot the
last one freed from requests already waiting, none of the refills finishing within the steps
ahead. Then each step's batch is known before the steps ahead of it run: full on every rank,
the contexts following from the requests that end (the decode path's finish queue,
`epsim.sim.decode_path`) and start (the rank queues, `epsim.sim.rank_queues`). `saturated_steps`
forms them without changing anything; `apply_saturated` then applies the first k of them to the
scheduler's state (`epsim.sim.slots`) as k plans and commits would have (the same bits,
tests/epsim/sim/test_leap.py); `epsim.sim.leap` finds their times in between.

Both rest on the decode path's one token per request per step. Admission is bounded by free
slots and, where the KV pool can bind (`epsim.sim.kv_pool`), by the pool: the steps formed end
before the first whose admissions the pool would not take (every rank full after them, so the
rule reads `context_sum + reserve * slots <= capacity`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.sim.decode_path import DecodePath
from epsim.sim.rank_queues import RankQueues
from epsim.sim.slots import FEW_FREE, NO_REQUEST, SlotState
from epsim.sim.token_gaps import StepGaps


@dataclass(frozen=True, eq=False)
class Saturated:
    """Up to `num` saturated decode steps (`saturated_steps`), step i = 0, 1, ...

    Attributes:
        slots, rank, step_of, ids, ends: [admissions] flat slots (on ranks `rank`) refilled,
            at step i, with request ids that end at commit count `ends`; by step, then slot.
        sizes: [steps] admissions per step.
        finishing: per step, the flat slots whose requests end at its commit (sorted).
        fin, fin_step: those slots in one array, and their steps.
        ended, ended_count: [steps, dp] the contexts and the number of the requests that end.
        context_sum: [steps, dp] int64 each rank's context sum as the step runs (without the
            token each slot adds).
    """

    num: int
    slots: np.ndarray
    rank: np.ndarray
    step_of: np.ndarray
    ids: np.ndarray
    ends: np.ndarray
    sizes: np.ndarray
    finishing: list
    fin: np.ndarray
    fin_step: np.ndarray
    ended: np.ndarray
    ended_count: np.ndarray
    context_sum: np.ndarray

    def added_count(self, num: int, num_ranks: int) -> np.ndarray:
        """[dp] requests the first `num` steps admit on each rank."""
        return np.bincount(self.rank[:int(self.sizes[:num].sum())], minlength=num_ranks)


@dataclass(frozen=True, eq=False)
class Applied:
    """What the steps `apply_saturated` applied did, per step `[steps]`: the inter-token gaps
    each closed, the requests waiting after its admissions and running after its commit."""

    gaps: list[StepGaps]
    num_waiting: list[int]
    num_running: list[int]


def saturated_batch(num_ranks: int, max_running: int) -> BatchCounts:
    """The batch of every saturated step (its `decode_context` that of the first): full on
    every rank."""
    tokens = np.full(num_ranks, float(max_running))
    zeros = np.zeros(num_ranks)
    zeros.flags.writeable = False
    return BatchCounts(tokens, tokens, zeros, zeros, zeros, tokens + zeros, "decode", zeros)


def saturated_steps(state: SlotState, path: DecodePath, queues: RankQueues, now_s: float,
                    max_steps: int, kv=None) -> Saturated | None:
    """The next steps (at most `max_steps` >= 1) while the decode instance stays saturated from
    `now_s` on (module doc), formed without changing anything; None: not one. The caller makes
    sure the decode path runs, every arrival goes round-robin over all ranks
    (`RankQueues.one_epoch`) and few slots are free."""
    dp, mr = state.num_ranks, state.max_running
    free = state.free if state.free is not None else np.flatnonzero(~state.used)
    c = path.commits
    finishing = path.finishing.peek(c + 1, c + max_steps)              # [steps] flat slots
    admits = [np.sort(free).astype(np.int64)] + finishing[:-1]        # a step refills the last's
    sizes = np.array([a.shape[0] for a in admits], dtype=np.int64)
    slots = np.concatenate(admits)
    step_of = np.repeat(np.arange(max_steps), sizes)
    rank = slots // mr
    group = step_of * dp + rank                         # non-decreasing: by step, then rank
    counts = np.bincount(group, minlength=max_steps * dp).reshape(max_steps, dp)
    taken = np.cumsum(counts, axis=0)                   # [steps, dp] admitted so far
    within = np.arange(group.shape[0]) - np.searchsorted(group, group, side="left")
    index = (taken - counts + queues.admitted)[step_of, rank] + within
    ids = rank + dp * index                             # `RankQueues.request_ids` on one epoch
    # steps whose admissions the requests waiting now cover
    covered = (taken <= (queues.arrived(now_s) - queues.admitted)).all(axis=1)
    num = int(np.argmin(covered)) if not covered.all() else max_steps
    # ... and in which none of the admitted requests finishes (ids past the queue's cover
    # may name no request: clipped, and their steps are cut anyway)
    known = np.minimum(ids, len(state.output_len) - 1)
    ends = c + step_of + np.maximum(state.output_len[known], 1)
    bound = np.full(max_steps, np.iinfo(np.int64).max)
    np.minimum.at(bound, step_of, ends - c - 1)
    fits = np.minimum.accumulate(bound) >= np.arange(1, max_steps + 1)
    num = min(num, int(np.argmin(fits)) if not fits.all() else max_steps)
    if num == 0:
        return None
    input_len = state.input_len[known]
    added = np.bincount(group, weights=input_len, minlength=max_steps * dp).reshape(
        max_steps, dp).astype(np.int64)
    fin = np.concatenate(finishing)
    fin_step = np.repeat(np.arange(max_steps), [f.shape[0] for f in finishing])
    fin_group = fin_step * dp + fin // mr
    ended = np.bincount(fin_group, weights=path.ctx0.reshape(-1)[fin] + (c + 1 + fin_step),
                        minlength=max_steps * dp).reshape(max_steps, dp).astype(np.int64)
    ended_count = np.bincount(fin_group, minlength=max_steps * dp).reshape(max_steps, dp)
    # context_sum as each step plans: + its admissions; after each commit: + one token per
    # slot (all full), - the contexts of the requests that ended
    change = added.copy()
    change[1:] += mr - ended[:-1]
    context_sum = state.context_sum + np.cumsum(change, axis=0)              # [steps, dp]
    if kv is not None:          # the pool takes every step's admissions (`epsim.sim.kv_pool`)
        fits = (context_sum + kv.reserve * mr <= kv.capacity).all(axis=1)
        num = min(num, int(np.argmin(fits)) if not fits.all() else num)
        if num == 0:
            return None
    return Saturated(num, slots, rank, step_of, ids, ends, sizes, finishing, fin, fin_step,
                     ended, ended_count, context_sum)


def apply_saturated(sat: Saturated, num: int, start_s: np.ndarray, end_s: np.ndarray,
                    state: SlotState, path: DecodePath, queues: RankQueues) -> Applied:
    """Apply the first `num` steps of `sat`, which start at `start_s` and end at `end_s`
    ([num] s), to `state`, `path` and `queues`: what `plan` and `commit` of each would have
    done."""
    mr, c = state.max_running, path.commits
    full = state.num_ranks * mr
    take = int(sat.sizes[:num].sum())
    slots, ids, step_of = sat.slots[:take], sat.ids[:take], sat.step_of[:take]
    fin_take = int(np.searchsorted(sat.fin_step, num, side="left"))
    fin, fin_step = sat.fin[:fin_take], sat.fin_step[:fin_take]
    flat_req = state.slot_req.reshape(-1)
    state.finish_s[flat_req[fin]] = end_s[fin_step]
    state.first_token_s[ids] = end_s[step_of]
    state.fill(slots, ids)
    path.ctx0.reshape(-1)[slots] = state.input_len[ids] - (c + step_of)
    path.end.reshape(-1)[slots] = sat.ends[:take]
    path.finishing.drop_through(c + num)
    path.finishing.add(sat.ends[:take], slots, few=True)
    last = sat.finishing[num - 1]
    flat_req[last] = NO_REQUEST
    state.used.reshape(-1)[last] = False
    state.context_sum[:] = sat.context_sum[num - 1] + mr - sat.ended[num - 1]
    state.occupied[:] = mr - sat.ended_count[num - 1]
    queues.admitted += sat.added_count(num, state.num_ranks)
    num_waiting = (queues.arrived_by(start_s) - int(queues.admitted.sum()) + take
                   - np.cumsum(sat.sizes[:num])).tolist()
    gaps = []
    previous = path.last_commit_s
    for size, now in zip(sat.sizes[:num].tolist(), end_s.tolist()):
        gaps.append(path.gaps(full - size, previous, now))
        previous = now
        state.output_tokens_done += full
    path.last_commit_s = previous
    path.in_flight = None
    path.commits = c + num
    state.free = last.copy() if last.shape[0] <= FEW_FREE else None
    running = (full - sat.ended_count[:num].sum(axis=1)).tolist()
    return Applied(gaps, num_waiting, running)
