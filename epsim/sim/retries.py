"""A client's resends of the requests a failed DP rank lost (elastic EP, `workload.retry`).

SGLang never answers a request whose DP rank died: nothing in the server resends it or returns
an error (`epsim.spec.workload.RetrySpec` cites the lines), so its client finds out only when
its own timeout, counted from its send, runs out. It then resends the same request (prompt and
output length) after a backoff, up to `max_attempts` sends in all, or gives up. A resend is a
new request row (`SlotState.add_requests`) whose arrival time is the first send's, so its TTFT
and latency count from the first send and the failure shows in them; the queues route it when
it is sent (`RankQueues.add`), round-robin over the live ranks as any arrival.

The requests running at t=0 (`initial_running_per_rank`) count as sent at t=0. Only lost
requests time out here: a live rank's request that waits longer than the timeout is served,
not resent (a client with a timeout shorter than its queueing would resend it too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BACKOFF_GROWTH = 1.5      # sgl-router's RetryConfig::default backoff_multiplier (core/retry.rs)


@dataclass(frozen=True)
class Resends:
    """What the clients of some lost requests do, `[lost]` each.

    Attributes:
        lost_ids: int64 the lost requests.
        resend: bool, sent again (else given up).
        at_s: float64 the resend's send time, or the time the client gives up (s).
        attempt: int64 the number of the send that was lost (1: the first).
    """

    lost_ids: np.ndarray
    resend: np.ndarray
    at_s: np.ndarray
    attempt: np.ndarray


def resend_times(sent_s: np.ndarray, attempt: np.ndarray, now_s: float, timeout_s: float,
                 max_attempts: int, backoff_s: float) -> tuple[np.ndarray, np.ndarray]:
    """When the clients of lost sends notice and what they do.

    The client waits out its timeout from the send (`sent_s + timeout_s`, not before the loss
    at `now_s`); if this was send `attempt` < `max_attempts` it resends `backoff_s x 1.5^(attempt
    - 1)` later (sgl-router's backoff), else it gives up then.

    Args:
        sent_s: [lost] float64 when each lost send was sent (s).
        attempt: [lost] int64 its number (1: the first send).
    Returns:
        ([lost] bool resent, [lost] float64 the resend's or the give-up's time, s).
    """
    noticed_s = np.maximum(now_s, sent_s + timeout_s)
    resend = attempt < max_attempts
    wait_s = backoff_s * BACKOFF_GROWTH ** (attempt - 1.0)
    return resend, np.where(resend, noticed_s + wait_s, noticed_s)


class Retries:
    """The resends of one run: which request each resend repeats, its send time and number.

    Args:
        spec: `workload.retry` (`RetrySpec`).
    """

    def __init__(self, spec):
        self.timeout_s, self.max_attempts = float(spec.timeout_s), int(spec.max_attempts)
        self.backoff_s = float(spec.backoff_s)
        self.origin: dict[int, int] = {}       # resend id -> the first send's request id
        self.sent_s: dict[int, float] = {}     # resend id -> its send time (s)
        self.attempt: dict[int, int] = {}      # resend id -> its number (2: the first resend)

    def on_lost(self, lost_ids: np.ndarray, now_s: float, first_sent_s: np.ndarray) -> Resends:
        """What the clients of `lost_ids` do (module doc).

        Args:
            first_sent_s: [lost] float64 each request's arrival time in the run (a resend's is
                its first send's).
        """
        ids = [int(i) for i in lost_ids]
        sent = np.array([self.sent_s.get(i, s) for i, s in zip(ids, first_sent_s.tolist())])
        attempt = np.array([self.attempt.get(i, 1) for i in ids], dtype=np.int64)
        resend, at_s = resend_times(sent, attempt, now_s, self.timeout_s, self.max_attempts,
                                    self.backoff_s)
        return Resends(np.asarray(ids, dtype=np.int64), resend, at_s, attempt)

    def record(self, new_ids: np.ndarray, resends: Resends) -> None:
        """`new_ids` are the rows of `resends`' resent requests, in their order."""
        for new, old, at_s, attempt in zip(new_ids.tolist(), resends.lost_ids[resends.resend].tolist(),
                                           resends.at_s[resends.resend].tolist(),
                                           resends.attempt[resends.resend].tolist()):
            self.origin[new] = self.origin.get(old, old)
            self.sent_s[new] = at_s
            self.attempt[new] = attempt + 1

    def retry_of(self, num_requests: int) -> np.ndarray:
        """[requests] int64 the first send's id of each resend, -1 for a first send."""
        out = np.full(num_requests, -1, dtype=np.int64)
        for new, old in self.origin.items():
            if new < num_requests:
                out[new] = old
        return out
