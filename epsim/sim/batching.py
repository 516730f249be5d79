"""Continuous batching on every DP rank at once, as arrays `[ranks, slots]`.

Each DP rank holds up to `max_running_requests` requests in slots. Requests go to ranks
round-robin by arrival order (SGLang's default DP load balancing) and wait FCFS for a slot.
Each step a rank either extends (chunked prefill of at most `chunked_prefill_size` tokens,
oldest requests first) or decodes one token for every running request; with
`enable_mixed_chunk` it does both in one batch, the chunk budget shrinking by the decode count
(SGLang's rules). Disaggregated instances: `prefill` finishes a request when its prompt is
prefilled (first token); `decode` admits requests whose prompt is already in the KV cache.

Elastic EP: `drop_rank` loses a failed rank's running and queued requests (its scheduler process
is gone), and `route_to` sends later arrivals round-robin over the live ranks only (SGLang's
data-parallel controller skips dead workers).

Decode instances while every rank is alive (most decode runs, R1 among them) take a shorter
path with the same results: every running request decodes one token per step, so instead of
counting each slot's context and tokens left down every step, a slot keeps the step count at
which it finishes (its context is its start plus the steps since), the finishing slots of each
step are looked up, and the inter-token gaps are all "now minus the previous step". The
per-slot arrays are formed only when asked for (`context`, `out_left`, the window's last-token
times) and for good once a rank fails.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.sim.arrivals import Requests
from epsim.sim.token_gaps import NO_GAPS, StepGaps, TokenClock, WindowGaps

_NO_REQUEST = -1
_EMPTY_LEFT = 1 << 30        # out_left of a free slot: never reaches 0, so no mask is needed
_FEW_FREE = 64               # slots up to which admission and the finish queue walk them in Python


@dataclass(eq=False)
class Plan:
    """One step's batch: per-rank counts for the cost model and what `commit` applies."""

    batch: BatchCounts
    decoding: np.ndarray                  # [ranks, slots] bool, slots that decode one token
    prefill_alloc: np.ndarray | None      # [ranks, slots] int64 prefill tokens this step
    finishing_prefill: np.ndarray | None  # [ranks, slots] bool, prompt completes this step
    fresh_ids: np.ndarray | None          # decode instances: requests whose first step this is
    num_waiting: int = 0                  # arrived requests still without a slot

    @property
    def num_tokens(self) -> float:
        return float(self.batch.tokens.sum())


