"""Continuous batching: slots, FCFS chunked prefill, decode, disaggregated modes, dead ranks."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.sim.arrivals import Requests
from epsim.sim.batching import Scheduler
from epsim.sim.initial_requests import initial_ranks


def _requests(arrival, input_len, output_len) -> Requests:
    return Requests(np.asarray(arrival, float), np.asarray(input_len, np.int64),
                    np.asarray(output_len, np.int64))


def _step(sched: Scheduler, now_s: float, end_s: float, alive=None):
    plan = sched.plan(now_s, alive)
    sched.commit(plan, end_s)
    return plan


def test_round_robin_and_max_running():
    reqs = _requests(np.zeros(10), [8] * 10, [4] * 10)
    sched = Scheduler(reqs, num_ranks=2, max_running=3, chunk_tokens=1000, mode="decode")
    plan = sched.plan(0.0)
    assert sched.occupied.tolist() == [3, 3]
    assert plan.num_waiting == 4
    # request i lives on rank i % 2; rank 0 took 0, 2, 4 in order
    assert sorted(sched.slot_req[0].tolist()) == [0, 2, 4]
    assert sorted(sched.slot_req[1].tolist()) == [1, 3, 5]
    np.testing.assert_allclose(plan.batch.decode_tokens, [3, 3])
    # decode reads the whole context of each request (8 prompt + 1 new token)
    np.testing.assert_allclose(plan.batch.decode_context, [27, 27])


def test_decode_mode_first_token_and_completion():
    reqs = _requests([0.0, 0.0], [5, 5], [1, 3])
    sched = Scheduler(reqs, num_ranks=1, max_running=4, chunk_tokens=100, mode="decode")
    _step(sched, 0.0, 1.0)
    assert sched.state.first_token_s.tolist() == [1.0, 1.0]
    assert sched.state.finish_s[0] == 1.0 and np.isnan(sched.state.finish_s[1])
    _step(sched, 1.0, 2.0)
    _step(sched, 2.0, 3.0)
    assert sched.state.finish_s[1] == 3.0
    assert sched.occupied.tolist() == [0]
    assert sched.state.output_tokens_done == 4


def test_chunked_prefill_is_fcfs_within_the_budget():
    reqs = _requests([0.0, 0.0], [150, 30], [2, 2])
    sched = Scheduler(reqs, num_ranks=1, max_running=4, chunk_tokens=100, mode="null")
    first = _step(sched, 0.0, 1.0)
    assert first.batch.phase == "prefill"
    np.testing.assert_allclose(first.batch.prefill_tokens, [100])       # all to the oldest
    np.testing.assert_allclose(first.batch.prefill_pairs, [100 * 101 / 2])
    second = _step(sched, 1.0, 2.0)
    np.testing.assert_allclose(second.batch.prefill_tokens, [80])       # 50 + 30
    # second chunk of request 0: 50 queries over a 100-token prefix
    assert second.batch.prefill_pairs[0] == 50 * 100 + 50 * 51 / 2 + 30 * 31 / 2
    assert sched.state.first_token_s.tolist() == [2.0, 2.0]
    third = _step(sched, 2.0, 3.0)
    assert third.batch.phase == "decode"
    np.testing.assert_allclose(third.batch.decode_tokens, [2])
    assert sched.state.finish_s.tolist() == [3.0, 3.0]


def test_max_prefill_tokens_admits_a_prompt_only_below_the_batch_s_input_budget():
    # SGLang's PrefillAdder: the first request always joins; a later one only while its prompt
    # is below what the batch left of --max-prefill-tokens; the first refused ends the batch
    reqs = _requests(np.zeros(4), [4000, 4000, 1000, 1000], [3] * 4)
    sched = Scheduler(reqs, num_ranks=1, max_running=8, chunk_tokens=8192, mode="null",
                      max_prefill_tokens=4000 + 1500)
    counts = [_step(sched, float(i), float(i + 1)).batch.prefill_tokens[0] for i in range(3)]
    # 4000 | 4000 + 1000 (1000 < 1500 left), then 1000 (500 left: refused) | 1000
    assert counts == [4000, 5000, 1000]
    assert sched.state.first_token_s.tolist() == [1.0, 2.0, 2.0, 3.0]
    # unset, the 8192-token chunk takes the first two whole and the third's first 192 tokens
    free = Scheduler(reqs, num_ranks=1, max_running=8, chunk_tokens=8192, mode="null")
    assert _step(free, 0.0, 1.0).batch.prefill_tokens[0] == 8192


def test_max_prefill_tokens_budget_shrinks_by_the_decodes_a_mixed_chunk_carries():
    # mixed chunks: rem_input_tokens starts at max_prefill_tokens less the running decodes
    reqs = _requests([0.0, 0.5, 0.5], [10, 600, 399], [9, 2, 2])
    for mixed, expect in ((False, 999), (True, 600)):
        sched = Scheduler(reqs, num_ranks=1, max_running=4, chunk_tokens=8192, mode="null",
                          mixed_chunk=mixed, max_prefill_tokens=1000)
        _step(sched, 0.0, 0.6)                      # request 0 prefilled, decoding from now on
        plan = _step(sched, 0.6, 1.0)               # 600 joins; 399 < 400 left, not < 399
        assert plan.batch.prefill_tokens[0] == expect


def test_prefill_stalls_decode_unless_mixed_chunk():
    reqs = _requests([0.0, 0.5], [10, 10], [5, 5])
    for mixed, expect_decode in ((False, 0), (True, 1)):
        sched = Scheduler(reqs, num_ranks=1, max_running=4, chunk_tokens=100, mode="null",
                          mixed_chunk=mixed)
        _step(sched, 0.0, 0.6)                      # request 0 prefilled
        plan = _step(sched, 0.6, 1.0)               # request 1 arrives: an extend step
        assert plan.batch.prefill_tokens[0] == 10
        assert plan.batch.decode_tokens[0] == expect_decode


def test_prefill_instance_ends_requests_at_the_first_token():
    reqs = _requests([0.0], [40], [100])
    sched = Scheduler(reqs, num_ranks=1, max_running=4, chunk_tokens=32, mode="prefill")
    assert _step(sched, 0.0, 1.0).batch.phase == "prefill"
    _step(sched, 1.0, 2.0)
    assert sched.state.first_token_s[0] == 2.0 and sched.state.finish_s[0] == 2.0
    assert sched.state.input_tokens_done == 40


def test_initial_requests_are_placed_part_way():
    reqs = _requests([], [], [])
    init = _requests(np.zeros(4), [10, 10, 10, 10], [5, 5, 5, 5])
    sched = Scheduler(reqs, num_ranks=2, max_running=4, chunk_tokens=10, mode="decode",
                      initial=init, initial_progress=np.array([0, 2, 4, 9]))
    assert sched.occupied.tolist() == [2, 2]
    # progress is capped so every initial request still has a token to make
    np.testing.assert_array_equal(np.sort(sched.out_left[sched.slot_req >= 0]), [1, 1, 3, 5])
    _step(sched, 0.0, 1.0)
    assert np.isfinite(sched.state.finish_s).sum() == 2
    assert sched.state.is_initial.all()


def test_initial_requests_by_room_sit_on_drawn_ranks_within_the_slots():
    # a room-routed server's steady start: a multinomial spread, each rank at most max_running
    ranks = initial_ranks(4000, 8, 600, np.random.default_rng(1))
    counts = np.bincount(ranks, minlength=8)
    assert counts.sum() == 4000 and counts.max() <= 600 and counts.min() < 500 < counts.max()
    tight = np.bincount(initial_ranks(30, 3, 10, np.random.default_rng(2)), minlength=3)
    assert tight.tolist() == [10, 10, 10]                  # a full server: the excess moved
    with pytest.raises(ValueError, match="must fit"):
        initial_ranks(31, 3, 10, np.random.default_rng(2))
    init = _requests(np.zeros(5), [10, 11, 12, 13, 14], [5, 5, 5, 5, 5])
    sched = Scheduler(_requests([], [], []), num_ranks=2, max_running=4, chunk_tokens=10,
                      mode="decode", initial=init, rooms_seed=3)
    held = {int(r): sorted(sched.slot_req[r][sched.slot_req[r] >= 0].tolist()) for r in range(2)}
    assert sorted(held[0] + held[1]) == [0, 1, 2, 3, 4]
    assert sched.occupied.tolist() == [len(held[0]), len(held[1])]
    # each slot holds its own request's context
    for r in range(2):
        for c in range(int(sched.occupied[r])):
            assert sched._context[r, c] == 10 + sched.slot_req[r, c]


def test_dead_rank_admits_and_runs_nothing():
    reqs = _requests(np.zeros(4), [5] * 4, [3] * 4)
    sched = Scheduler(reqs, num_ranks=2, max_running=4, chunk_tokens=10, mode="decode")
    alive = np.array([True, False])
    plan = _step(sched, 0.0, 1.0, alive)
    np.testing.assert_allclose(plan.batch.tokens, [2, 0])
    assert sched.occupied.tolist() == [2, 0] and plan.num_waiting == 2
    assert sched.arrived(0.0).tolist() == [2, 2]
    assert sched.next_arrival_s(0.0) == np.inf


def test_context_sums_follow_the_slots_in_every_mode(rng):
    """`context_sum` (kept step by step so decode steps need no pass over the slots) equals the
    slots' contexts summed per rank, through admissions, completions, prefill and a dropped rank."""
    num = 200
    reqs = _requests(np.sort(rng.random(num)) * 2.0, rng.integers(1, 300, num),
                     rng.integers(1, 40, num))
    for mode, mixed in (("decode", False), ("null", False), ("null", True), ("prefill", False)):
        sched = Scheduler(reqs, num_ranks=3, max_running=5, chunk_tokens=64, mode=mode,
                          mixed_chunk=mixed)
        now = 0.0
        for step in range(300):
            plan = sched.plan(now)
            if step == 150:
                sched.drop_rank(1, now)               # mid-step, as a failure lands
                sched.route_to(np.array([True, False, True]), now)
            now += 0.01
            sched.commit(plan, now)
            np.testing.assert_array_equal(sched.state.context_sum, sched.context.sum(axis=1),
                                          err_msg=f"{mode} mixed={mixed} step {step}")


