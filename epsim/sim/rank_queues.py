"""Arrivals queued per DP rank: requests go to ranks round-robin by arrival order (SGLang's
default DP load balancing) and wait there, first come first served, until the rank admits them.

A P/D prefill server routes by the request's bootstrap room instead (`rooms`): SGLang's data-
parallel controller sends it to rank `bootstrap_room % dp_size` (0.5.8: `server_args.py` 772-800,
`load_balance_method` auto -> `follow_bootstrap_room` on a prefill server;
`managers/data_parallel_controller.py` 501-520; 0.4.8-0.5.6 did so in `round_robin_scheduler`
whenever disaggregated, the decode server's requests too: 0.5.5 `data_parallel_controller.py`
468-472, so a decode of those versions routes by room where `load_balance_method` says so), and
the router draws each room uniformly from 63 bits (sglang's
`mini_lb._generate_bootstrap_room`: `random.randint(0, 2**63 - 1)`; Dynamo likewise), so each
arrival's rank is an independent uniform draw: ranks' queues differ by chance, which a lock-step
forward (DP attention) pays for at the busiest rank.

A rank's queue holds the arrivals routed to it so far, the first `admitted` of them taken.
Elastic EP changes where later arrivals go, not where earlier ones went: `route_to` opens a
routing epoch from which arrivals go round-robin over the live ranks only (SGLang's
data-parallel controller skips dead workers), and a rank's queue is its share of each epoch in
turn. One epoch over every rank (no failure yet) is the fast path: counts and request ids in
closed form.

The arrivals are fixed before the run (`Requests`, open loop); a closed-loop client (a fixed
number of requests in flight, the next sent as one finishes) is a variant of this object whose
arrival times grow as requests finish. Either may take sends during the run (`add`: a closed
loop's next requests, a client resending a request its failed rank lost, `epsim.sim.retries`),
at any time from now on; the arrival order then no longer gives the request id, and a list of
ids in arrival order does.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np


class RankQueues:
    """Which arrivals each DP rank holds, and how many of them it has admitted.

    Args:
        arrival_s: [arrivals] float64 sorted arrival times (s); request i is the i-th.
        num_ranks: DP ranks.
    Attributes:
        admitted: [ranks] int64 requests each rank has taken from its queue (`take`).
    """

    offset = 0          # the id of arrival 0 (a closed loop's sends follow its initial requests)

    def __init__(self, arrival_s: np.ndarray, num_ranks: int,
                 rooms: np.random.Generator | None = None):
        self.num_ranks = num_ranks
        # bootstrap-room routing (module doc): each arrival's rank drawn from `rooms`; the rank
        # of every arrival in arrival order, and each rank's arrivals (0-based arrival order)
        self._rooms = rooms
        self._rank_of: list[int] = []
        # each rank's arrivals among the first `_folded` (ascending): a send goes in after every
        # arrival counted so far (`add`), so the counted prefix keeps its orders and grows as
        # arrivals are read (`_rank_orders`); a send before it (none by `add`'s contract) starts
        # it again. Rebuilding every rank's list at each read once a send went in between
        # (an argsort over all arrivals) cost a P/D prefill server's closed loop a fifth of its run
        self._orders: list[list[int]] = [[] for _ in range(num_ranks)]
        self._folded = 0
        self._array: np.ndarray | None = arrival_s
        self.num_arrivals = int(arrival_s.shape[0])
        # the same times as a list: `bisect_right` on it counts arrivals up to a time exactly as
        # `searchsorted(side="right")` does, without numpy's per-call overhead on a scalar
        self._arrival_list = arrival_s.tolist()
        # the request id of each arrival, in arrival order, once a send went in between
        # (`add`); None: arrival j is request `offset + j`. A list takes a send's insertion
        # for a memmove (numpy's `insert` copied the array through several calls' overhead),
        # and a step's few admissions are looked up in it one by one
        self._ids: list[int] | None = None
        self._arrived_memo: tuple[int, np.ndarray] | None = None   # (arrivals, [ranks] counts)
        self._rank_offset = num_ranks - 1 - np.arange(num_ranks)
        # routing epochs: arrivals from index `start` on go round-robin over `ranks`
        # (request j to ranks[j % len(ranks)]); one epoch over every rank is the fast path
        self._epochs: list[tuple[int, np.ndarray]] = [(0, np.arange(num_ranks))]
        self.admitted = np.zeros(num_ranks, dtype=np.int64)
        if rooms is not None:
            self._route_rooms(0, self.num_arrivals)

    def _route_rooms(self, at: int, num: int) -> None:
        """Draw the ranks of `num` arrivals inserted at arrival order `at` (room routing)."""
        if num == 1:        # a scalar draw: the same bits as size=1 (one fill of one), 4x cheaper
            drawn = [int(self._rooms.integers(0, self.num_ranks))]
        else:
            drawn = self._rooms.integers(0, self.num_ranks, size=num).tolist()
        if at == len(self._rank_of):
            self._rank_of.extend(drawn)
            return
        self._rank_of[at:at] = drawn                  # later arrivals shift
        if at < self._folded:                          # into the counted prefix: count again
            self._orders = [[] for _ in range(self.num_ranks)]
            self._folded = 0

    def _rank_orders(self, n: int) -> list[list[int]]:
        """Each rank's arrivals (0-based arrival order, ascending) under room routing, at least
        those among the first `n` (the lists may hold later ones: read them up to `n`)."""
        if n > self._folded:
            orders = self._orders
            for order, rank in enumerate(self._rank_of[self._folded:n], start=self._folded):
                orders[rank].append(order)
            self._folded = n
        return self._orders

    @property
    def arrival_s(self) -> np.ndarray:
        """[arrivals] float64 arrival (send) times, in arrival order."""
        if self._array is None:
            self._array = np.asarray(self._arrival_list, dtype=np.float64)
        return self._array

    def add(self, times_s: list[float], ids: list[int]) -> None:
        """Requests `ids` sent at `times_s` (each no earlier than the last `route_to` nor any
        arrival counted so far: a send is routed when it arrives). Appended when they come
        after every arrival (while they also take the next ids, the ids stay implicit); else put
        in time order, after arrivals at the same time, the ids then kept in arrival order."""
        if not times_s:
            return
        arrivals = self._arrival_list
        next_id = self.offset + self.num_arrivals
        in_order = (self._ids is None and ids == list(range(next_id, next_id + len(ids)))
                    and (not arrivals or times_s[0] >= arrivals[-1])
                    and all(a <= b for a, b in zip(times_s, times_s[1:])))
        if in_order:
            if self._rooms is not None:
                self._route_rooms(len(arrivals), len(times_s))
            arrivals.extend(times_s)
        else:
            if self._ids is None:
                self._ids = list(range(self.offset, next_id))
            order = sorted(zip(times_s, ids))
            # appends in bulk (a closed loop's sends after a failure), the rest one by one
            tail = 0
            while tail < len(order) and arrivals and order[tail][0] < arrivals[-1]:
                tail += 1
            for time_s, rid in order[:tail]:
                at = bisect_right(arrivals, time_s)
                if self._rooms is not None:
                    self._route_rooms(at, 1)
                arrivals.insert(at, time_s)
                self._ids.insert(at, rid)
            if self._rooms is not None:
                self._route_rooms(len(arrivals), len(order) - tail)
            arrivals.extend(t for t, _ in order[tail:])
            self._ids.extend(r for _, r in order[tail:])
        self.num_arrivals = len(arrivals)
        self._arrived_memo = None
        self._array = None

    def _to_ids(self, order: np.ndarray) -> np.ndarray:
        """Request ids of arrivals `order` (0-based arrival order)."""
        if self._ids is None:
            return order + self.offset
        ids = self._ids
        return np.array([ids[i] for i in order.tolist()], dtype=np.int64)

    def arrived(self, now_s: float) -> np.ndarray:
        """[ranks] requests that have arrived at each rank by `now_s` (read-only on the fast
        path: shared by the calls at the same count)."""
        n = bisect_right(self._arrival_list, now_s)
        if self._rooms is not None:
            memo = self._arrived_memo
            if memo is None or memo[0] != n:
                counts = np.array([bisect_right(orders, n - 1) for orders in self._rank_orders(n)],
                                  dtype=np.int64)
                counts.flags.writeable = False
                memo = self._arrived_memo = (n, counts)
            return memo[1]
        if self.one_epoch():
            memo = self._arrived_memo
            if memo is None or memo[0] != n:
                counts = (n + self._rank_offset) // self.num_ranks
                counts.flags.writeable = False
                memo = self._arrived_memo = (n, counts)
            return memo[1]
        counts = np.zeros(self.num_ranks, dtype=np.int64)
        for (start, ranks), end in zip(self._epochs, self._epoch_ends()):
            end = min(end, n)
            if end > start:
                pos = np.arange(ranks.shape[0])
                counts[ranks] += _num_mod(end, pos, ranks.shape[0]) - _num_mod(start, pos, ranks.shape[0])
        return counts

    def waiting(self, now_s: float) -> np.ndarray:
        """[ranks] requests arrived at each rank by `now_s` and not yet admitted."""
        return self.arrived(now_s) - self.admitted

    def arrived_by(self, times_s: np.ndarray) -> np.ndarray:
        """[times] arrivals over every rank by each of `times_s`."""
        return np.searchsorted(self.arrival_s, times_s, side="right")

    def next_arrival_s(self, now_s: float) -> float:
        """The first arrival after `now_s` (inf when none is left)."""
        n = bisect_right(self._arrival_list, now_s)
        return self._arrival_list[n] if n < self.num_arrivals else np.inf

    def one_epoch(self) -> bool:
        """Every arrival goes round-robin over all ranks (the fast path); not so once a rank
        failed, even before the first arrival (`route_to` then replaces the only epoch); never
        under room routing."""
        return (self._rooms is None and len(self._epochs) == 1
                and self._epochs[0][1].shape[0] == self.num_ranks)

    def take(self, admit: np.ndarray, rows: np.ndarray, within: np.ndarray) -> np.ndarray:
        """Ranks take `admit` ([ranks]) requests each from their queues: the ids of the
        `within`-th (0-based) of them on rank `rows` ([admissions] each)."""
        ids = self.request_ids(rows, self.admitted[rows] + within)
        self.admitted += admit
        return ids

    def request_ids(self, rows: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Ids of the `index`-th request (0-based, arrival order) routed to rank `rows`."""
        return self._to_ids(self._arrival_order(rows, index))

    def _arrival_order(self, rows: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Arrival order (0-based) of the `index`-th arrival routed to rank `rows`."""
        if self._rooms is not None:
            pairs = list(zip(rows.tolist(), index.tolist()))
            orders = self._orders
            if any(i >= len(orders[r]) for r, i in pairs):    # beyond the counted prefix
                orders = self._rank_orders(len(self._rank_of))
            return np.array([orders[r][i] for r, i in pairs], dtype=np.int64)
        if self.one_epoch():
            return rows + self.num_ranks * index
        out = np.full(rows.shape[0], -1, dtype=np.int64)
        before = np.zeros(rows.shape[0], dtype=np.int64)     # the rank's requests in earlier epochs
        for (start, ranks), end in zip(self._epochs, self._epoch_ends()):
            width = ranks.shape[0]
            pos_of = np.full(self.num_ranks, -1, dtype=np.int64)
            pos_of[ranks] = np.arange(width)
            pos = pos_of[rows]
            member = pos >= 0
            pos = np.maximum(pos, 0)
            count = np.where(member, _num_mod(end, pos, width) - _num_mod(start, pos, width), 0)
            k = index - before
            hit = member & (k >= 0) & (k < count)
            first = start + (pos - start) % width                 # first j >= start on this rank
            out[hit] = (first + width * k)[hit]
            before += count
        assert (out >= 0).all(), "request index beyond the routed arrivals"
        return out

    def drop(self, rank: int, now_s: float) -> np.ndarray:
        """Empty `rank`'s queue as of `now_s` (its scheduler is gone).

        Returns:
            [queued] int64 ids of the requests that were waiting there.
        """
        arrived = self.arrived(now_s)
        queued = np.arange(self.admitted[rank], arrived[rank])
        waiting = self.request_ids(np.full(queued.shape[0], rank), queued)
        self.admitted[rank] = arrived[rank]
        return waiting

    def route_to(self, alive: np.ndarray, now_s: float) -> None:
        """Route arrivals after `now_s` round-robin over the ranks where `alive` ([ranks] bool)."""
        if self._rooms is not None:
            raise ValueError("route_to: a rank failed on a server that routes by bootstrap room; "
                             "SGLang's follow_bootstrap_room skips no worker (elastic EP with P/D "
                             "prefill is not modelled)")
        ranks = np.flatnonzero(alive)
        if ranks.shape[0] == 0:
            raise ValueError("alive (no rank) must keep at least one rank to route requests to")
        n = bisect_right(self._arrival_list, now_s)
        if self._epochs[-1][0] == n:
            self._epochs[-1] = (n, ranks)
        else:
            self._epochs.append((n, ranks))

    def _epoch_ends(self) -> list[int]:
        return [start for start, _ in self._epochs[1:]] + [self.num_arrivals]


def routes_by_room(deployment, dp_size: int) -> bool:
    """Whether a deployment's DP ranks take requests by bootstrap room (module doc): a P/D
    prefill server with more than one DP rank, or a P/D decode server told to
    (`load_balance_method` follow_bootstrap_room: SGLang 0.4.8-0.5.6's `round_robin_scheduler`
    sends a disaggregated decode's requests to `bootstrap_room % dp_size` too; 0.5.8's decode
    goes round-robin)."""
    if dp_size <= 1:
        return False
    mode = deployment.disaggregation_mode
    return mode == "prefill" or (mode == "decode" and
                                 deployment.load_balance_method == "follow_bootstrap_room")


def _num_mod(end, pos: np.ndarray, width: int) -> np.ndarray:
    """How many j in [0, end) have j % width == pos (elementwise over `pos`)."""
    return np.maximum(0, (end - pos + width - 1) // width)
