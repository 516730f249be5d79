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


def place_initial(sched, init: Requests, progress: np.ndarray | None) -> None:
    """Put `init` in the first slots of `sched` (a `Scheduler`), k per rank, `progress` ([k *
    ranks] int64, None: 0) output tokens done, their last token at t=0.

    Raises:
        ValueError: `len(init)` not `num_ranks * k` with k <= `max_running`.
    """
    num_ranks = sched.num_ranks
    per_rank = len(init) // num_ranks
    if per_rank * num_ranks != len(init) or per_rank > sched.max_running:
        raise ValueError(f"initial requests ({len(init)}) must be num_ranks x k with k <= "
                         f"max_running_requests ({sched.max_running})")
    state = sched.state
    done = np.zeros(len(init), dtype=np.int64) if progress is None else np.asarray(progress, np.int64)
    first = sched.initial_start
    done = np.minimum(done, state.output_len[first:first + len(init)] - 1)
    ids = first + np.arange(len(init)).reshape(num_ranks, per_rank)
    state.slot_req[:, :per_rank] = ids
    state.used[:, :per_rank] = True
    sched._context[:, :per_rank] = (init.input_len + done).reshape(num_ranks, per_rank)
    state.context_sum[:] = sched._context.sum(axis=1)
    sched._out_left[:, :per_rank] = (state.output_len[ids.ravel()] - done).reshape(
        num_ranks, per_rank)
    state.occupied[:] = per_rank
    state.clock.start_at_zero((slice(None), slice(None, per_rank)))   # last token at t=0
    if sched.decode_path is not None:
        slots = np.flatnonzero(state.used)
        sched.decode_path.start(slots, sched._context.reshape(-1)[slots],
                                sched._out_left.reshape(-1)[slots])
