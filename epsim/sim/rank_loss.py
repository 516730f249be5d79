"""Elastic EP on the scheduler's side: a failed DP rank loses its requests and frees its slots.

Its scheduler process is gone, so the requests running or queued on it never finish; their
clients resend them as new requests (`Admission.on_lost`, `epsim.sim.retries`). A rank that
fails while a planned step runs loses its part of that step: `commit` applies the plan
restricted to the slots that still hold a request (`without_freed`). Called through
`epsim.sim.batching.Scheduler.drop_rank` (by `epsim.sim.elastic`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from epsim.sim.slots import EMPTY_LEFT, NO_REQUEST, SlotState
from epsim.sim.step_plan import Plan


def drop_rank(sched, rank: int, now_s: float) -> np.ndarray:
    """Rank `rank` of `sched` (a `Scheduler`) loses its requests, running and queued, at `now_s`.

    Returns:
        [lost] int64 request ids (marked in `state.lost`).
    """
    sched.leave_decode_path()
    state = sched.state
    waiting = sched.queues.drop(rank, now_s)
    row = state.slot_req[rank]
    used = np.flatnonzero(row >= 0)
    lost = np.concatenate([row[used].astype(np.int64), waiting])
    state.clock.lose(row[used], sched.slot_tokens()[rank, used], state.clock.last_s[rank, used])
    state.lost[lost] = True
    state.slot_req[rank] = NO_REQUEST
    state.used = state.used.copy()          # the plan of the step in flight keeps its own
    state.used[rank] = False
    state.free = None
    sched.prefill_left[rank] = 0
    sched._context[rank] = 0
    state.context_sum[rank] = 0
    sched._out_left[rank] = EMPTY_LEFT
    state.occupied[rank] = 0
    sched._dropped = True
    sched.on_lost(lost, now_s)          # their clients resend them, or give up
    return lost


def without_freed(plan: Plan, state: SlotState) -> Plan:
    """`plan` restricted to slots of `state` that still hold a request (`drop_rank` freed the
    rest)."""
    live = state.slot_req >= 0
    fresh = plan.fresh_ids
    if fresh is not None:
        fresh = fresh[~state.lost[fresh]]
    alloc = finishing = None
    if plan.prefill_alloc is not None:
        alloc = np.where(live, plan.prefill_alloc, 0)
        finishing = plan.finishing_prefill & live
    return replace(plan, decoding=plan.decoding & live, prefill_alloc=alloc,
                   finishing_prefill=finishing, fresh_ids=fresh)
