"""The scheduler's shared state: which request holds each slot of each DP rank, and what each
request is and has done (lengths, first and last tokens, finish, loss).

Every path of the scheduler reads and writes this one object, and nothing else of the others':
the per-slot path (`epsim.sim.batching.Scheduler`), the decode path that keeps a step count
instead of per-slot counters (`epsim.sim.decode_path`) and the saturated steps applied many at
once (`epsim.sim.saturation`). What a path keeps for itself (prefill tokens left, per-slot
contexts, the decode path's step counts) stays in that path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.sim.token_gaps import TokenClock

NO_REQUEST = -1              # slot_req of a free slot
EMPTY_LEFT = 1 << 30         # tokens left of a free slot: never reaches 0, so no mask is needed
FEW_FREE = 64                # free slots up to which admission and the finish queue walk them in Python


@dataclass(eq=False)
class SlotState:
    """Slots `[ranks, slots]`, and the requests they serve `[requests]` (the arrivals in order,
    then the requests running at t=0), as the scheduler's paths share them.

    Attributes:
        slot_req: [ranks, slots] int32 request id in each slot, `NO_REQUEST` in a free one
            (int32: half the memory traffic of the per-step passes over it).
        used: [ranks, slots] bool, `slot_req >= 0`, kept as slots fill and empty. A step's plan
            holds it as its decoding slots, so only the next plan's admissions and its own
            commit write it in place; a rank dropped mid-step replaces it with a copy.
        free: int64 flat free slots (rank * slots + slot), kept only while they are few
            (`pick_free`); None: formed from `used` when next needed.
        occupied: [ranks] int64 used slots.
        context_sum: [ranks] int64 KV entries of each rank's requests (prompt and tokens so far).
        arrival_s: [requests] float64 arrival time (s; 0 for those running at t=0).
        input_len, output_len: [requests] int64 prompt and output tokens.
        is_initial: [requests] bool, running at t=0 (left out of TTFT and end-to-end latency).
        first_token_s, finish_s: [requests] float64 simulated seconds (NaN: not yet).
        lost: [requests] bool, on a rank that failed (they never finish).
        clock: each slot's last-token time and the measurement window's gaps.
        input_tokens_done, output_tokens_done: prompt tokens prefilled and output tokens
            produced so far, every rank.
    """

    slot_req: np.ndarray
    used: np.ndarray
    free: np.ndarray | None
    occupied: np.ndarray
    context_sum: np.ndarray
    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    is_initial: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    lost: np.ndarray
    clock: TokenClock
    input_tokens_done: float = 0.0
    output_tokens_done: float = 0.0
    num_requests: int = -1                  # requests so far (-1: all of the arrays' rows)
    on_finish: object = None                # f(ids, now_s) told of every request that ends

    @classmethod
    def empty(cls, num_ranks: int, max_running: int, arrival_s: np.ndarray,
              input_len: np.ndarray, output_len: np.ndarray, num_arrivals: int,
              window_start_s: float) -> "SlotState":
        """Every slot free, no request served yet: requests `[requests]`, the first
        `num_arrivals` of them arriving, the rest running at t=0."""
        shape = (num_ranks, max_running)
        num = arrival_s.shape[0]
        is_initial = np.zeros(num, dtype=bool)
        is_initial[num_arrivals:] = True
        return cls(np.full(shape, NO_REQUEST, dtype=np.int32), np.zeros(shape, dtype=bool), None,
                   np.zeros(num_ranks, dtype=np.int64), np.zeros(num_ranks, dtype=np.int64),
                   arrival_s, input_len, output_len, is_initial, np.full(num, np.nan),
                   np.full(num, np.nan), np.zeros(num, dtype=bool),
                   TokenClock(shape, num, window_start_s))

    @property
    def num_ranks(self) -> int:
        return self.slot_req.shape[0]

    @property
    def max_running(self) -> int:
        return self.slot_req.shape[1]

    def num_free(self) -> int:
        """Free slots over every rank."""
        return self.num_ranks * self.max_running - int(self.occupied.sum())

    @classmethod
    def closed_loop(cls, num_ranks: int, max_running: int, initial_input: np.ndarray,
                    initial_output: np.ndarray, window_start_s: float) -> "SlotState":
        """Every slot free, for a closed loop (`epsim.sim.clients`): the requests running at
        t=0 first, the clients' sends appended as they happen (`add_requests`)."""
        num = initial_input.shape[0]
        state = cls.empty(num_ranks, max_running, np.zeros(num), initial_input, initial_output,
                          0, window_start_s)
        state.num_requests = num
        return state

    @property
    def count(self) -> int:
        """Requests so far (the arrays may hold spare rows beyond them)."""
        return self.arrival_s.shape[0] if self.num_requests < 0 else self.num_requests

    def add_requests(self, arrival_s: np.ndarray, input_len: np.ndarray,
                     output_len: np.ndarray) -> np.ndarray:
        """Append requests `[new]` sent at `arrival_s` (a closed loop's clients), growing the
        arrays by doubling. Returns their ids."""
        first, new = self.count, arrival_s.shape[0]
        capacity = self.arrival_s.shape[0]
        if first + new > capacity:
            extra = max(first + new, 2 * capacity, 64) - capacity
            grow = lambda a, fill: np.concatenate([a, np.full(extra, fill, dtype=a.dtype)])  # noqa: E731
            self.arrival_s = grow(self.arrival_s, np.inf)
            self.input_len, self.output_len = grow(self.input_len, 1), grow(self.output_len, 1)
            self.is_initial, self.lost = grow(self.is_initial, False), grow(self.lost, False)
            self.first_token_s, self.finish_s = grow(self.first_token_s, np.nan), grow(self.finish_s, np.nan)
            self.clock.grow(extra)
        ids = np.arange(first, first + new)
        self.arrival_s[ids], self.input_len[ids], self.output_len[ids] = arrival_s, input_len, output_len
        self.num_requests = first + new
        return ids

    def fill(self, slots: np.ndarray, ids: np.ndarray) -> None:
        """Flat `slots` take requests `ids`, which have had no token in them yet."""
        self.slot_req.reshape(-1)[slots] = ids
        self.used.reshape(-1)[slots] = True
        self.clock.admit(slots)

    def finish(self, done: np.ndarray, context: np.ndarray, now_s: float) -> None:
        """Flat slots `done`, whose requests hold `context` KV entries each, finished at
        `now_s`: their requests end and the slots are free."""
        slot_req = self.slot_req.reshape(-1)
        self.finish_s[slot_req[done]] = now_s
        if self.on_finish is not None:
            self.on_finish(slot_req[done], now_s)
        slot_req[done] = NO_REQUEST
        self.used.reshape(-1)[done] = False
        rows = done // self.max_running
        self.context_sum -= np.bincount(rows, weights=context,
                                        minlength=self.num_ranks).astype(np.int64)
        self.occupied -= np.bincount(rows, minlength=self.num_ranks)
        if self.free is not None:
            self.free = np.concatenate([self.free, done])

    def pick_free(self, admit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The free slots that take `admit` ([ranks]) requests on each rank, lowest first.

        Returns:
            (flat slots by rank then slot, their ranks, index of each within its rank's
            admissions), int64.
        """
        max_running = self.max_running
        free = self.free
        if free is None and self.num_free() <= FEW_FREE:
            free = np.flatnonzero(~self.used)
        if free is not None and free.shape[0] <= FEW_FREE:
            # a full batch frees a few slots a step: plain Python over them, walked over a
            # list of them kept while there are few (formed once from `used`)
            admit_of = admit.tolist()
            picked: list[int] = []
            ranks: list[int] = []
            within: list[int] = []
            kept: list[int] = []
            row, k = -1, 0
            for slot in sorted(free.tolist()):                             # by rank, then slot
                r = slot // max_running
                k = k + 1 if r == row else 0
                row = r
                if k < admit_of[r]:
                    picked.append(slot)
                    ranks.append(r)
                    within.append(k)
                else:
                    kept.append(slot)
            self.free = np.array(kept, dtype=np.int64)
            return (np.array(picked, dtype=np.int64), np.array(ranks, dtype=np.int64),
                    np.array(within, dtype=np.int64))
        # many free slots (batches short of full): read the admitting ranks' rows only
        self.free = None
        rows = np.flatnonzero(admit)
        free = ~self.used[rows]                                            # [admitting, slots]
        index = np.cumsum(free, axis=1)                    # 1-based among the rank's free slots
        row, slot = np.nonzero(free & (index <= admit[rows][:, None]))
        ranks = rows[row]
        return ranks * max_running + slot, ranks, index[row, slot] - 1
