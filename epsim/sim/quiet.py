"""Quiet decode steps, formed and applied many at once (for the fast engine's leap).

A run is quiet while every running request decodes (none prefilling), none finishes and none joins:
no rank with a free slot has a request waiting (but those its KV pool holds back) or one arriving
(with a receive interval, `epsim.sim.recv`: received; the steps cross its receives only while
none arrived unreceived, and end before the next arrival, which a receive would take in).
Each step's batch is then the last one's with each rank's contexts grown by its decode tokens, up
to the step before the first request finishes (the one whose commit ends it is stepped as usual,
since a closed loop's client sends again then) and before the next arrival, where a slot is free
(the leap cuts its steps there: their times decide it). Closed loops (`epsim.sim.clients`, the
silicon rows' benchmark clients) spend most of their steps so: their arrivals follow completions,
so the saturated leap (`epsim.sim.saturation`) never applies to them. `quiet_steps` forms the steps
without changing anything; `apply_quiet` applies the first k of them as k plans and commits would
have (the same bits, tests/epsim/sim/test_quiet_leap.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.sim.saturation import Applied
from epsim.sim.token_gaps import uniform_gaps

MAX_QUIET = 1024         # steps formed at once, at most (the leap prices them a pool at a time)


@dataclass(frozen=True, eq=False)
class Quiet:
    """Up to `num` quiet decode steps (`quiet_steps`): their `batch` (the first's contexts),
    `context_sum` [steps, dp] int64 each rank's contexts as the step runs (without the token
    each request adds), `stop_s`: the steps must start before it (the next arrival where a
    slot is free; inf: none can be admitted), and `held`: the KV pool holds waiting requests
    back at every step."""

    num: int
    batch: BatchCounts
    context_sum: np.ndarray
    stop_s: float
    held: bool = False


def quiet_steps(sched, now_s: float, max_steps: int) -> Quiet | None:
    """The next steps (at most `max_steps`) while the run stays quiet from `now_s` on (module
    doc), formed without changing anything; None: fewer than two.

    Args:
        sched: the run's `epsim.sim.batching.Scheduler` (its state, queues and per-slot arrays;
            untyped: the scheduler imports this module), every rank alive, no speculation.
    """
    state, path = sched.state, sched.decode_path
    used = state.used
    if sched.spec is not None or sched.mode == "prefill" or not used.any():
        return None
    if path is None:
        if sched.mode == "decode" or (sched.prefill_left[used] > 0).any():
            return None                 # (the per-slot decode path runs after a failure only)
        left = int(sched._out_left[used].min())
        context = (sched._context * used).sum(axis=1)        # as `plan` sums the decoding slots
    else:
        left = int(path.end[used].min()) - path.commits
        context = state.context_sum
    num = min(max_steps, MAX_QUIET, left - 1)     # the step whose commit ends a request: not here
    limit = quiet_limit(sched, now_s, num)
    if limit is None:
        return None
    num, held, stop_s = limit
    if held:                   # a colocated pool's rule loosens step by step (`held_steps`)
        made = np.broadcast_to(used.reshape(1, -1).astype(np.int64), (num, used.size))
        num = held_steps(sched, now_s, num, made)
        if num < 2:
            return None
    batch = decode_batch(sched, context)
    steps = np.arange(num, dtype=np.int64)[:, None]
    return Quiet(num, batch, context + steps * state.occupied, stop_s, held)


def quiet_limit(sched, now_s: float, num: int) -> tuple[int, bool, float] | None:
    """(`num` steps, or fewer: before the next receive; held, stop_s) of `Quiet` where no
    request joins at `now_s` (module doc); None: none may leap."""
    state, recv = sched.state, sched.recv
    free = sched.max_running - state.occupied
    # with a receive interval (`epsim.sim.recv`) only what it received can join before its next
    # receive: the steps end before that receive while a request arrived unreceived where a
    # slot is free; else its receives take nothing in up to the next arrival (`stop_s`)
    crossing = recv is not None and not np.minimum(sched.queues.waiting(now_s), free).any()
    if recv is not None and not crossing:
        num = min(num, recv.steps_before_receive())
    if num < 2:
        return None
    admit = np.minimum(sched.queues.waiting(now_s if recv is None else recv.received_s), free)
    # requests waiting with a slot free: only while the KV pool holds every one back, which a
    # decode server's pool does at each step ahead too (the contexts grow, the running requests
    # and the queues' heads stay: `KVPool.admissible`); a colocated rank's rule loosens as the
    # running requests near their ends (`KVPool.admissible_ignore_eos`): its callers cut the
    # steps at the first plan that takes a queue head in (`held_steps`)
    held = bool(admit.any())
    # whether any head gets in: a rank takes some of its queue iff it takes the head (the rule
    # only tightens with each request added), so the heads alone are asked
    if held and (sched.kv is None or sched._kv_fit(np.minimum(admit, 1)).any()):
        return None
    stop_s = (sched.queues.next_arrival_s(now_s) if (free > 0).any() and (recv is None or crossing)
              else np.inf)
    return num, held, stop_s


def held_steps(sched, now_s: float, num: int, made: np.ndarray) -> int:
    """Of `num` quiet steps from `now_s` whose plans a colocated rank's KV pool holds requests
    back at, how many come before the first plan that takes a queue head in (`num`: none).

    Args:
        made: [num, ranks * slots] tokens each slot makes at each step (0 in a free slot).
    """
    if sched.kv is None or not sched.kv.colocated or num < 2:
        return num
    recv = sched.recv
    admit = np.minimum(sched.queues.waiting(now_s if recv is None else recv.received_s),
                       sched.max_running - sched.state.occupied)
    return sched._kv_held_steps(admit, np.cumsum(made[:num - 1], axis=0))


def decode_batch(sched, context: np.ndarray) -> BatchCounts:
    """The batch `plan` forms where every used slot decodes one token, over `context` [dp]
    (the contexts' sums per rank)."""
    tokens = sched.state.occupied.astype(np.float64)
    zeros = sched._zeros
    return BatchCounts(tokens, context + tokens, zeros, zeros, zeros, tokens + zeros, "decode",
                       zeros)


def waiting_seen(sched, start_s: np.ndarray) -> list[int]:
    """[num] requests waiting as the plans of quiet steps starting at `start_s` saw them, a
    receive interval's counter advanced as each plan advances it (none took a request in)."""
    queues, recv = sched.queues, sched.recv
    if recv is None:
        return [int(queues.waiting(s).sum()) for s in start_s.tolist()]
    seen = []
    for now in start_s.tolist():
        seen.append(int(queues.waiting(recv.before_step(now, idle=False)).sum()))
        recv.after_plan("decode", 1.0)
    return seen


def apply_quiet(sched, quiet: Quiet, num: int, start_s: np.ndarray, end_s: np.ndarray) -> Applied:
    """Apply the first `num` steps of `quiet`, which start at `start_s` and end at `end_s`
    ([num] s), to the scheduler: what `plan` and `commit` of each would have done."""
    state, path = sched.state, sched.decode_path
    sched._dropped = False
    tokens = quiet.batch.decode_tokens
    if sched.kv is not None:       # each plan records the pool's use (none admitted), which
        # each commit grows by the decode tokens
        steps = np.arange(num, dtype=np.int64)[:, None]
        used = sched._kv_used() + steps * state.occupied
        sched.kv.record_full_steps(start_s, used, tokens, quiet.held)
        sched._kv_held = quiet.held
    num_used = int(state.occupied.sum())
    ends = end_s.tolist()
    gaps = []
    if path is not None:                                   # `DecodePath.commit`, num times
        previous = path.last_commit_s
        for now in ends:
            gaps.append(path.gaps(num_used, previous, now))
            previous = now
            state.output_tokens_done += num_used
        path.last_commit_s = previous
        path.in_flight = None
        path.commits += num
        path.finishing.drop_through(path.commits)
        state.context_sum += state.occupied * num
    else:                                                  # `Scheduler.commit`, num times
        decoding = state.used
        gaps.append(state.clock.emit(ends[0], decoding))   # the first: last tokens vary
        buf = np.empty(num_used)
        for previous, now in zip(ends, ends[1:]):           # then every slot's came together
            gaps.append(uniform_gaps(num_used, previous, now, buf))
        np.copyto(state.clock.last_s, ends[-1], where=decoding)
        sched._context += decoding * np.int32(num)
        sched._out_left -= decoding * np.int32(num)
        state.context_sum += tokens.astype(np.int64) * num
        sched.emitted_tokens = float(tokens.sum())
        for _ in range(num):
            state.output_tokens_done += sched.emitted_tokens
    return Applied(gaps, waiting_seen(sched, start_s), [num_used] * num)