def _scheduler_state(sched: Scheduler) -> dict:
    gaps = sched.window_gaps()
    return {"context": sched.context, "out_left": sched.out_left, "slot_req": sched.slot_req,
            "context_sum": sched.state.context_sum, "occupied": sched.occupied,
            "first": sched.state.first_token_s, "finish": sched.state.finish_s, "lost": sched.state.lost,
            # a free slot's last-token time is never read again (admission resets it)
            "last_s": np.where(sched.slot_req >= 0, sched.state.clock.last_s, -1.0),
            "count": gaps.count, "span": gaps.span_s}


@pytest.mark.parametrize("fail_planned_alive", [True, False])
def test_decode_path_keeps_the_bits_of_the_per_slot_one(rng, fail_planned_alive):
    """The decode path (finish steps, bulk last-token times) gives exactly what the per-slot
    arrays give, step by step: batches, inter-token gaps, first and last tokens, the window's
    TPOT gaps; through initial requests, the window opening, a stall and a failing rank (that
    lands in a step planned with every rank alive, or in one planned without it)."""
    num = 400
    reqs = _requests(np.sort(rng.random(num)) * 3.0, rng.integers(1, 300, num),
                     rng.integers(1, 60, num))
    # 80 initial requests: more than admission walks one by one (`_FEW_FREE`)
    init = _requests(np.zeros(80), rng.integers(1, 300, 80), rng.integers(1, 60, 80))
    progress = rng.integers(0, 60, 80)
    runs = []
    for per_slot in (False, True):
        sched = Scheduler(reqs, num_ranks=4, max_running=24, chunk_tokens=64, mode="decode",
                          initial=init, initial_progress=progress, window_start_s=0.5)
        if per_slot:
            sched.leave_decode_path()              # the per-slot arrays from the start
        assert (sched.decode_path is not None) is not per_slot
        now, seen = 0.0, []
        for step in range(400):
            if step == 100:
                now += 0.3                           # a stall: the next gap holds it
            if step == 150:                          # the step's state as the decode path keeps it
                seen.append({k: np.copy(v) for k, v in _scheduler_state(sched).items()})
            alive = (None if step < 300 or (step == 300 and fail_planned_alive)
                     else np.array([True, True, False, True]))
            plan = sched.plan(now, alive)
            if step == 300:
                sched.drop_rank(2, now)               # mid-step, as a failure lands
                sched.route_to(np.array([True, True, False, True]), now)
            now += 0.01
            gaps = sched.commit(plan, now)
            seen.append((plan.batch.decode_tokens.tolist(), plan.batch.decode_context.tolist(),
                         gaps.count, gaps.mean_s, gaps.max_s))
        assert sched.decode_path is None              # the failure ends the decode path
        seen.append(_scheduler_state(sched))
        runs.append(seen)
    lazy, per_slot = runs
    assert len(lazy) == len(per_slot)
    for a, b in zip(lazy, per_slot):
        if isinstance(a, dict):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a == b
    assert lazy[-1]["count"].sum() > 1000 and np.isfinite(lazy[-1]["finish"]).sum() > 100


