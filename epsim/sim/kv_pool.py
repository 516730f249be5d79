"""Each DP rank's KV-cache pool during a run: what a rank may admit, and when the pool binds.

The pool holds `max_total_num_tokens` tokens (`epsim.sim.memory`). A running request holds its
context (prompt and tokens so far; a colocated rank's admitted prompt counts whole from
admission, the chunks not yet prefilled included). A rank admits the requests at the head of its
queue, in order, first come first served: a request that does not fit waits and blocks the ones
behind it. What fits depends on the server:

- a P/D decode (or prefill) server (`admissible`): while

      used + their prompts + num_reserved_decode_tokens * (running after admission) <= capacity

  -- SGLang's decode scheduler (python/sglang/srt/disaggregation/decode.py,
  `_allocatable_tokens`: the free pool less `num_reserved_decode_tokens` per running,
  transferring and waiting request).
- a colocated (agg) rank (`admissible_ignore_eos`): SGLang's `PrefillAdder.add_one_req` sends a
  request sent with `ignore_eos` to a server without a radix cache (every InferenceX agg run:
  its harness's `--ignore-eos`, its scripts' `--disable-radix-cache`) to
  `add_one_req_ignore_eos` (managers/schedule_policy.py, SGLang 0.5.9), which admits it only if,
  with it and the requests admitted before it in the same batch, the pool never runs out while
  every request runs to its whole output: each request's (tokens left, tokens held), sorted by
  tokens left, must leave for the i-th of n

      free - candidates' prompts + held by the i shorter ones - left_i * (n - i) > (n - i)

  (`IGNORE_EOS_RESERVE_TOKENS` = 1 a request; an `ignore_eos` request's ratio is 1.0). epsim's
  requests always run to their drawn output length, as `ignore_eos` ones do. Left out: its
  early exit on `rem_total_tokens` (the running requests' `new_token_ratio` share, 0.7
  decaying to 0.098, of their remaining outputs, looser than the rule above once decayed), and
  SGLang's rule with a radix cache (`add_one_req`: `new_token_ratio` reserves), which no row
  here ran; and its insertion's slip (`add_req_state(insert_sort=True)` puts a request left
  longer than all before the last one, not after it: a stricter walk by one step).

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

# tokens SGLang keeps free per request past the last one's whole output
# (`schedule_policy.IGNORE_EOS_RESERVE_TOKENS`, 0.5.9)
IGNORE_EOS_RESERVE_TOKENS = 1


class KVPool:
    """One pool size for every DP rank, and its statistics over the measurement window.

    Args:
        capacity_tokens: `max_total_num_tokens` of one rank.
        reserve_tokens: `num_reserved_decode_tokens`.
        colocated: an agg rank, which admits by `admissible_ignore_eos` (module doc); False:
            by `admissible`.
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
                 max_context: float, window_start_s: float, colocated: bool = False):
        self.capacity = int(capacity_tokens)
        self.reserve = int(reserve_tokens)
        self.colocated = colocated
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

    def admissible_ignore_eos(self, admit: np.ndarray, used: np.ndarray, rows: np.ndarray,
                              prompts: np.ndarray, outputs: np.ndarray, slot_left: np.ndarray,
                              slot_held: np.ndarray) -> np.ndarray:
        """[ranks] how many of the `admit` ([ranks]) queue-head requests each colocated rank
        takes by SGLang's `add_one_req_ignore_eos` (module doc).

        Adding a request never loosens the rule (it takes free tokens and adds a request to
        finish), so the most that fit are found by bisection over the queue's head: the head
        alone is asked first (a pool that binds keeps it out at most plans: one probe, not a
        bisection's ~8 over a long queue), then the whole queue, then the bisection between.

        Args:
            used: [ranks] tokens the pool holds.
            rows, prompts, outputs: [candidates] each candidate's rank, prompt and output tokens;
                by rank, then queue order.
            slot_left, slot_held: [ranks, slots] each running request's output tokens left and
                tokens held (prompt, all of it once admitted, and outputs so far); 0 and 0 in
                a free slot.
        """
        fit = np.zeros_like(admit)
        starts = np.concatenate([[0], np.cumsum(admit)])
        for rank in np.flatnonzero(admit):
            lo, hi = starts[rank], starts[rank + 1]
            running = slot_left[rank] > 0
            walk = _SortedWalk(self.capacity, float(used[rank]), slot_left[rank][running],
                               slot_held[rank][running])

            def fits(k: int) -> bool:
                return walk.fits(prompts[lo:lo + k], outputs[lo:lo + k])

            num = int(hi - lo)
            if not fits(1):                              # the usual answer of a binding pool
                continue
            if num == 1 or fits(num):
                fit[rank] = num
                continue
            good, bad = 1, num                           # fits(good); bad: the first known not to
            while bad - good > 1:
                mid = (good + bad) // 2
                good, bad = (mid, bad) if fits(mid) else (good, mid)
            fit[rank] = good
        return fit

    def fits_ignore_eos(self, used: float | np.ndarray, left: np.ndarray, held: np.ndarray,
                        prompts: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """Whether one rank's pool takes the candidates, in each of several states of its
        running requests (`add_one_req_ignore_eos`'s walk, module doc).

        Args:
            used: the tokens the pool holds, one or [states].
            left, held: [states, running] each running request's output tokens left and
                tokens held.
            prompts, outputs: [candidates] the requests to admit with them, in queue order.
        Returns:
            [states] bool.
        """
        if prompts.shape[0] == 1:
            return self._one_fits(used, left, held, float(prompts[0]), float(outputs[0]))
        return self._merged_fits(used, left, held, prompts, outputs)

    def _merged_fits(self, used: float | np.ndarray, left: np.ndarray, held: np.ndarray,
                     prompts: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """`fits_ignore_eos` by SGLang's walk itself: the candidates merged into the running
        requests, sorted, and every place's rule checked."""
        num_states = left.shape[0]
        # SGLang sorts by tokens left, stably, the newest candidate first among equals (its
        # first candidate heads the running requests; later ones insert before their equals)
        cand_left = np.broadcast_to(outputs[::-1].astype(np.float64), (num_states, len(outputs)))
        cand_held = np.broadcast_to(prompts[::-1].astype(np.float64), (num_states, len(prompts)))
        tokens_left = np.concatenate([cand_left, left.astype(np.float64)], axis=1)
        tokens_held = np.concatenate([cand_held, held.astype(np.float64)], axis=1)
        order = np.argsort(tokens_left, axis=1, kind="stable")
        tokens_left = np.take_along_axis(tokens_left, order, axis=1)
        tokens_held = np.take_along_axis(tokens_held, order, axis=1)
        after = np.arange(tokens_left.shape[1], 0, -1)                   # n - i
        freed = np.cumsum(tokens_held, axis=1) - tokens_held            # by the shorter ones
        free = self.capacity - np.asarray(used, dtype=np.float64) - float(prompts.sum())
        room = np.reshape(free, (-1, 1)) + freed - tokens_left * after
        return (room > IGNORE_EOS_RESERVE_TOKENS * after).all(axis=1)

    def _one_fits(self, used: float | np.ndarray, left: np.ndarray, held: np.ndarray,
                  prompt: float, output: float) -> np.ndarray:
        """`fits_ignore_eos` of one candidate ([states] bool): the running requests sorted per
        state and the candidate's place counted, not merged in (`_SortedWalk._fits_one`'s
        terms, whole tokens: the same answers)."""
        reserve = float(IGNORE_EOS_RESERVE_TOKENS)
        left, held = left.astype(np.float64), held.astype(np.float64)
        order = np.argsort(left, axis=1, kind="stable")
        left = np.take_along_axis(left, order, axis=1)                 # [states, running]
        held = np.take_along_axis(held, order, axis=1)
        num = left.shape[1]
        free = np.reshape(self.capacity - np.asarray(used, dtype=np.float64), (-1, 1))
        base = free + (np.cumsum(held, axis=1) - held) - (left + reserve) * np.arange(num, 0, -1)
        before = left < output                                  # the candidate's place: after these
        at = before.sum(axis=1)
        running = np.where(before, base - left - reserve - prompt, base) > 0.0
        held_before = np.where(before, held, 0.0).sum(axis=1)
        own = free[:, 0] + held_before - (output + reserve) * (num - at + 1) - prompt > 0.0
        return running.all(axis=1) & own

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


class _SortedWalk:
    """`KVPool.fits_ignore_eos` of one rank in one state, its running requests sorted once for
    the several candidate sets a bisection asks about (`admissible_ignore_eos`): each set is
    merged into them where the stable sort of [candidates newest first, running] puts it
    (a candidate before the running requests it ties with), the same order, so the same sums
    and the same answer, without sorting the running requests again at every probe.

    Args:
        capacity, used: the pool's tokens and those it holds.
        left, held: [running] each running request's output tokens left and tokens held.
    """

    def __init__(self, capacity: int, used: float, left: np.ndarray, held: np.ndarray):
        self.capacity, self.used = capacity, used
        left, held = left.astype(np.float64), held.astype(np.float64)
        order = np.argsort(left, kind="stable")
        self.left, self.held = left[order], held[order]
        self._bounds = None

    def fits(self, prompts: np.ndarray, outputs: np.ndarray) -> bool:
        """`fits_ignore_eos(used, left[None], held[None], prompts, outputs)[0]`."""
        if prompts.shape[0] == 1:
            return self._fits_one(float(prompts[0]), float(outputs[0]))
        cand_left = outputs[::-1].astype(np.float64)
        cand_held = prompts[::-1].astype(np.float64)
        order = np.argsort(cand_left, kind="stable")
        cand_left, cand_held = cand_left[order], cand_held[order]
        num = cand_left.shape[0] + self.left.shape[0]
        at = np.searchsorted(self.left, cand_left, side="left") + np.arange(cand_left.shape[0])
        rest = np.ones(num, dtype=bool)
        rest[at] = False
        tokens_left, tokens_held = np.empty(num), np.empty(num)
        tokens_left[at], tokens_left[rest] = cand_left, self.left
        tokens_held[at], tokens_held[rest] = cand_held, self.held
        after = np.arange(num, 0, -1)                                  # n - i
        freed = np.cumsum(tokens_held) - tokens_held                  # by the shorter ones
        free = self.capacity - np.asarray(self.used, dtype=np.float64) - float(prompts.sum())
        room = free + freed - tokens_left * after
        return bool((room > IGNORE_EOS_RESERVE_TOKENS * after).all())

    def _fits_one(self, prompt: float, output: float) -> bool:
        """`fits` of one candidate in O(log running) from bounds formed once per state.

        With the candidate (left c, held its prompt p) at `a` (the running requests left
        shorter than c before it), the walk's rule `free + freed_i - left_i (n - i) > r (n - i)`
        (r = `IGNORE_EOS_RESERVE_TOKENS`) reads, with `base_j = capacity - used + held_<j -
        (left_j + r)(running - j)` of the running requests alone (j in their sorted order,
        held_<j the held tokens of those before j):

            running j >= a:  base_j > 0   (the candidate's prompt is both freed and taken)
            running j < a:   base_j - (left_j + r) - p > 0
            the candidate:   capacity - used + held_<a - (c + r)(running - a + 1) - p > 0

        so the suffix minimum of `base` and the prefix minimum of `base - left - r` answer it.
        Every term is a whole number of tokens (below 2^53 in float64), so the sums are exact
        in any order: the same answer as the walk's (tests/epsim/sim/test_kv_pool.py)."""
        reserve = float(IGNORE_EOS_RESERVE_TOKENS)
        if self._bounds is None:
            num = self.left.shape[0]
            held_before = np.concatenate([[0.0], np.cumsum(self.held)])      # [running + 1]
            free = self.capacity - float(self.used)
            base = free + held_before[:-1] - (self.left + reserve) * np.arange(num, 0, -1)
            suffix_min = np.concatenate([np.minimum.accumulate(base[::-1])[::-1], [np.inf]])
            prefix_min = np.concatenate([[np.inf],
                                         np.minimum.accumulate(base - self.left - reserve)])
            self._bounds = (free, held_before, suffix_min, prefix_min)
        free, held_before, suffix_min, prefix_min = self._bounds
        at = int(self.left.searchsorted(output, side="left"))
        num = self.left.shape[0]
        return bool(suffix_min[at] > 0.0 and prefix_min[at] - prompt > 0.0
                    and free + held_before[at] - (output + reserve) * (num - at + 1) - prompt > 0.0)
