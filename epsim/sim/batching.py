"""Continuous batching on every DP rank at once, as arrays `[ranks, slots]`.

Each DP rank holds up to `max_running_requests` requests in slots. Requests go to ranks
round-robin by arrival order (SGLang's default DP load balancing) and wait FCFS for a slot
(`epsim.sim.rank_queues`). Each step a rank either extends (chunked prefill of at most
`chunked_prefill_size` tokens, oldest requests first) or decodes one token for every running
request; with `enable_mixed_chunk` it does both in one batch, the chunk budget shrinking by the
decode count (SGLang's rules). Disaggregated instances: `prefill` finishes a request when its
prompt is prefilled (first token); `decode` admits requests whose prompt is already in the KV
cache.

Elastic EP: `drop_rank` (`epsim.sim.rank_loss`) loses a failed rank's running and queued requests (its scheduler process
is gone; their clients resend them when their timeout runs out, `epsim.sim.retries`), and
`route_to` sends later arrivals round-robin over the live ranks only.

The scheduler's paths share one state object (`epsim.sim.slots.SlotState`: slots, requests,
the token clock) and keep the rest to themselves. This module is the per-slot path, which runs
every mode: per-slot contexts, tokens left and prefill tokens left, counted down every step.
Decode instances while every rank is alive (most decode runs, R1 among them) take the decode
path instead (`epsim.sim.decode_path`: the same results from a step count), and the fast engine
applies their saturated steps many at once (`epsim.sim.saturation`, for `epsim.sim.leap`), and
any run's quiet decode steps (none finishing or joining: `epsim.sim.quiet`).
How many requests a rank admits is decided in `Admission._admit` alone (`epsim.sim.admission`:
free slots and the KV pool, `epsim.sim.kv_pool`); a closed loop's arrivals follow the
completions (`epsim.sim.clients`, told of each finish by `SlotState.on_finish`); with
speculative decoding a decode step is a verify step whose requests get k tokens each, counted in
`commit` on the per-slot path (`epsim.sim.speculative`); colocated instances with chunked
prefill run `plan`'s extend branch (`epsim.sim.chunked_prefill`). The requests running at t=0
take their slots in `epsim.sim.initial_requests.place_initial`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.sim.admission import Admission
from epsim.sim.arrivals import Requests
from epsim.sim.chunked_prefill import extend_counts
from epsim.sim.clients import ClientQueues, ClosedLoop
from epsim.sim.decode_path import DecodePath
from epsim.sim.initial_requests import initial_ranks, place_initial
from epsim.sim.kv_pool import KVPool
from epsim.sim.quiet import Quiet, apply_quiet, quiet_steps
from epsim.sim.rank_loss import drop_rank, without_freed
from epsim.sim.rank_queues import RankQueues
from epsim.sim.recv import RecvSkipper
from epsim.sim.retries import Retries
from epsim.sim.saturation import Applied, Saturated, apply_saturated, saturated_batch, saturated_steps
from epsim.sim.slots import EMPTY_LEFT, FEW_FREE, SlotState
from epsim.sim.speculative import Acceptance, verify_counts
from epsim.sim.step_plan import Plan
from epsim.sim.token_gaps import NO_GAPS, StepGaps, WindowGaps
from epsim.sim.tokenizer_queue import TokenizerQueue
from epsim.spec.workload import RetrySpec


class Scheduler(Admission):
    """Request state of a run, vectorized over DP ranks and slots.

    Args:
        requests: arrivals (sorted); request i goes to rank `i % num_ranks` (or by bootstrap
            room, `rooms_seed`).
        num_ranks: DP ranks; max_running: slots per rank; chunk_tokens: prefill budget per
            rank per step.
        mode: `disaggregation_mode` "null" | "prefill" | "decode".
        mixed_chunk: decode tokens ride along in extend batches.
        max_prefill_tokens: SGLang's `--max-prefill-tokens`, the batch's input budget
            (`epsim.sim.chunked_prefill.chunk`; None: it never binds).
        initial: requests already running at t=0 (decoding, `initial_progress` tokens done),
            `num_ranks * k` of them, k per rank; excluded from TTFT and end-to-end statistics
            (their inter-token gaps count, `epsim.sim.token_gaps`).
        window_start_s: the measurement window (token gaps) opens at the first step at or after it.
        closed: a closed loop's clients (`epsim.sim.clients.ClosedLoop`; `requests` then
            empty): their sends arrive as requests finish, the requests running at t=0 first.
        kv: each rank's KV pool (`epsim.sim.kv_pool.KVPool`; None, or one that cannot bind:
            slots alone bound admission).
        spec: speculative decoding's tokens per request per verify step
            (`epsim.sim.speculative.Acceptance`; None: one token a step); a decode step is then
            a verify step of `draft_tokens` tokens per request, on the per-slot path.
        recv_interval: `scheduler_recv_interval`: above 1, a step admits only the arrivals up to
            the scheduler's last receive (`epsim.sim.recv.RecvSkipper`).
        retry: what the clients do with a request a failed rank lost (`workload.retry`, a
            `RetrySpec`; None: its defaults, sglang.bench_serving's).
        rooms_seed: route each arrival to a uniformly drawn rank from this seed, as a P/D
            prefill server's bootstrap rooms do (`epsim.sim.rank_queues`); None: round-robin.
        tokenizer: the server's tokenizer, which every new request passes before its rank's
            queue sees it (`epsim.sim.tokenizer_queue`, `deployment.server_tokenize`); None:
            prompts arrive as token ids.
    Attributes:
        state: the slots and requests every path shares (`SlotState`).
        queues: the arrivals each rank holds and has admitted (`RankQueues`).
        decode_path: the decode path's step counts (`DecodePath`; None: the per-slot path runs).
    """

    def __init__(self, requests: Requests, num_ranks: int, max_running: int, chunk_tokens: int,
                 mode: str = "null", mixed_chunk: bool = False, initial: Requests | None = None,
                 initial_progress: np.ndarray | None = None, window_start_s: float = 0.0,
                 closed: ClosedLoop | None = None, kv: KVPool | None = None,
                 spec: Acceptance | None = None, draft_tokens: int = 1, recv_interval: int = 1,
                 retry=None, rooms_seed: int | None = None,
                 tokenizer: TokenizerQueue | None = None, max_prefill_tokens: int | None = None):
        self.tokenizer = tokenizer
        self.max_prefill_tokens = max_prefill_tokens
        self.retries = Retries(RetrySpec() if retry is None else retry)
        self.num_ranks, self.max_running, self.chunk_tokens = num_ranks, max_running, chunk_tokens
        # SGLang's --scheduler-recv-interval: arrivals join only at receive points (`recv`)
        self.recv = RecvSkipper(recv_interval) if recv_interval > 1 else None
        self.spec, self.draft_tokens = spec, draft_tokens
        self.emitted_tokens = 0.0          # speculative: tokens the last commit gave its requests
        self.spec_tokens = self.spec_verifies = 0   # speculative: in the window, for accept length
        self.kv = kv if kv is not None and kv.active else None   # a pool that can bind
        self._kv_held = False
        self.mode, self.mixed_chunk = mode, mixed_chunk
        self.num_arrivals = len(requests)
        init = initial if initial is not None else Requests(np.zeros(0), np.zeros(0, np.int64),
                                                            np.zeros(0, np.int64))
        self.closed = closed
        # a P/D prefill server's DP rank by bootstrap room (`RankQueues`), else round-robin
        rooms = None if rooms_seed is None else np.random.default_rng([rooms_seed, 0x800B])
        if closed is not None:
            # the requests running at t=0 first (ids 0..), then the clients' sends
            self.initial_start = 0
            self.queues = ClientQueues(num_ranks, len(init), rooms)
            self.state = SlotState.closed_loop(num_ranks, max_running, init.input_len.astype(np.int64),
                                               init.output_len.astype(np.int64), window_start_s)
            self.state.on_finish = self._client_done
            closed.note_outputs(np.arange(len(init)), init.output_len.astype(np.int64))
        else:
            self.initial_start = self.num_arrivals
            arrival_s = np.concatenate([requests.arrival_s, init.arrival_s])
            num = arrival_s.shape[0]
            if num >= np.iinfo(np.int32).max:
                raise ValueError(f"requests ({num}) must be fewer than 2**31 per run (int32 slot ids)")
            seen_s = arrival_s[:self.num_arrivals]
            if tokenizer is not None:        # the scheduler sees each after its tokenisation
                seen_s = tokenizer.through(seen_s, requests.input_len)
            self.queues = RankQueues(seen_s, num_ranks, rooms)
            input_len = np.concatenate([requests.input_len, init.input_len]).astype(np.int64)
            output_len = np.concatenate([requests.output_len, init.output_len]).astype(np.int64)
            if mode == "prefill":
                output_len = np.ones_like(output_len)             # the first token ends it here
            self.state = SlotState.empty(num_ranks, max_running, arrival_s, input_len, output_len,
                                         self.num_arrivals, window_start_s)
        shape = (num_ranks, max_running)
        self._zeros = np.zeros(num_ranks)            # the per-rank counts of nothing (read-only)
        self._zeros.flags.writeable = False
        # the per-slot path's own counters (the decode path forms them when asked)
        self.prefill_left = np.zeros(shape, dtype=np.int32)
        self._context = np.zeros(shape, dtype=np.int32)          # 0 in a free slot
        self._out_left = np.full(shape, EMPTY_LEFT, dtype=np.int32)
        self._dropped = False            # a rank was dropped while a planned step ran
        self._seen_s = -np.inf           # the latest time up to which a plan took in arrivals
        # one token per request per step (`epsim.sim.decode_path`): not so with speculation
        self.decode_path = DecodePath(self.state) if mode == "decode" and spec is None else None
        if len(init):                                      # `epsim.sim.initial_requests`
            # by room, the requests running at t=0 sit on drawn ranks too (their own stream)
            ranks = (None if rooms_seed is None else initial_ranks(
                len(init), num_ranks, max_running, np.random.default_rng([rooms_seed, 0x1A17])))
            place_initial(self, init, initial_progress, ranks)
        if closed is not None:
            self._send([0.0] * closed.first_sends)

    def leave_decode_path(self) -> None:
        """Form the per-slot arrays and keep them from now on (a rank failed)."""
        path = self.decode_path
        if path is None:
            return
        path.stamp_clock()
        self._context = path.context()
        self._out_left = path.out_left()
        self.decode_path = None

    # -- the slots as a step sees them (the rest of the state: `state`) -----------------------
    @property
    def slot_req(self) -> np.ndarray:
        """[ranks, slots] int32 request id in each slot (-1: free)."""
        return self.state.slot_req

    @property
    def occupied(self) -> np.ndarray:
        """[ranks] int64 running requests."""
        return self.state.occupied

    @property
    def context(self) -> np.ndarray:
        """[ranks, slots] int32 KV entries of each slot's request (0 in a free slot)."""
        return self._context if self.decode_path is None else self.decode_path.context()

    @property
    def out_left(self) -> np.ndarray:
        """[ranks, slots] int32 tokens each slot's request has still to produce."""
        return self._out_left if self.decode_path is None else self.decode_path.out_left()

    def slot_tokens(self) -> np.ndarray:
        """[ranks, slots] tokens the slot's request has produced (0 in a free slot)."""
        slot_req = self.state.slot_req
        used = slot_req >= 0
        return np.where(used, self.state.output_len[np.maximum(slot_req, 0)] - self.out_left, 0)

    def window_gaps(self, trim: bool = False) -> WindowGaps:
        """Per request, the inter-token gaps that ended in the measurement window (`trim`: of
        the requests so far only, without a closed loop's spare rows)."""
        state = self.state
        if self.decode_path is not None:
            self.decode_path.stamp_clock()
        gaps = state.clock.window_gaps(state.slot_req, self.slot_tokens(), state.output_len,
                                       state.first_token_s, state.finish_s, state.lost)
        if trim and state.count < gaps.count.shape[0]:
            gaps = WindowGaps(gaps.count[:state.count], gaps.span_s[:state.count], gaps.start_s)
        return gaps

    def trimmed_state(self) -> SlotState:
        """`state` with its per-request arrays cut to the requests so far (a closed loop keeps
        spare rows for the sends to come)."""
        state = self.state
        num = state.count
        if num == state.arrival_s.shape[0]:
            return state
        cut = {name: getattr(state, name)[:num] for name in (
            "arrival_s", "input_len", "output_len", "is_initial", "first_token_s", "finish_s", "lost")}
        return replace(state, **cut)

    @property
    def window_due_s(self) -> float:
        """The time from which the next step opens the measurement window (inf: open)."""
        clock = self.state.clock
        return clock.window_start_s if clock.opened_s is None else np.inf

    # -- elastic EP (and `Admission.route_to`) ---------------------------------------------------
    def drop_rank(self, rank: int, now_s: float) -> np.ndarray:
        """A failed rank loses its requests, running and queued; its slots become free
        (`epsim.sim.rank_loss.drop_rank`).

        Returns:
            [lost] int64 request ids (marked in `lost`; they never finish: a resend is a
            new request, `on_lost`).
        """
        return drop_rank(self, rank, now_s)

    # -- one step ------------------------------------------------------------------------------
    def plan(self, now_s: float, alive: np.ndarray | None = None,
             formed_s: float | None = None) -> Plan:
        """Admit arrivals and form this step's batch on every rank.

        Args:
            alive: [ranks] bool; a dead rank admits nothing and runs nothing (None: all alive).
            formed_s: when SGLang's overlap loop formed this batch, the start of the step then
                in flight: only arrivals before it are taken in (`epsim.sim.recv.forms_ahead`;
                a send at that very time answers a request the step before it finished, whose
                tokens the loop sent just before it received; None: the batch forms at `now_s`
                and takes in every arrival up to it).
        """
        state = self.state
        self._dropped = False
        if alive is not None:
            self.leave_decode_path()
        path = self.decode_path
        if path is not None:
            path.in_flight = None
        clock = state.clock
        if clock.opened_s is None and now_s >= clock.window_start_s:
            if path is not None:
                path.stamp_clock()
            clock.open_if_due(now_s, state.slot_req, self.slot_tokens())
        recv = self.recv
        seen_s = now_s if formed_s is None else float(np.nextafter(formed_s, -np.inf))
        # what a batch took in stays taken: a batch formed at once by an idle loop saw up to
        # its start, which the batch formed behind it does not see before
        seen_s = self._seen_s = max(seen_s, self._seen_s)
        if recv is not None:
            seen_s = recv.before_step(seen_s, idle=not state.used.any())
        fresh, num_waiting = self._admit(seen_s, alive)
        occupied = state.used if alive is None else state.used & alive[:, None]
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
                inputs = (None if self.max_prefill_tokens is None else
                          np.full(self.num_ranks, self.max_prefill_tokens, dtype=np.int64))
                if self.mixed_chunk:
                    riding = decoding.sum(axis=1)
                    budget = np.maximum(budget - riding, 0)
                    if inputs is not None:
                        inputs = inputs - riding
                ext = extend_counts(pending, budget, state.slot_req, self.prefill_left, self._context,
                                    inputs)
                alloc, finishing = ext.alloc, ext.finishing
                prefill_tokens, prefill_context = ext.prefill_tokens, ext.prefill_context
                prefill_pairs, prefill_seqs = ext.prefill_pairs, ext.prefill_seqs
                finishing_count = ext.finishing_count
        if self.mode == "decode" and alive is None:   # every used slot decodes; free slots hold 0
            decode_tokens = state.occupied.astype(np.float64)
            decode_context = state.context_sum + decode_tokens
        else:
            decode_tokens = decoding.sum(axis=1).astype(np.float64)
            decode_context = (self._context * decoding).sum(axis=1) + decode_tokens
        phase = "prefill" if (self.mode == "prefill" or (alloc is not None and prefill_tokens.any())
                              ) else "decode"
        batch = BatchCounts(decode_tokens, decode_context, prefill_tokens, prefill_context,
                            prefill_pairs, decode_tokens + finishing_count, phase, prefill_seqs)
        if self.kv is not None:
            self.kv.record(now_s, self._kv_used(), decode_tokens, self._kv_held)
        if recv is not None:
            recv.after_plan(phase, float(batch.tokens.sum()))
        if self.spec is not None and decode_tokens.any():      # a verify step (`speculative`)
            return Plan(verify_counts(batch, self.draft_tokens), decoding, alloc, finishing, fresh,
                        num_waiting, decode_tokens, decode_context)
        return Plan(batch, decoding, alloc, finishing, fresh, num_waiting)

    def commit(self, plan: Plan, now_s: float) -> StepGaps:
        """Apply a finished step at `now_s`: tokens produced, first tokens, completions.

        Returns:
            the inter-token gaps the step closed (its ITL).
        """
        if self.decode_path is not None:
            return self.decode_path.commit(plan.fresh_ids, now_s)
        state = self.state
        dropped = self._dropped
        if dropped:                       # a rank failed mid-step: its part of the step is lost
            plan = without_freed(plan, state)
        decoding = plan.decoding
        emitting = decoding if plan.finishing_prefill is None else decoding | plan.finishing_prefill
        if plan.requests is not None:        # a verify step: each request gets k tokens
            made = self.spec.verify_tokens(decoding, self._out_left)
            if state.clock.opened_s is not None:      # the window's verifies: the accept length
                self.spec_tokens += int(made.sum())
                self.spec_verifies += int(np.count_nonzero(decoding))
            gaps = state.clock.emit(now_s, emitting, made)
            self._context += made
            state.context_sum += made.sum(axis=1)
            self._out_left -= made
            self.emitted_tokens = float(made.sum())
            state.output_tokens_done += self.emitted_tokens
        else:
            gaps = state.clock.emit(now_s, emitting) if emitting is not None else NO_GAPS
            self._context += decoding
            state.context_sum += (decoding.sum(axis=1) if dropped
                                  else plan.batch.decode_tokens.astype(np.int64))
            self._out_left -= decoding
            self.emitted_tokens = float(plan.batch.decode_tokens.sum())
            state.output_tokens_done += self.emitted_tokens
        if plan.fresh_ids is not None:
            state.first_token_s[plan.fresh_ids] = now_s
        if plan.prefill_alloc is not None:
            alloc, finishing = plan.prefill_alloc, plan.finishing_prefill
            self._context += alloc
            state.context_sum += (alloc.sum(axis=1) if dropped
                                  else plan.batch.prefill_tokens.astype(np.int64))
            self.prefill_left -= alloc
            self._out_left -= finishing
            state.first_token_s[state.slot_req[finishing]] = now_s
            state.input_tokens_done += float(alloc.sum())
            state.output_tokens_done += float(finishing.sum())
        done = np.flatnonzero(self._out_left <= 0)                        # flat slot indices
        if done.shape[0]:
            context = self._context.reshape(-1)
            state.finish(done, context[done], now_s)
            context[done] = 0
            self._out_left.reshape(-1)[done] = EMPTY_LEFT
        return gaps

    # -- many steps at once (`epsim.sim.saturation`, for `epsim.sim.leap`) -------------------
    def may_saturate(self) -> bool:
        """A quick test before `saturated`: the decode path, a few free slots at most."""
        return (self.decode_path is not None and self.mode == "decode" and self.recv is None
                and self.state.num_free() <= FEW_FREE)

    def saturated(self, now_s: float, max_steps: int) -> Saturated | None:
        """The next steps while the decode instance stays saturated, formed without changing
        anything (`apply_saturated` then applies the first k of them); the step that opens the
        measurement window (`window_due_s`) must be planned as usual. None: not saturated
        (`epsim.sim.saturation`)."""
        if not (self.may_saturate() and self.queues.one_epoch() and max_steps >= 1):
            return None
        return saturated_steps(self.state, self.decode_path, self.queues, now_s, max_steps,
                               self.kv)

    def saturated_batch(self) -> BatchCounts:
        """The batch of every saturated step: full on every rank."""
        return saturated_batch(self.num_ranks, self.max_running)

    def apply_saturated(self, sat: Saturated, num: int, start_s: np.ndarray,
                        end_s: np.ndarray) -> Applied:
        """Apply the first `num` steps of `sat`, which start at `start_s` and end at `end_s`
        ([num] s): what `plan` and `commit` of each would have done."""
        self._dropped = False
        if self.kv is not None:
            self.kv.record_full_steps(start_s, sat.context_sum[:num], float(self.max_running))
        return apply_saturated(sat, num, start_s, end_s, self.state, self.decode_path, self.queues)

    def quiet(self, now_s: float, max_steps: int) -> Quiet | None:
        """The next steps while every running request decodes and none finishes or joins,
        formed without changing anything (`epsim.sim.quiet`); None: fewer than two."""
        return quiet_steps(self, now_s, max_steps)

    def apply_quiet(self, quiet: Quiet, num: int, start_s: np.ndarray,
                    end_s: np.ndarray) -> Applied:
        """Apply the first `num` steps of `quiet` ([num] s `start_s`, `end_s`)."""
        return apply_quiet(self, quiet, num, start_s, end_s)