def test_admission_takes_the_lowest_free_slots_oldest_first(rng):
    """With many free slots (short batches: only the admitting ranks' rows are read) and with
    few (full batches: a kept list walked in Python), each rank's arrivals take its lowest free
    slots, oldest request first, through a dropped rank."""
    num, ranks = 3000, 4
    reqs = _requests(np.sort(rng.random(num)) * 3.0, rng.integers(1, 50, num),
                     rng.integers(1, 30, num))
    for mode in ("decode", "null"):
        sched = Scheduler(reqs, num_ranks=ranks, max_running=40, chunk_tokens=64, mode=mode)
        now, regimes = 0.0, set()
        for step in range(400):
            before = sched.slot_req.copy()
            plan = sched.plan(now)
            filled = (sched.slot_req >= 0) & (before < 0)
            if filled.any():
                regimes.add(int((before < 0).sum()) <= 64)
            for r in range(ranks):
                slots = np.flatnonzero(filled[r])
                assert slots.tolist() == np.flatnonzero(before[r] < 0)[:slots.shape[0]].tolist()
                ids = sched.slot_req[r, slots]
                assert (np.diff(ids) > 0).all()                       # arrival order
                assert step > 200 or (ids % ranks == r).all()         # round-robin until the drop
            if step == 200:
                sched.drop_rank(1, now)
                sched.route_to(np.array([True, False, True, True]), now)
            now += 0.01
            sched.commit(plan, now)
        assert regimes == {True, False}, (mode, regimes)     # both admission paths ran