class Scheduler:
    """Request state of a run, vectorized over DP ranks and slots.

    Args:
        requests: arrivals (sorted); request i goes to rank `i % num_ranks`.
        num_ranks: DP ranks; max_running: slots per rank; chunk_tokens: prefill budget per
            rank per step.
        mode: `disaggregation_mode` "null" | "prefill" | "decode".
        mixed_chunk: decode tokens ride along in extend batches.
        initial: requests already running at t=0 (decoding, `initial_progress` tokens done),
            `num_ranks * k` of them, k per rank; excluded from TTFT and end-to-end statistics
            (their inter-token gaps count, `epsim.sim.token_gaps`).
        window_start_s: the measurement window (token gaps) opens at the first step at or after it.
    """

    def __init__(self, requests: Requests, num_ranks: int, max_running: int, chunk_tokens: int,
                 mode: str = "null", mixed_chunk: bool = False, initial: Requests | None = None,
                 initial_progress: np.ndarray | None = None, window_start_s: float = 0.0):
        self.num_ranks, self.max_running, self.chunk_tokens = num_ranks, max_running, chunk_tokens
        self.mode, self.mixed_chunk = mode, mixed_chunk
        self.num_arrivals = len(requests)
        init = initial if initial is not None else Requests(np.zeros(0), np.zeros(0, np.int64),
                                                            np.zeros(0, np.int64))
        self.arrival_s = np.concatenate([requests.arrival_s, init.arrival_s])
        self._arrivals = self.arrival_s[:self.num_arrivals]
        # the same times as a list: `bisect_right` on it counts arrivals up to a time exactly as
        # `searchsorted(side="right")` does, without numpy's per-call overhead on a scalar
        self._arrival_list = self._arrivals.tolist()
        self._arrived_memo: tuple[int, np.ndarray] | None = None   # (arrivals, [ranks] counts)
        self.input_len = np.concatenate([requests.input_len, init.input_len]).astype(np.int64)
        self.output_len = np.concatenate([requests.output_len, init.output_len]).astype(np.int64)
        if mode == "prefill":
            self.output_len = np.ones_like(self.output_len)   # the first token ends it here
        num = self.arrival_s.shape[0]
        self.first_token_s = np.full(num, np.nan)
        self.finish_s = np.full(num, np.nan)
        self.lost = np.zeros(num, dtype=bool)                 # on a rank that failed
        self.is_initial = np.zeros(num, dtype=bool)
        self.is_initial[self.num_arrivals:] = True
        shape = (num_ranks, max_running)
        # int32 slots: half the memory traffic of the per-step passes over [ranks, slots]
        self.slot_req = np.full(shape, _NO_REQUEST, dtype=np.int32)
        # slot_req >= 0, kept as slots fill and empty. A plan holds it as its decoding slots, so
        # only the next plan's admissions and its own commit write it in place; a rank dropped
        # mid-step writes a copy
        self._used = np.zeros(shape, dtype=bool)
        # free slots as flat indices (rank * max_running + slot), kept only while they are few
        # (`_pick_free`); None: formed from `_used` when next needed
        self._free: np.ndarray | None = None
        self._zeros = np.zeros(num_ranks)            # the per-rank counts of nothing (read-only)
        self._zeros.flags.writeable = False
        self.prefill_left = np.zeros(shape, dtype=np.int32)
        self._context = np.zeros(shape, dtype=np.int32)          # 0 in a free slot
        self.context_sum = np.zeros(num_ranks, dtype=np.int64)   # [ranks] context.sum(axis=1)
        self._out_left = np.full(shape, _EMPTY_LEFT, dtype=np.int32)
        self.admitted = np.zeros(num_ranks, dtype=np.int64)
        self.occupied = np.zeros(num_ranks, dtype=np.int64)
        self._rank_offset = num_ranks - 1 - np.arange(num_ranks)
        # routing epochs: arrivals from index `start` on go round-robin over `ranks`
        # (request j to ranks[j % len(ranks)]); one epoch over every rank is the fast path
        self._epochs: list[tuple[int, np.ndarray]] = [(0, np.arange(num_ranks))]
        if num >= np.iinfo(np.int32).max:
            raise ValueError(f"requests ({num}) must be fewer than 2**31 per run (int32 slot ids)")
        self.input_tokens_done = 0.0
        self.output_tokens_done = 0.0
        self._dropped = False            # a rank was dropped while a planned step ran
        # the decode path (module doc): `_context` and `_out_left` are not kept; instead
        # context = `_ctx0 + _commits` and tokens left = `_end - _commits` in a used slot
        self._lazy = mode == "decode"
        self._commits = 0
        self._ctx0 = np.zeros(shape, dtype=np.int64)
        self._end = np.zeros(shape, dtype=np.int64)
        self._finishing = _FinishQueue()
        self._last_commit_s = 0.0        # every used slot's last token (initial ones: t=0)
        self._in_flight: np.ndarray | None = None   # flat slots admitted by the planned step
        self._gap_buf = np.empty(num_ranks * max_running)
        self.clock = TokenClock(shape, num, window_start_s)
        if len(init):
            self._place_initial(init, initial_progress)

    def _place_initial(self, init: Requests, progress: np.ndarray | None) -> None:
        per_rank = len(init) // self.num_ranks
        if per_rank * self.num_ranks != len(init) or per_rank > self.max_running:
            raise ValueError(f"initial requests ({len(init)}) must be num_ranks x k with k <= "
                             f"max_running_requests ({self.max_running})")
        done = np.zeros(len(init), dtype=np.int64) if progress is None else np.asarray(progress, np.int64)
        done = np.minimum(done, self.output_len[self.num_arrivals:] - 1)
        ids = self.num_arrivals + np.arange(len(init)).reshape(self.num_ranks, per_rank)
        self.slot_req[:, :per_rank] = ids
        self._used[:, :per_rank] = True
        self._context[:, :per_rank] = (init.input_len + done).reshape(self.num_ranks, per_rank)
        self.context_sum[:] = self._context.sum(axis=1)
        self._out_left[:, :per_rank] = (self.output_len[ids.ravel()] - done).reshape(
            self.num_ranks, per_rank)
        self.occupied[:] = per_rank
        self.clock.start_at_zero((slice(None), slice(None, per_rank)))   # last token at t=0
        if self._lazy:
            slots = np.flatnonzero(self._used)
            self._start_lazy(slots, self._context.reshape(-1)[slots],
                             self._out_left.reshape(-1)[slots])

    # -- the decode path's slots (module doc) -------------------------------------------------
    def _start_lazy(self, slots: np.ndarray, context: np.ndarray, out_left: np.ndarray) -> None:
        """Flat `slots` start with `context` and `out_left` tokens to go, now."""
        self._ctx0.reshape(-1)[slots] = context - self._commits
        # a request always decodes at least one token (`out_left` 0 ends after its first)
        end = self._commits + np.maximum(out_left, 1)
        self._end.reshape(-1)[slots] = end
        self._finishing.add(end, slots)

    @property
    def context(self) -> np.ndarray:
        """[ranks, slots] int32 KV entries of each slot's request (0 in a free slot)."""
        if not self._lazy:
            return self._context
        return np.where(self._used, self._ctx0 + self._commits, 0).astype(np.int32)

    @property
    def out_left(self) -> np.ndarray:
        """[ranks, slots] int32 tokens each slot's request has still to produce."""
        if not self._lazy:
            return self._out_left
        return np.where(self._used, self._end - self._commits, _EMPTY_LEFT).astype(np.int32)

    def _stamp_clock(self) -> None:
        """Write the last-token times the decode path does not keep: every used slot but those
        the step in flight admitted got its last token at the last commit."""
        timed = self._used.copy()
        if self._in_flight is not None:
            timed.reshape(-1)[self._in_flight] = False
        self.clock.stamp(timed, self._last_commit_s)

    def _leave_lazy(self) -> None:
        """Form the per-slot arrays and keep them from now on (a rank failed)."""
        if not self._lazy:
            return
        self._stamp_clock()
        self._context = self.context
        self._out_left = self.out_left
        self._lazy = False
        self._finishing = _FinishQueue()

    # -- queries -----------------------------------------------------------------------------
    def arrived(self, now_s: float) -> np.ndarray:
        """[ranks] requests that have arrived at each rank by `now_s` (round-robin)."""
        n = bisect_right(self._arrival_list, now_s)
        if self._one_epoch():
            memo = self._arrived_memo
            if memo is None or memo[0] != n:
                counts = (n + self._rank_offset) // self.num_ranks
                counts.flags.writeable = False        # shared by the calls at the same count
                memo = self._arrived_memo = (n, counts)
            return memo[1]
        counts = np.zeros(self.num_ranks, dtype=np.int64)
        for (start, ranks), end in zip(self._epochs, self._epoch_ends()):
            end = min(end, n)
            if end > start:
                pos = np.arange(ranks.shape[0])
                counts[ranks] += _num_mod(end, pos, ranks.shape[0]) - _num_mod(start, pos, ranks.shape[0])
        return counts

    def _one_epoch(self) -> bool:
        """Every arrival goes round-robin over all ranks (the fast path); not so once a rank
        failed, even before the first arrival (`route_to` then replaces the only epoch)."""
        return len(self._epochs) == 1 and self._epochs[0][1].shape[0] == self.num_ranks

    def _epoch_ends(self) -> list[int]:
        return [start for start, _ in self._epochs[1:]] + [self.num_arrivals]

    def _request_ids(self, rows: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Ids of the `index`-th request (0-based, arrival order) routed to rank `rows`."""
        if self._one_epoch():
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

    def slot_tokens(self) -> np.ndarray:
        """[ranks, slots] tokens the slot's request has produced (0 in a free slot)."""
        used = self.slot_req >= 0
        return np.where(used, self.output_len[np.maximum(self.slot_req, 0)] - self.out_left, 0)

    def window_gaps(self) -> WindowGaps:
        """Per request, the inter-token gaps that ended in the measurement window."""
        if self._lazy:
            self._stamp_clock()
        return self.clock.window_gaps(self.slot_req, self.slot_tokens(), self.output_len,
                                      self.first_token_s, self.finish_s, self.lost)

    def num_waiting(self, now_s: float) -> int:
        return int((self.arrived(now_s) - self.admitted).sum())

    def next_arrival_s(self, now_s: float) -> float:
        """The first arrival after `now_s` (inf when none is left)."""
        n = bisect_right(self._arrival_list, now_s)
        return self._arrival_list[n] if n < self.num_arrivals else np.inf

    # -- elastic EP ----------------------------------------------------------------------------
    def route_to(self, alive: np.ndarray, now_s: float) -> None:
        """Route arrivals after `now_s` round-robin over the ranks where `alive` ([ranks] bool)."""
        ranks = np.flatnonzero(alive)
        if ranks.shape[0] == 0:
            raise ValueError("alive (no rank) must keep at least one rank to route requests to")
        n = bisect_right(self._arrival_list, now_s)
        if self._epochs[-1][0] == n:
            self._epochs[-1] = (n, ranks)
        else:
            self._epochs.append((n, ranks))

    def drop_rank(self, rank: int, now_s: float) -> np.ndarray:
        """A failed rank loses its requests, running and queued; its slots become free.

        Returns:
            [lost] int64 request ids (marked in `lost`; they never finish).
        """
        self._leave_lazy()
        arrived = self.arrived(now_s)
        queued = np.arange(self.admitted[rank], arrived[rank])
        waiting = self._request_ids(np.full(queued.shape[0], rank), queued)
        self.admitted[rank] = arrived[rank]
        row = self.slot_req[rank]
        used = np.flatnonzero(row >= 0)
        lost = np.concatenate([row[used].astype(np.int64), waiting])
        self.clock.lose(row[used], self.slot_tokens()[rank, used], self.clock.last_s[rank, used])
        self.lost[lost] = True
        self.slot_req[rank] = _NO_REQUEST
        self._used = self._used.copy()          # the plan of the step in flight keeps its own
        self._used[rank] = False
        self._free = None
        self.prefill_left[rank] = 0
        self._context[rank] = 0
        self.context_sum[rank] = 0
        self._out_left[rank] = _EMPTY_LEFT
        self.occupied[rank] = 0
        self._dropped = True
        return lost

    # -- one step ------------------------------------------------------------------------------
    def _admit(self, now_s: float, alive: np.ndarray | None) -> tuple[np.ndarray | None, int]:
        """Move arrived requests into free slots, FCFS per rank.

        Returns:
            (ids admitted or None, requests still waiting).
        """
        waiting = self.arrived(now_s) - self.admitted
        admit = np.minimum(waiting, self.max_running - self.occupied)
        if alive is not None:
            admit = np.where(alive, admit, 0)
        num_waiting = int(waiting.sum())
        if not admit.any():
            return None, num_waiting
        slots, rows, within = self._pick_free(admit)
        ids = self._request_ids(rows, self.admitted[rows] + within)
        self.slot_req.reshape(-1)[slots] = ids
        self._used.reshape(-1)[slots] = True
        self.clock.admit(slots)
        input_len = self.input_len[ids]
        if self._lazy:
            self._start_lazy(slots, input_len, self.output_len[ids])
            self._in_flight = slots
        else:
            self._out_left.reshape(-1)[slots] = self.output_len[ids]
        if self.mode == "decode":
            if not self._lazy:
                self._context.reshape(-1)[slots] = input_len
            self.context_sum += np.bincount(rows, weights=input_len,
                                            minlength=self.num_ranks).astype(np.int64)
        else:
            self.prefill_left.reshape(-1)[slots] = input_len
        self.admitted += admit
        self.occupied += admit
        return ids, num_waiting - int(admit.sum())

    def _pick_free(self, admit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The free slots that take `admit` ([ranks]) requests on each rank, lowest first.

        Returns:
            (flat slots by rank then slot, their ranks, index of each within its rank's
            admissions), int64.
        """
        free = self._free
        if free is None and self.num_ranks * self.max_running - int(self.occupied.sum()) <= _FEW_FREE:
            free = np.flatnonzero(~self._used)
        if free is not None and free.shape[0] <= _FEW_FREE:
            # a full batch frees a few slots a step: plain Python over them, walked over a
            # list of them kept while there are few (formed once from `_used`)
            admit_of = admit.tolist()
            picked: list[int] = []
            ranks: list[int] = []
            within: list[int] = []
            kept: list[int] = []
            row, k = -1, 0
            for slot in sorted(free.tolist()):                             # by rank, then slot
                r = slot // self.max_running
                k = k + 1 if r == row else 0
                row = r
                if k < admit_of[r]:
                    picked.append(slot)
                    ranks.append(r)
                    within.append(k)
                else:
                    kept.append(slot)
            self._free = np.array(kept, dtype=np.int64)
            return (np.array(picked, dtype=np.int64), np.array(ranks, dtype=np.int64),
                    np.array(within, dtype=np.int64))
        # many free slots (batches short of full): read the admitting ranks' rows only
        self._free = None
        rows = np.flatnonzero(admit)
        free = ~self._used[rows]                                           # [admitting, slots]
        index = np.cumsum(free, axis=1)                    # 1-based among the rank's free slots
        row, slot = np.nonzero(free & (index <= admit[rows][:, None]))
        ranks = rows[row]
        return ranks * self.max_running + slot, ranks, index[row, slot] - 1

    def plan(self, now_s: float, alive: np.ndarray | None = None) -> Plan:
        """Admit arrivals and form this step's batch on every rank.

        Args:
            alive: [ranks] bool; a dead rank admits nothing and runs nothing (None: all alive).
        """
        self._dropped = False
        if alive is not None:
            self._leave_lazy()
        self._in_flight = None
        if self.clock.opened_s is None and now_s >= self.clock.window_start_s:
            if self._lazy:
                self._stamp_clock()
            self.clock.open_if_due(now_s, self.slot_req, self.slot_tokens())
        fresh, num_waiting = self._admit(now_s, alive)
        occupied = self._used if alive is None else self._used & alive[:, None]
        alloc = finishing = None
        zeros = self._zeros
        prefill_tokens = prefill_context = prefill_pairs = finishing_count = prefill_seqs = zeros
        if self.mode == "decode":
            decoding = occupied
        else:
            fresh = None                       # first tokens come from finished prefills
            pending = occupied & (self.prefill_left > 0)
            extending = pending.any(axis=1)
            decoding = occupied & ~pending
            if not self.mixed_chunk:
                decoding &= ~extending[:, None]
            if extending.any():
                budget = np.full(self.num_ranks, self.chunk_tokens, dtype=np.int64)
                if self.mixed_chunk:
                    budget = np.maximum(budget - decoding.sum(axis=1), 0)
                alloc = self._chunk(pending, budget)
                finishing = (alloc > 0) & (alloc == self.prefill_left)
                prefill_tokens = alloc.sum(axis=1).astype(np.float64)
                prefill_context = np.where(alloc > 0, self._context + alloc, 0).sum(
                    axis=1).astype(np.float64)
                prefill_pairs = (alloc * self._context + alloc * (alloc + 1) / 2.0).sum(axis=1)
                prefill_seqs = (alloc > 0).sum(axis=1).astype(np.float64)
                finishing_count = finishing.sum(axis=1).astype(np.float64)
        if self.mode == "decode" and alive is None:   # every used slot decodes; free slots hold 0
            decode_tokens = self.occupied.astype(np.float64)
            decode_context = self.context_sum + decode_tokens
        else:
            decode_tokens = decoding.sum(axis=1).astype(np.float64)
            decode_context = (self._context * decoding).sum(axis=1) + decode_tokens
        phase = "prefill" if (self.mode == "prefill" or (alloc is not None and prefill_tokens.any())
                              ) else "decode"
        batch = BatchCounts(decode_tokens, decode_context, prefill_tokens, prefill_context,
                            prefill_pairs, decode_tokens + finishing_count, phase, prefill_seqs)
        return Plan(batch, decoding, alloc, finishing, fresh, num_waiting)

    def _chunk(self, pending: np.ndarray, budget: np.ndarray) -> np.ndarray:
        """[ranks, slots] prefill tokens per slot: oldest requests first until `budget`."""
        key = np.where(pending, self.slot_req, np.iinfo(np.int64).max)
        order = np.argsort(key, axis=1, kind="stable")
        left = np.take_along_axis(np.where(pending, self.prefill_left, 0), order, axis=1)
        before = np.cumsum(left, axis=1) - left
        take = np.clip(budget[:, None] - before, 0, left)
        alloc = np.empty_like(take)
        np.put_along_axis(alloc, order, take, axis=1)
        return alloc

    def commit(self, plan: Plan, now_s: float) -> StepGaps:
        """Apply a finished step at `now_s`: tokens produced, first tokens, completions.

        Returns:
            the inter-token gaps the step closed (its ITL).
        """
        dropped = self._dropped
        if self._lazy:
            return self._commit_lazy(plan, now_s)
        if dropped:                       # a rank failed mid-step: its part of the step is lost
            plan = self._without_freed(plan)
        decoding = plan.decoding
        emitting = decoding if plan.finishing_prefill is None else decoding | plan.finishing_prefill
        gaps = self.clock.emit(now_s, emitting) if emitting is not None else NO_GAPS
        self._context += decoding
        self.context_sum += (decoding.sum(axis=1) if dropped
                             else plan.batch.decode_tokens.astype(np.int64))
        self._out_left -= decoding
        self.output_tokens_done += float(plan.batch.decode_tokens.sum())
        if plan.fresh_ids is not None:
            self.first_token_s[plan.fresh_ids] = now_s
        if plan.prefill_alloc is not None:
            alloc, finishing = plan.prefill_alloc, plan.finishing_prefill
            self._context += alloc
            self.context_sum += (alloc.sum(axis=1) if dropped
                                 else plan.batch.prefill_tokens.astype(np.int64))
            self.prefill_left -= alloc
            self._out_left -= finishing
            self.first_token_s[self.slot_req[finishing]] = now_s
            self.input_tokens_done += float(alloc.sum())
            self.output_tokens_done += float(finishing.sum())
        done = np.flatnonzero(self._out_left <= 0)                        # flat slot indices
        if done.shape[0]:
            context = self._context.reshape(-1)
            self._finish(done, context[done], now_s)
            context[done] = 0
            self._out_left.reshape(-1)[done] = _EMPTY_LEFT
        return gaps

    def _finish(self, done: np.ndarray, context: np.ndarray, now_s: float) -> None:
        """Flat slots `done`, whose requests hold `context` KV entries each, finished at
        `now_s`: their requests end and the slots are free."""
        slot_req = self.slot_req.reshape(-1)
        self.finish_s[slot_req[done]] = now_s
        slot_req[done] = _NO_REQUEST
        self._used.reshape(-1)[done] = False
        rows = done // self.max_running
        self.context_sum -= np.bincount(rows, weights=context,
                                        minlength=self.num_ranks).astype(np.int64)
        self.occupied -= np.bincount(rows, minlength=self.num_ranks)
        if self._free is not None:
            self._free = np.concatenate([self._free, done])

    def _commit_lazy(self, plan: Plan, now_s: float) -> StepGaps:
        """`commit` on the decode path: every used slot decoded one token (module doc)."""
        num_used = int(self.occupied.sum())      # = the plan's decode tokens (all used decode)
        fresh = 0 if self._in_flight is None else self._in_flight.shape[0]
        count = num_used - fresh                 # slots that had a token before this step
        gaps = NO_GAPS
        if count:
            last = self._gap_buf[:count]         # the gathered last-token times `emit` sums
            last.fill(self._last_commit_s)
            gaps = StepGaps(count, (count * now_s - float(last.sum())) / count,
                            now_s - self._last_commit_s)
        self._last_commit_s = now_s
        self._in_flight = None
        self._commits += 1
        self.context_sum += self.occupied
        self.output_tokens_done += num_used
        if plan.fresh_ids is not None:
            self.first_token_s[plan.fresh_ids] = now_s
        done = self._finishing.pop(self._commits)
        if done is not None:
            self._finish(done, self._ctx0.reshape(-1)[done] + self._commits, now_s)
        return gaps

    # -- many steps at once (`epsim.sim.leap`) -----------------------------------------------
    def saturated(self, now_s: float, max_steps: int) -> "Saturated | None":
        """The next steps while the decode path stays saturated, formed without changing
        anything (`apply_saturated` then applies the first k of them).

        Saturated: a decode instance with every rank alive, each step refilling every slot
        that the last one freed from requests already waiting now, none of them finishing
        within these steps. Then a step's batch is known before the steps ahead of it run
        (full on every rank; contexts from the requests that end and start), and only their
        times are left to find; the step that opens the measurement window (`window_due_s`)
        must be planned as usual. None: not saturated.
        """
        if not (self.may_saturate() and self._one_epoch() and max_steps >= 1):
            return None
        dp, mr = self.num_ranks, self.max_running
        free = self._free if self._free is not None else np.flatnonzero(~self._used)
        c = self._commits
        finishing = self._finishing.peek(c + 1, c + max_steps)            # [steps] flat slots
        admits = [np.sort(free).astype(np.int64)] + finishing[:-1]        # a step refills the last's
        sizes = np.array([a.shape[0] for a in admits], dtype=np.int64)
        slots = np.concatenate(admits)
        step_of = np.repeat(np.arange(max_steps), sizes)
        rank = slots // mr
        group = step_of * dp + rank                         # non-decreasing: by step, then rank
        counts = np.bincount(group, minlength=max_steps * dp).reshape(max_steps, dp)
        taken = np.cumsum(counts, axis=0)                   # [steps, dp] admitted so far
        within = np.arange(group.shape[0]) - np.searchsorted(group, group, side="left")
        index = (taken - counts + self.admitted)[step_of, rank] + within
        ids = rank + dp * index                             # `_request_ids` on one epoch
        # steps whose admissions the requests waiting now cover
        covered = (taken <= (self.arrived(now_s) - self.admitted)).all(axis=1)
        num = int(np.argmin(covered)) if not covered.all() else max_steps
        # ... and in which none of the admitted requests finishes (ids past the queue's cover
        # may name no request: clipped, and their steps are cut anyway)
        known = np.minimum(ids, len(self.output_len) - 1)
        ends = c + step_of + np.maximum(self.output_len[known], 1)
        bound = np.full(max_steps, np.iinfo(np.int64).max)
        np.minimum.at(bound, step_of, ends - c - 1)
        fits = np.minimum.accumulate(bound) >= np.arange(1, max_steps + 1)
        num = min(num, int(np.argmin(fits)) if not fits.all() else max_steps)
        if num == 0:
            return None
        input_len = self.input_len[known]
        added = np.bincount(group, weights=input_len, minlength=max_steps * dp).reshape(
            max_steps, dp).astype(np.int64)
        fin = np.concatenate(finishing)
        fin_step = np.repeat(np.arange(max_steps), [f.shape[0] for f in finishing])
        fin_group = fin_step * dp + fin // mr
        ended = np.bincount(fin_group, weights=self._ctx0.reshape(-1)[fin] + (c + 1 + fin_step),
                            minlength=max_steps * dp).reshape(max_steps, dp).astype(np.int64)
        ended_count = np.bincount(fin_group, minlength=max_steps * dp).reshape(max_steps, dp)
        # context_sum as each step plans: + its admissions; after each commit: + one token per
        # slot (all full), - the contexts of the requests that ended
        change = added.copy()
        change[1:] += mr - ended[:-1]
        context_sum = self.context_sum + np.cumsum(change, axis=0)              # [steps, dp]
        return Saturated(num, slots, rank, step_of, ids, ends, sizes, finishing, fin, fin_step,
                         ended, ended_count, context_sum)

    def may_saturate(self) -> bool:
        """A quick test before `saturated`: the decode path, a few free slots at most."""
        return (self._lazy and self.mode == "decode"
                and self.num_ranks * self.max_running - int(self.occupied.sum()) <= _FEW_FREE)

    @property
    def window_due_s(self) -> float:
        """The time from which the next step opens the measurement window (inf: open)."""
        return self.clock.window_start_s if self.clock.opened_s is None else np.inf

    def saturated_batch(self) -> BatchCounts:
        """The batch of every saturated step (`saturated`; its `decode_context` that of the
        first): full on every rank."""
        tokens = np.full(self.num_ranks, float(self.max_running))
        zeros = self._zeros
        return BatchCounts(tokens, tokens, zeros, zeros, zeros, tokens + zeros, "decode", zeros)

    def apply_saturated(self, sat: "Saturated", num: int, start_s: np.ndarray,
                        end_s: np.ndarray) -> tuple[list[StepGaps], list[int], list[int]]:
        """Apply the first `num` steps of `sat`, which start at `start_s` and end at `end_s`
        ([num] s): what `plan` and `commit` of each would have done.

        Returns:
            (each step's gaps, requests waiting after its admissions, requests running after
            its commit).
        """
        mr, c = self.max_running, self._commits
        full = self.num_ranks * mr
        take = int(sat.sizes[:num].sum())
        slots, ids, step_of = sat.slots[:take], sat.ids[:take], sat.step_of[:take]
        fin_take = int(np.searchsorted(sat.fin_step, num, side="left"))
        fin, fin_step = sat.fin[:fin_take], sat.fin_step[:fin_take]
        flat_req = self.slot_req.reshape(-1)
        self.finish_s[flat_req[fin]] = end_s[fin_step]
        self.first_token_s[ids] = end_s[step_of]
        flat_req[slots] = ids
        self._used.reshape(-1)[slots] = True
        self.clock.admit(slots)
        self._ctx0.reshape(-1)[slots] = self.input_len[ids] - (c + step_of)
        self._end.reshape(-1)[slots] = sat.ends[:take]
        self._finishing.drop_through(c + num)
        self._finishing.add(sat.ends[:take], slots, few=True)
        last = sat.finishing[num - 1]
        flat_req[last] = _NO_REQUEST
        self._used.reshape(-1)[last] = False
        self.context_sum[:] = sat.context_sum[num - 1] + mr - sat.ended[num - 1]
        self.occupied[:] = mr - sat.ended_count[num - 1]
        self.admitted += sat.added_count(num, self.num_ranks)
        arrived = np.searchsorted(self._arrivals, start_s, side="right")
        num_waiting = (arrived - int(self.admitted.sum()) + take
                       - np.cumsum(sat.sizes[:num])).tolist()
        gaps = []
        previous = self._last_commit_s
        for size, now in zip(sat.sizes[:num].tolist(), end_s.tolist()):
            count = full - size
            if count:
                buf = self._gap_buf[:count]        # as `_commit_lazy` sums them (the same bits)
                buf.fill(previous)
                gaps.append(StepGaps(count, (count * now - float(buf.sum())) / count, now - previous))
            else:
                gaps.append(NO_GAPS)
            previous = now
            self.output_tokens_done += full
        self._last_commit_s = previous
        self._in_flight = None
        self._dropped = False
        self._commits = c + num
        self._free = last.copy() if last.shape[0] <= _FEW_FREE else None
        running = (full - sat.ended_count[:num].sum(axis=1)).tolist()
        return gaps, num_waiting, running

    def _without_freed(self, plan: Plan) -> Plan:
        """`plan` restricted to slots that still hold a request (`drop_rank` freed the rest)."""
        live = self.slot_req >= 0
        fresh = plan.fresh_ids
        if fresh is not None:
            fresh = fresh[~self.lost[fresh]]
        alloc = finishing = None
        if plan.prefill_alloc is not None:
            alloc = np.where(live, plan.prefill_alloc, 0)
            finishing = plan.finishing_prefill & live
        return Plan(plan.batch, plan.decoding & live, alloc, finishing, fresh, plan.num_waiting)


@dataclass(frozen=True, eq=False)
class Saturated:
    """Up to `num` saturated decode steps (`Scheduler.saturated`), step i = 0, 1, ...

    Attributes:
        slots, rank, step_of, ids, ends: [admissions] flat slots (on ranks `rank`) refilled,
            at step i, with request ids that end at commit count `ends`; by step, then slot.
        sizes: [steps] admissions per step.
        finishing: per step, the flat slots whose requests end at its commit (sorted).
        fin, fin_step: those slots in one array, and their steps.
        ended, ended_count: [steps, dp] the contexts and the number of the requests that end.
        context_sum: [steps, dp] int64 each rank's context sum as the step runs (without the
            token each slot adds).
    """

    num: int
    slots: np.ndarray
    rank: np.ndarray
    step_of: np.ndarray
    ids: np.ndarray
    ends: np.ndarray
    sizes: np.ndarray
    finishing: list
    fin: np.ndarray
    fin_step: np.ndarray
    ended: np.ndarray
    ended_count: np.ndarray
    context_sum: np.ndarray

    def added_count(self, num: int, num_ranks: int) -> np.ndarray:
        """[dp] requests the first `num` steps admit on each rank."""
        return np.bincount(self.rank[:int(self.sizes[:num].sum())], minlength=num_ranks)


class _FinishQueue:
    """Flat slots by the commit count at which their request ends (the decode path): a few
    slots a step in a dict, a cohort of many (the initial requests, a first admission) as one
    sorted array read with a cursor."""

    def __init__(self):
        self._few: dict[int, list[int]] = {}
        self._cohorts: list[list] = []          # [ends sorted, their slots, cursor]
        self._popped = 0                        # the last commit count asked for

    def add(self, ends: np.ndarray, slots: np.ndarray, few: bool = False) -> None:
        """Slots `slots` end at commit counts `ends`; `few`: into the dict whatever their
        number (a leap's admissions: many, but a few per count)."""
        if ends.shape[0] > _FEW_FREE and not few:
            order = np.argsort(ends, kind="stable")
            self._cohorts.append([ends[order], slots[order], 0])
            return
        few = self._few
        for at, slot in zip(ends.tolist(), slots.tolist()):
            if at in few:
                few[at].append(slot)
            else:
                few[at] = [slot]

    def pop(self, at: int) -> np.ndarray | None:
        """int64 flat slots ending at commit count `at`, ascending (None: none); each count is
        asked for once, in increasing order."""
        parts = []
        self._popped = at
        few = self._few.pop(at, None)
        if few is not None:
            parts.append(np.array(few, dtype=np.int64))
        for cohort in self._cohorts:
            ends, slots, cursor = cohort
            if ends[cursor] == at:
                stop = int(np.searchsorted(ends, at, side="right"))
                parts.append(slots[cursor:stop])
                cohort[2] = stop
        if self._cohorts and any(c[2] == c[0].shape[0] for c in self._cohorts):
            self._cohorts = [c for c in self._cohorts if c[2] < c[0].shape[0]]
        if not parts:
            return None
        return np.sort(parts[0] if len(parts) == 1 else np.concatenate(parts))


    def peek(self, first: int, last: int) -> list[np.ndarray]:
        """What `pop(at)` would return for each `at` in `first..last` (empty arrays for none),
        leaving the queue as it is."""
        parts: list[list[np.ndarray]] = [[] for _ in range(last - first + 1)]
        few = self._few
        for at in range(first, last + 1):
            slots = few.get(at)
            if slots is not None:
                parts[at - first].append(np.array(slots, dtype=np.int64))
        for ends, slots, cursor in self._cohorts:
            bounds = np.searchsorted(ends, np.arange(first, last + 2), side="left").tolist()
            for i in range(last - first + 1):
                lo, hi = max(bounds[i], cursor), bounds[i + 1]
                if hi > lo:
                    parts[i].append(slots[lo:hi])
        empty = np.zeros(0, dtype=np.int64)
        return [empty if not p else np.sort(p[0] if len(p) == 1 else np.concatenate(p))
                for p in parts]

    def drop_through(self, last: int) -> None:
        """Forget every slot ending at a commit count up to `last` (`pop` of each in turn)."""
        few = self._few
        for at in range(self._popped + 1, last + 1):
            few.pop(at, None)
        self._popped = max(self._popped, last)
        for cohort in self._cohorts:
            cohort[2] = max(cohort[2], int(np.searchsorted(cohort[0], last, side="right")))
        self._cohorts = [c for c in self._cohorts if c[2] < c[0].shape[0]]


def _num_mod(end, pos: np.ndarray, width: int) -> np.ndarray:
    """How many j in [0, end) have j % width == pos (elementwise over `pos`)."""
    return np.maximum(0, (end - pos + width - 1) // width)
