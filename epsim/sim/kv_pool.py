"""Each DP rank's KV-cache pool during a run: what a rank may admit, and when the pool binds.

The pool holds `max_total_num_tokens` tokens (`epsim.sim.memory`). A running request holds its
context (prompt and tokens so far; a colocated rank's admitted prompt counts whole from
admission, the chunks not yet prefilled included). A rank admits the requests at the head of its
queue, in order, while

    used + their prompts + num_reserved_decode_tokens * (running after admission) <= capacity

-- SGLang's decode scheduler (python/sglang/srt/disaggregation/decode.py, `_allocatable_tokens`:
the free pool less `num_reserved_decode_tokens` per running, transferring and waiting request;
the queue stops at the first request that does not fit). A request that does not fit waits,
first come first served, and blocks the ones behind it. SGLang's colocated scheduler
(`PrefillAdder`) reserves instead a share (`new_token_ratio`, decaying from 0.7 to 0.14 of it)
of every running request's remaining output -- and, for requests sent with `ignore_eos` to a
server without a radix cache (every InferenceX agg run: `--ignore-eos`, `--disable-radix-cache`),
all of it: `add_one_req_ignore_eos` admits a request only if, finishing the running ones
shortest-left first, the pool never runs out (`managers/schedule_policy.py`, SGLang 0.5.9). A
colocated rank here applies the decode rule.

When decoding outgrows the pool anyway (each running request adds a token per step), SGLang
retracts requests (`retract_decode`: the ones with the fewest output tokens go back to the
queue). That is not modelled: such a step is counted (`overflow_steps`) and runs as if the pool
were larger.

A pool that cannot bind -- it holds `max_running_requests` requests at the longest context the
workload can draw, with their reserves -- is `active` False, and the scheduler skips every check.
"""

from __future__ import annotations

import numpy as np

from epsim.sim.arrivals import Requests


class KVPool:
    """One pool size for every DP rank, and its statistics over the measurement window.

    Args:
        capacity_tokens: `max_total_num_tokens` of one rank.
        reserve_tokens: `num_reserved_decode_tokens`.
        max_running: slots per rank.
        max_context: the longest prompt + output the workload can draw (tokens).
        window_start_s: statistics count the plans from this time on.
    Attributes:
        active: whether the pool can bind at all (module doc).
        plans, held, overflow: plans in the window; those in which the pool (not the slots)
            kept a waiting request out; those whose decode tokens overran the pool.
        peak_used_frac: the most any rank's pool held, over capacity, at a plan in the window.
    """

    def __init__(self, capacity_tokens: int, reserve_tokens: int, max_running: int,
                 max_context: float, window_start_s: float):
        self.capacity = int(capacity_tokens)
        self.reserve = int(reserve_tokens)
        self.active = self.capacity < max_running * (max_context + self.reserve)
        self.window_start_s = window_start_s
        self.plans = self.held = self.overflow = 0
        self.peak_used_frac = 0.0

    def admissible(self, admit: np.ndarray, used: np.ndarray, occupied: np.ndarray,
                   rows: np.ndarray, within: np.ndarray, prompts: np.ndarray) -> np.ndarray:
        """[ranks] how many of the `admit` ([ranks]) queue-head requests each rank can take.

        Args:
            used: [ranks] tokens the pool holds; occupied: [ranks] running requests.
            rows, within, prompts: [candidates] each candidate's rank, place in its rank's
                queue (0-based, in queue order) and prompt tokens; by rank, then place.
        """
        cum = np.cumsum(prompts)                            # over all candidates, by rank
        starts = np.searchsorted(rows, rows, side="left")   # each candidate's rank's first
        before = np.where(starts > 0, cum[starts - 1], 0)
        need = cum - before + self.reserve * (occupied[rows] + within + 1)
        fails = need > self.capacity - used[rows]
        fit = admit.copy()
        np.minimum.at(fit, rows[fails], within[fails])      # stop at the first that does not fit
        return fit

    def record(self, now_s: float, used: np.ndarray, decode_tokens: np.ndarray,
               held: bool) -> None:
        """One plan's pool: `used` [ranks] after admission, the decode tokens it writes, and
        whether it held a waiting request back."""
        if now_s < self.window_start_s:
            return
        self.plans += 1
        self.held += bool(held)
        self.overflow += bool((used + decode_tokens > self.capacity).any())
        self.peak_used_frac = max(self.peak_used_frac, float(used.max()) / self.capacity)

    def record_full_steps(self, start_s: np.ndarray, used: np.ndarray,
                          decode_tokens: float | np.ndarray, held: bool = False) -> None:
        """`record` of decode steps applied at once (`epsim.sim.saturation`, `epsim.sim.quiet`):
        `used` [steps, ranks] as each ran, batches of `decode_tokens` per rank (or [ranks]),
        each holding a waiting request back or not (`held`)."""
        counted = start_s >= self.window_start_s
        if not counted.any():
            return
        used = used[counted]
        self.plans += int(counted.sum())
        self.held += int(counted.sum()) if held else 0
        self.overflow += int((used + decode_tokens > self.capacity).any(axis=1).sum())
        self.peak_used_frac = max(self.peak_used_frac, float(used.max()) / self.capacity)

    def summary(self) -> dict:
        """The pool's statistics for `summary.json` (`kv_cache`)."""
        plans = max(self.plans, 1)
        return {"max_total_num_tokens": self.capacity, "num_reserved_decode_tokens": self.reserve,
                "can_bind": self.active, "held_frac": self.held / plans,
                "overflow_steps": self.overflow, "peak_used_frac": self.peak_used_frac}


def longest_context(workload, requests: Requests, initial: Requests | None) -> float:
    """The longest prompt + output of the run (tokens), which bounds what the pool must hold:
    of its drawn `requests` and the `initial` ones running at t=0, or what a closed loop's
    length specs (`workload.input_len`, `output_len`) can draw."""
    w = workload
    if w.arrivals.kind == "concurrency":
        return float(w.input_len.max_tokens + w.output_len.max_tokens)
    longest = 0.0
    for reqs in (requests, initial):
        if reqs is not None and len(reqs):
            longest = max(longest, float((reqs.input_len + reqs.output_len).max()))
    return longest
