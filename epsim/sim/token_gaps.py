"""Inter-token gaps as a user feels them: when each request got each token, stalls included.

The scheduler's slots `[ranks, slots]` carry the time of their request's last token
(`last_s`, NaN before the first one). Each step that emits tokens reports the gaps it closed
(count, sum, max: every decoding request's `now - last token`), which is the inter-token
latency (ITL) of that step; a stall (EPLB stop-the-world, a failure's reload) lies inside the
next gap of every request that lived through it. At the end `window_gaps` gives, per request,
how many gaps it closed inside the measurement window and how long they took in total, so TPOT
counts every request active in the window, finished or not.

Requests running at t=0 (`initial`) are taken to have had their last token at t=0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.fast_init import fast_init


@fast_init
@dataclass(frozen=True)
class StepGaps:
    """The inter-token gaps one step closed: `count` requests, `mean_s` and `max_s` over them
    (0 when `count` is 0); with speculative decoding, `by_tokens` [k] how many of them got
    k = 1, 2, ... tokens (None: one each)."""

    count: int
    mean_s: float
    max_s: float
    by_tokens: np.ndarray | None = None


NO_GAPS = StepGaps(0, 0.0, 0.0)


def uniform_gaps(count: int, last_s: float, now_s: float, buf: np.ndarray) -> StepGaps:
    """The gaps closed at `now_s` by `count` slots whose last token came at `last_s`, summed
    as `TokenClock.emit` sums the gathered times (the same bits); `buf`: scratch of at least
    `count` float64."""
    if not count:
        return NO_GAPS
    last = buf[:count]
    last.fill(last_s)
    return StepGaps(count, (count * now_s - float(last.sum())) / count, now_s - last_s)


@dataclass(frozen=True, eq=False)
class WindowGaps:
    """Per request `[requests]`: `count` inter-token gaps that ended inside the window
    (int64) and their total `span_s` (float64 s); TPOT = span_s / count where count >= 1."""

    count: np.ndarray
    span_s: np.ndarray
    start_s: float


class TokenClock:
    """Times of last tokens per slot and, from the window start on, per-request gap counts.

    Args:
        shape: (ranks, slots) of the scheduler.
        num_requests: requests of the run (arrivals, then initial ones).
        window_start_s: the measurement window opens at the first step at or after it.
    """

    def __init__(self, shape: tuple[int, int], num_requests: int, window_start_s: float):
        self.last_s = np.full(shape, np.nan)                 # [ranks, slots]
        self._timed = np.zeros(shape, dtype=bool)           # ~isnan(last_s), kept as it changes
        self.window_start_s = window_start_s
        self.opened_s: float | None = None
        self.anchor_tokens = np.zeros(num_requests, dtype=np.int64)   # tokens at window start
        self.anchor_s = np.full(num_requests, np.nan)                 # last token before it
        self.end_tokens = np.zeros(num_requests, dtype=np.int64)      # of lost requests
        self.end_s = np.full(num_requests, np.nan)

    def grow(self, extra: int) -> None:
        """`extra` more requests (a closed loop's sends, `SlotState.add_requests`)."""
        self.anchor_tokens = np.concatenate([self.anchor_tokens, np.zeros(extra, np.int64)])
        self.anchor_s = np.concatenate([self.anchor_s, np.full(extra, np.nan)])
        self.end_tokens = np.concatenate([self.end_tokens, np.zeros(extra, np.int64)])
        self.end_s = np.concatenate([self.end_s, np.full(extra, np.nan)])

    def admit(self, flat_slots: np.ndarray) -> None:
        self.last_s.reshape(-1)[flat_slots] = np.nan
        self._timed.reshape(-1)[flat_slots] = False

    def start_at_zero(self, index) -> None:
        """Slots `index` (of `[ranks, slots]`) had their last token at t=0 (initial requests)."""
        self.last_s[index] = 0.0
        self._timed[index] = True

    def stamp(self, slots: np.ndarray, now_s: float) -> None:
        """Slots `slots` ([ranks, slots] bool) had their last token at `now_s` (times a
        caller kept in bulk: the scheduler's decode path)."""
        self.last_s[slots] = now_s
        self._timed |= slots

    def open_if_due(self, now_s: float, slot_req: np.ndarray, tokens: np.ndarray) -> None:
        """Open the window at the first step at or after `window_start_s`: remember each
        running request's token count and last token time (`tokens`: [ranks, slots])."""
        if self.opened_s is not None or now_s < self.window_start_s:
            return
        self.opened_s = now_s
        used = slot_req >= 0
        ids = slot_req[used]
        self.anchor_tokens[ids] = tokens[used]
        self.anchor_s[ids] = self.last_s[used]

    def emit(self, now_s: float, emitting: np.ndarray, tokens: np.ndarray | None = None) -> StepGaps:
        """Slots `emitting` ([ranks, slots] bool) got a token at `now_s` (`tokens` [ranks,
        slots]: k each, a speculative step): the gaps they close."""
        previous = self.last_s
        had = emitting & self._timed
        gaps = NO_GAPS
        last = previous[had]                                   # [count] one boolean gather
        if last.shape[0]:
            count = last.shape[0]
            by_tokens = None if tokens is None else np.bincount(tokens[had])[1:]
            gaps = StepGaps(count, (count * now_s - float(last.sum())) / count,
                            now_s - float(last.min()), by_tokens)
        np.copyto(previous, now_s, where=emitting)
        self._timed |= emitting
        return gaps

    def lose(self, ids: np.ndarray, tokens: np.ndarray, last_s: np.ndarray) -> None:
        """Requests `ids` were lost with `tokens` produced, the last at `last_s`."""
        self.end_tokens[ids] = tokens
        self.end_s[ids] = last_s

    def window_gaps(self, slot_req: np.ndarray, tokens: np.ndarray, output_len: np.ndarray,
                    first_token_s: np.ndarray, finish_s: np.ndarray, lost: np.ndarray) -> WindowGaps:
        """Per request: gaps that ended in the window and their total time (see `WindowGaps`).

        Args:
            slot_req, tokens: [ranks, slots] request ids (-1 free) and tokens produced so far.
            output_len, first_token_s, finish_s, lost: [requests].
        """
        num = output_len.shape[0]
        end_tokens = np.where(lost, self.end_tokens, 0)
        end_s = np.where(lost, self.end_s, np.nan)
        done = np.isfinite(finish_s)
        end_tokens = np.where(done, output_len, end_tokens)
        end_s = np.where(done, finish_s, end_s)
        used = slot_req >= 0
        end_tokens[slot_req[used]] = tokens[used]
        end_s[slot_req[used]] = self.last_s[used]
        start = self.opened_s if self.opened_s is not None else np.inf
        anchored = np.isfinite(self.anchor_s)
        from_tokens = np.where(anchored, self.anchor_tokens, 1)
        from_s = np.where(anchored, self.anchor_s, first_token_s)
        count = end_tokens - from_tokens
        span = end_s - from_s
        active = (count >= 1) & np.isfinite(span) & (end_s >= start)
        return WindowGaps(np.where(active, count, 0).astype(np.int64),
                          np.where(active, span, 0.0), float(start if num else 0.0))
