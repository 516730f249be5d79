"""Closed-loop clients: a fixed number of clients, each with one request in flight.

`sglang.bench_serving --max-concurrency N` (with its default infinite request rate) creates every
request at t=0 and lets N of them run at once: each client sends its next request as soon as
its last one finishes. aiperf's `--concurrency N` does the same. Here a client sends its next
request `think_time_s` after its last one finished (plus `think_per_output_token_s` x that
request's output tokens after the first: a P/D prefill instance's clients wait out each
request's own decode, `think_s_after`), or after it gave up on one its failed rank
lost (`workload.retry`: the client's timeout, and its resends, `epsim.sim.retries`), so the
arrival times are not known before the run: they follow the completions. With `num_requests`
(bench_serving's `--num-prompts`) the clients stop once that many are sent, and the last ones
finish with fewer and fewer clients.

Request ids: the requests running at t=0 (`initial_running_per_rank`, part-way done) come first,
`0 .. num_initial - 1`, then the clients' sends in the order the clients decide them (the
finishes that set them; the sends of one finish time by their send times). A send goes to DP
rank `(id - num_initial) % dp`, round-robin by send order (SGLang's default DP load balancing;
a P/D prefill server's by bootstrap room, `RankQueues`),
so `RankQueues` serves a closed loop unchanged once its arrival times grow (`ClientQueues`).
Lengths are drawn in send order, `LENGTH_BLOCK` requests at a time from the seed, so the same
seed gives the same run.
"""

from __future__ import annotations

import numpy as np

from epsim.sim.arrivals import sample_lengths
from epsim.sim.rank_queues import RankQueues

LENGTH_BLOCK = 4096      # lengths drawn this many requests at a time (input, then output)


class ClientQueues(RankQueues):
    """`RankQueues` whose arrivals are the clients' sends, added as they happen (`add`).

    Args:
        num_ranks: DP ranks.
        offset: the id of the first send (the requests running at t=0 come before).
        rooms: the draws of bootstrap-room routing (`RankQueues`); None: round-robin.
    """

    def __init__(self, num_ranks: int, offset: int, rooms: np.random.Generator | None = None):
        super().__init__(np.zeros(0), num_ranks, rooms)
        self.offset = offset


class ClosedLoop:
    """The clients of a `concurrency` workload: what each sends, and when.

    Args:
        workload: the `WorkloadSpec` (arrivals of kind `concurrency`, the length specs).
        seed: the run's seed (lengths use their own stream of it).
        num_initial: requests running at t=0, each one client's (at most `clients`).
    """

    def __init__(self, workload, seed: int, num_initial: int):
        arrivals = workload.arrivals
        if num_initial > arrivals.clients:
            raise ValueError(f"requests running at t=0 ({num_initial}) must be at most "
                             f"workload.arrivals.clients ({arrivals.clients})")
        self.clients = arrivals.clients
        self.think_s = float(arrivals.think_time_s)
        self.think_per_token_s = float(arrivals.think_per_output_token_s)
        # [requests] int64 output tokens of each request id, where the wait depends on them
        self._output_of = np.zeros(0, dtype=np.int64)
        self.num_initial = num_initial
        self.num_sent = 0          # new requests sent so far (resends of lost ones not counted)
        # bench_serving's --num-prompts: sends in all (None: no end); the requests running at
        # t=0 are not sends
        self.num_requests = arrivals.num_requests
        self._input_spec, self._output_spec = workload.input_len, workload.output_len
        self._rng = np.random.default_rng([seed, 0x1E7])
        self._inputs = np.zeros(0, dtype=np.int64)
        self._outputs = np.zeros(0, dtype=np.int64)

    @property
    def first_sends(self) -> int:
        """Clients that send at t=0: those without a request running at t=0."""
        return self.clients - self.num_initial

    def allowed(self, num: int) -> int:
        """How many of `num` sends the clients still make (all, without `num_requests`)."""
        if self.num_requests is None:
            return num
        return max(min(num, self.num_requests - self.num_sent), 0)

    def lengths(self, first: int, num: int) -> tuple[np.ndarray, np.ndarray]:
        """(input, output) [num] int64 lengths of sends `first .. first + num - 1` (0-based, in
        send order), drawn a block at a time."""
        while self._inputs.shape[0] < first + num:
            self._inputs = np.concatenate(
                [self._inputs, sample_lengths(self._input_spec, LENGTH_BLOCK, self._rng)])
            self._outputs = np.concatenate(
                [self._outputs, sample_lengths(self._output_spec, LENGTH_BLOCK, self._rng)])
        return self._inputs[first:first + num], self._outputs[first:first + num]

    def note_outputs(self, ids: np.ndarray, output_len: np.ndarray) -> None:
        """Requests `ids` [n] have `output_len` [n] output tokens (as drawn: a prefill instance's
        requests end at their first token here), which their clients' waits follow
        (`think_s_after`); kept only where the wait depends on them."""
        if self.think_per_token_s == 0 or ids.shape[0] == 0:
            return
        end = int(ids.max()) + 1
        if end > self._output_of.shape[0]:
            grown = max(end, 2 * self._output_of.shape[0], 64)
            self._output_of = np.concatenate(
                [self._output_of, np.ones(grown - self._output_of.shape[0], dtype=np.int64)])
        self._output_of[ids] = output_len

    def output_of(self, ids: np.ndarray) -> np.ndarray:
        """[n] int64 output tokens noted for requests `ids` [n] (1 where none were noted)."""
        known = np.ones(ids.shape[0], dtype=np.int64)
        inside = ids < self._output_of.shape[0]
        known[inside] = self._output_of[ids[inside]]
        return known

    def think_s_after(self, ids: np.ndarray) -> np.ndarray:
        """[n] float64 seconds each client of requests `ids` [n] (just ended) waits before its
        next send: `think_time_s` plus `think_per_output_token_s` x the request's output tokens
        after the first (the decode side's time of that request)."""
        if self.think_per_token_s == 0:
            return np.full(ids.shape[0], self.think_s)
        return self.think_s + self.think_per_token_s * (self.output_of(ids) - 1)
