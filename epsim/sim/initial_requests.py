"""The requests already decoding at t=0: how many, their lengths, and their slots.

A run may start from a steady state (`deployment.initial_running_per_rank`, "steady" resolved
by `epsim.sim.steady`): each DP rank holds that many requests part-way through their output,
so that completions are spread out from the start. `initial_requests` draws them (the
engine, `epsim.sim.engine.Simulation`); `place_initial` puts them in the scheduler's slots
(`epsim.sim.batching.Scheduler`).
"""

from __future__ import annotations

import numpy as np

from epsim.sim.arrivals import Requests, sample_lengths
from epsim.sim.memory import kv_running_limit


def initial_requests(workload, reserved_decode_tokens: int, kv_tokens: int, per_rank_wanted: int,
                     num_ranks: int, max_running: int,
                     seed: int) -> tuple[Requests | None, np.ndarray | None]:
    """Requests decoding at t=0, part-way done so that completions are spread out as in a
    steady state.

    Args:
        workload: the scenario's `workload` (lengths; a closed loop's clients bound the count).
        reserved_decode_tokens: `deployment.num_reserved_decode_tokens`.
        kv_tokens: each rank's KV pool (`max_total_num_tokens`, tokens).
        per_rank_wanted: requests per rank the scenario asks for (`initial_running_per_rank`).
        num_ranks: DP ranks; max_running: slots per rank; seed: the run's seed.
    Returns:
        (`num_ranks * k` requests, [num_ranks * k] int64 output tokens each has already made),
        or (None, None) where k is 0.
    """
    w = workload
    # at most what the slots and the KV pool hold at a part-way context (`epsim.sim.memory`)
    kv_limit = kv_running_limit(kv_tokens, w.input_len.mean_tokens + w.output_len.mean_tokens / 2,
                                reserved_decode_tokens)
    per_rank = min(per_rank_wanted, max_running, kv_limit)
    if w.arrivals.kind == "concurrency":     # each one client's request
        per_rank = min(per_rank, w.arrivals.clients // num_ranks)
    if per_rank == 0:
        return None, None
    rng = np.random.default_rng([seed, 0x1417])
    num = per_rank * num_ranks
    input_len = sample_lengths(w.input_len, num, rng)
    output_len = sample_lengths(w.output_len, num, rng)
    done = np.floor(rng.random(num) * output_len).astype(np.int64)   # tokens already made
    return Requests(np.zeros(num), input_len, output_len), done


def place_initial(sched, init: Requests, progress: np.ndarray | None,
                  ranks: np.ndarray | None = None) -> None:
    """Put `init` in the first slots of `sched` (a `Scheduler`), `progress` ([n] int64, None: 0)
    output tokens done, their last token at t=0: k per rank in order, or each on its own rank
    `ranks` ([n] int64; a server that routes by bootstrap room, `initial_ranks`).

    Raises:
        ValueError: `len(init)` not `num_ranks * k` (no `ranks`), or a rank given more than
            `max_running`.
    """
    num_ranks, num = sched.num_ranks, len(init)
    if ranks is None:
        per_rank = num // num_ranks
        if per_rank * num_ranks != num or per_rank > sched.max_running:
            raise ValueError(f"initial requests ({num}) must be num_ranks x k with k <= "
                             f"max_running_requests ({sched.max_running})")
        ranks = np.repeat(np.arange(num_ranks), per_rank)
    counts = np.bincount(ranks, minlength=num_ranks)
    if counts.max(initial=0) > sched.max_running:
        raise ValueError(f"initial requests on one rank ({counts.max()}) must be at most "
                         f"max_running_requests ({sched.max_running})")
    order = np.argsort(ranks, kind="stable")                     # grouped by rank, in order
    rows = ranks[order]
    cols = np.arange(num) - np.repeat(np.cumsum(counts) - counts, counts)   # slot in its rank
    state = sched.state
    done = np.zeros(num, dtype=np.int64) if progress is None else np.asarray(progress, np.int64)
    first = sched.initial_start
    done = np.minimum(done, state.output_len[first:first + num] - 1)
    ids = first + order
    state.slot_req[rows, cols] = ids
    state.used[rows, cols] = True
    sched._context[rows, cols] = init.input_len[order] + done[order]
    state.context_sum[:] = sched._context.sum(axis=1)
    sched._out_left[rows, cols] = state.output_len[ids] - done[order]
    state.occupied[:] = counts
    state.clock.start_at_zero((rows, cols))                       # last token at t=0
    if sched.decode_path is not None:
        slots = np.flatnonzero(state.used)
        sched.decode_path.start(slots, sched._context.reshape(-1)[slots],
                                sched._out_left.reshape(-1)[slots])


def initial_ranks(num: int, num_ranks: int, max_running: int,
                  rng: np.random.Generator) -> np.ndarray:
    """Each of `num` requests running at t=0 on a uniformly drawn DP rank, as a server that
    routes by bootstrap room holds them in a steady state (`epsim.sim.rank_queues`): a
    multinomial spread, not k each. A rank drawn more than `max_running` times passes the
    excess to the emptiest ranks (its own queue would hold them; the start is a steady state).

    Returns:
        [num] int64, each request's rank.
    """
    if num > num_ranks * max_running:
        raise ValueError(f"initial requests ({num}) must fit num_ranks x max_running_requests "
                         f"({num_ranks} x {max_running})")
    ranks = rng.integers(0, num_ranks, num)
    counts = np.bincount(ranks, minlength=num_ranks)
    for i in np.flatnonzero(counts[ranks] > max_running)[::-1]:   # latest drawn first
        if counts[ranks[i]] > max_running:
            counts[ranks[i]] -= 1
            ranks[i] = int(np.argmin(counts))
            counts[ranks[i]] += 1
    return ranks
