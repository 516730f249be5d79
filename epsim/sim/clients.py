"""Closed-loop clients: a fixed number of clients, each with one request in flight.

`sglang.bench_serving --max-concurrency N` (with its default infinite request rate) creates every
request at t=0 and lets N of them run at once: each client sends its next request as soon as
its last one finishes. aiperf's `--concurrency N` does the same. Here a client sends its next
request `think_time_s` after its last one finished (or was lost with a failed rank, as
bench_serving counts a failed request and moves on), so the arrival times are not known before
the run: they follow the completions.

Request ids: the requests running at t=0 (`initial_running_per_rank`, part-way done) come first,
`0 .. num_initial - 1`, then the clients' sends in the order they are sent. A send goes to DP
rank `(id - num_initial) % dp`, round-robin by send order (SGLang's default DP load balancing),
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
    """`RankQueues` whose arrivals are the clients' sends, added as they happen.

    Args:
        num_ranks: DP ranks.
        offset: the id of the first send (the requests running at t=0 come before).
    """

    def __init__(self, num_ranks: int, offset: int):
        super().__init__(np.zeros(0), num_ranks)
        self.offset = offset

    def send(self, times_s: list[float]) -> None:
        """Requests sent at `times_s` (non-decreasing, and not before any earlier send)."""
        if not times_s:
            return
        self._arrival_list.extend(times_s)
        self.num_arrivals = len(self._arrival_list)
        self._arrived_memo = None
        self._array = None

    @property
    def arrival_s(self) -> np.ndarray:
        """[sent] float64 send times, in send order."""
        if getattr(self, "_array", None) is None:
            self._array = np.asarray(self._arrival_list, dtype=np.float64)
        return self._array

    @arrival_s.setter
    def arrival_s(self, value: np.ndarray) -> None:       # RankQueues.__init__ sets it
        self._array = value

    def request_ids(self, rows: np.ndarray, index: np.ndarray) -> np.ndarray:
        return super().request_ids(rows, index) + self.offset


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
        self.num_initial = num_initial
        self._input_spec, self._output_spec = workload.input_len, workload.output_len
        self._rng = np.random.default_rng([seed, 0x1E7])
        self._inputs = np.zeros(0, dtype=np.int64)
        self._outputs = np.zeros(0, dtype=np.int64)

    @property
    def first_sends(self) -> int:
        """Clients that send at t=0: those without a request running at t=0."""
        return self.clients - self.num_initial

    def lengths(self, first: int, num: int) -> tuple[np.ndarray, np.ndarray]:
        """(input, output) [num] int64 lengths of sends `first .. first + num - 1` (0-based, in
        send order), drawn a block at a time."""
        while self._inputs.shape[0] < first + num:
            self._inputs = np.concatenate(
                [self._inputs, sample_lengths(self._input_spec, LENGTH_BLOCK, self._rng)])
            self._outputs = np.concatenate(
                [self._outputs, sample_lengths(self._output_spec, LENGTH_BLOCK, self._rng)])
        return self._inputs[first:first + num], self._outputs[first:first + num]
