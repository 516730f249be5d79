"""Admission: which arrived requests each DP rank takes into its free slots, and when.

The arriving half of the scheduler (`epsim.sim.batching.Scheduler` is an `Admission`): requests
queue per rank (`epsim.sim.rank_queues`; a closed loop's sends, `epsim.sim.clients`, join as
requests finish) and a rank takes them first come first served, as many as its free slots and,
where it can bind, its KV pool (`epsim.sim.kv_pool`) hold. Elastic EP reroutes later arrivals
over the live ranks (`route_to`), and the requests a failed rank lost come back as their
clients resend them (`on_lost`, `epsim.sim.retries`).
"""

from __future__ import annotations

import numpy as np


class Admission:
    """What `Scheduler` does with arrivals (module doc). It reads the scheduler's `state`,
    `queues`, `closed`, `kv`, `mode`, `tokenizer`, slots and per-slot counters."""

    # -- a closed loop's clients (`epsim.sim.clients`) ------------------------------------------
    def _send(self, times_s: list[float]) -> None:
        """The clients send one new request each at `times_s` (each no earlier than now)."""
        closed, state = self.closed, self.state
        times_s = times_s[:closed.allowed(len(times_s))]
        if not times_s:
            return
        input_len, drawn = closed.lengths(closed.num_sent, len(times_s))
        closed.num_sent += len(times_s)
        output_len = np.ones_like(drawn) if self.mode == "prefill" else drawn
        if state.count + len(times_s) >= np.iinfo(np.int32).max:
            raise ValueError("requests must be fewer than 2**31 per run (int32 slot ids)")
        ids = state.add_requests(np.asarray(times_s, dtype=np.float64), input_len, output_len)
        closed.note_outputs(ids, drawn)         # the client's next wait follows them
        if self.tokenizer is not None:      # TTFT counts from the send, the queue from here
            times_s = self.tokenizer.through(np.asarray(times_s), input_len).tolist()
        self.queues.add(times_s, ids.tolist())

    def _client_done(self, ids: np.ndarray, now_s: float) -> None:
        """Requests `ids` finished at `now_s`: their clients send again, each after its wait
        (`ClosedLoop.think_s_after`), in time order."""
        self._send(np.sort(now_s + self.closed.think_s_after(ids)).tolist())

    # -- requests a failed rank lost (`epsim.sim.retries`) ------------------------------------
    def on_lost(self, lost: np.ndarray, now_s: float) -> None:
        """Requests `lost` died with their rank at `now_s`: their clients resend them when
        their timeout runs out, or give up (a closed loop's client then sends its next)."""
        if lost.shape[0] == 0:
            return
        state = self.state
        resends = self.retries.on_lost(lost, now_s, state.arrival_s[lost])
        again = resends.lost_ids[resends.resend]
        if again.shape[0]:
            if state.count + again.shape[0] >= np.iinfo(np.int32).max:
                raise ValueError("requests must be fewer than 2**31 per run (int32 slot ids)")
            # the same request: its lengths, its first send's time (TTFT counts from it)
            ids = state.add_requests(state.arrival_s[again].copy(), state.input_len[again].copy(),
                                     state.output_len[again].copy())
            if self.closed is not None:
                self.closed.note_outputs(ids, self.closed.output_of(again))
            state.is_initial[ids] = state.is_initial[again]
            self.retries.record(ids, resends)
            self.queues.add(resends.at_s[resends.resend].tolist(), ids.tolist())
        if self.closed is not None:
            gave_up = resends.at_s[~resends.resend]
            self._send(sorted((gave_up + self.closed.think_s).tolist()))

    # -- queries -----------------------------------------------------------------------------
    def arrived(self, now_s: float) -> np.ndarray:
        """[ranks] requests that have arrived at each rank by `now_s` (round-robin)."""
        return self.queues.arrived(now_s)

    def next_arrival_s(self, now_s: float) -> float:
        """The first arrival after `now_s` (inf when none is left)."""
        return self.queues.next_arrival_s(now_s)

    def num_waiting(self, now_s: float) -> int:
        """Requests arrived by `now_s` and still without a slot, every rank."""
        return int(self.queues.waiting(now_s).sum())

    # -- elastic EP ----------------------------------------------------------------------------
    def route_to(self, alive: np.ndarray, now_s: float) -> None:
        """Route arrivals after `now_s` round-robin over the ranks where `alive` ([ranks] bool)."""
        self.queues.route_to(alive, now_s)

    # -- one step ------------------------------------------------------------------------------
    def _admit(self, now_s: float, alive: np.ndarray | None) -> tuple[np.ndarray | None, int]:
        """Move arrived requests into free slots, FCFS per rank.

        Returns:
            (ids admitted or None, requests still waiting).
        """
        state, queues = self.state, self.queues
        waiting = queues.waiting(now_s)
        admit = np.minimum(waiting, self.max_running - state.occupied)
        if alive is not None:
            admit = np.where(alive, admit, 0)
        num_waiting = int(waiting.sum())
        self._kv_held = False
        if self.kv is not None and admit.any():            # the KV pool may hold some back
            fit = self._kv_fit(admit)
            self._kv_held = bool((fit < admit).any())
            admit = fit
        if not admit.any():
            return None, num_waiting
        slots, rows, within = state.pick_free(admit)
        ids = queues.take(admit, rows, within)
        state.fill(slots, ids)
        input_len = state.input_len[ids]
        if self.decode_path is not None:
            self.decode_path.start(slots, input_len, state.output_len[ids])
            self.decode_path.in_flight = slots
        else:
            self._out_left.reshape(-1)[slots] = state.output_len[ids]
        if self.mode == "decode":
            if self.decode_path is None:
                self._context.reshape(-1)[slots] = input_len
            state.context_sum += np.bincount(rows, weights=input_len,
                                             minlength=self.num_ranks).astype(np.int64)
        else:
            self.prefill_left.reshape(-1)[slots] = input_len
        state.occupied += admit
        return ids, num_waiting - int(admit.sum())

    # -- the KV pool (`epsim.sim.kv_pool`) ------------------------------------------------------
    def _kv_used(self) -> np.ndarray:
        """[ranks] tokens each rank's pool holds: contexts, and prompts admitted not yet prefilled."""
        if self.mode == "decode":
            return self.state.context_sum
        return self.state.context_sum + self.prefill_left.sum(axis=1)

    def _kv_fit(self, admit: np.ndarray) -> np.ndarray:
        """[ranks] how many of the `admit` requests at the head of each rank's queue the pool takes."""
        rows = np.repeat(np.arange(self.num_ranks), admit)
        within = np.arange(rows.shape[0]) - np.repeat(np.cumsum(admit) - admit, admit)
        ids = self.queues.request_ids(rows, self.queues.admitted[rows] + within)
        if self.kv.colocated:           # SGLang's `add_one_req_ignore_eos` (`epsim.sim.kv_pool`)
            used = self.state.used
            slot_left = np.where(used, self._out_left, 0)
            slot_held = np.where(used, self._context + self.prefill_left, 0)
            return self.kv.admissible_ignore_eos(admit, self._kv_used(), rows,
                                                 self.state.input_len[ids],
                                                 self.state.output_len[ids], slot_left, slot_held)
        return self.kv.admissible(admit, self._kv_used(), self.state.occupied, rows, within,
                                  self.state.input_len[ids])

    def _kv_held_steps(self, admit: np.ndarray, grown: np.ndarray) -> int:
        """How many plans ahead a colocated rank's pool (`KVPool.fits_ignore_eos`) keeps every
        queue head out, plus one: the steps a leap may take (`epsim.sim.quiet.held_steps`).

        Args:
            admit: [ranks] requests waiting with a slot free.
            grown: [plans, ranks * slots] tokens each slot has made by each plan ahead.
        """
        kv, num_slots = self.kv, self.max_running
        used = self.state.used.reshape(-1)
        held = (self._context + self.prefill_left).reshape(-1)
        out_left = self._out_left.reshape(-1)
        pool_used = self._kv_used()
        steps = grown.shape[0] + 1
        for rank in np.flatnonzero(admit):
            part = slice(rank * num_slots, (rank + 1) * num_slots)
            mask = used[part]
            head = self.queues.request_ids(np.array([rank]), self.queues.admitted[[rank]])
            made = grown[:, part][:, mask]
            fits = kv.fits_ignore_eos(pool_used[rank] + made.sum(axis=1),
                                      out_left[part][mask] - made, held[part][mask] + made,
                                      self.state.input_len[head], self.state.output_len[head])
            if fits.any():
                steps = min(steps, int(np.argmax(fits)) + 1)
        return steps
