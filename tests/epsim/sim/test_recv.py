"""SGLang's --scheduler-recv-interval (`epsim.sim.recv`): arrivals join at receive points only."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.sim.arrivals import Requests
from epsim.sim.batching import Scheduler
from epsim.sim.recv import RecvSkipper


def test_skipper_counts_decode_steps_and_receives_after_a_prefill():
    recv = RecvSkipper(3)
    assert recv.before_step(0.0, idle=True) == 0.0          # idle: receives at once
    recv.after_plan("prefill", 10)
    assert recv.before_step(1.0, idle=False) == 1.0         # after an extend batch (weight 1000)
    recv.after_plan("decode", 1)
    assert recv.steps_before_receive() == 2
    assert recv.before_step(2.0, idle=False) == 1.0         # counter 1
    recv.after_plan("decode", 1)
    assert recv.before_step(3.0, idle=False) == 1.0         # counter 2
    recv.after_plan("decode", 1)
    assert recv.before_step(4.0, idle=False) == 4.0         # counter 3: receives, back to 0
    recv.after_plan("decode", 1)
    for now in range(recv.steps_before_receive()):          # the steps before the receive
        assert recv.before_step(4.5 + now * 0.1, idle=False) == 4.0
        recv.after_plan("decode", 1)
    assert recv.counter == 2 and recv.before_step(5.0, idle=False) == 5.0
    with pytest.raises(ValueError):
        RecvSkipper(1)


@pytest.mark.parametrize("interval, first_token_s", [(1, 3.0), (3, 5.0)])
def test_a_request_sent_while_decoding_waits_for_the_receive(interval, first_token_s):
    # request 0 prefills in [0, 1) and decodes; request 1 arrives at 1.5. Every step: 1 s.
    reqs = Requests(np.array([0.0, 1.5]), np.array([10, 10], np.int64), np.array([10, 10], np.int64))
    sched = Scheduler(reqs, num_ranks=1, max_running=4, chunk_tokens=100, mode="null",
                      recv_interval=interval)
    for now in range(6):
        plan = sched.plan(float(now))
        sched.commit(plan, now + 1.0)
    # interval 1: received at 2.0, prefilled in [2, 3). Interval 3: the plans at 2 and 3 add 1
    # each after the decode step of [1, 2) (the plan at 1 received after the prefill), the plan
    # at 4 reaches 3 and receives: prefilled in [4, 5)
    assert sched.state.first_token_s[1] == first_token_s
    assert sched.state.first_token_s[0] == 1.0


@pytest.mark.parametrize("arrival_s, overlap_first_token_s", [(1.5, 4.0), (2.0, 5.0)])
def test_the_overlap_loop_takes_in_only_what_came_before_the_step_in_flight(
        arrival_s, overlap_first_token_s):
    # SGLang's overlap loop forms the batch of [k, k+1) as the step [k-1, k) starts
    # (`recv.forms_ahead`): a request sent at 1.5 misses the batch formed at 1 and is prefilled
    # in [3, 4); one sent at 2.0, as a step ends, misses the batch formed at 2 as well (the loop
    # sent that step's tokens just before it received): [4, 5). The normal loop forms each batch
    # as it starts: [2, 3) for both. Every step: 1 s; request 0 arrives to an idle loop.
    for ahead, first_token_s in ((False, 3.0), (True, overlap_first_token_s)):
        reqs = Requests(np.array([0.0, arrival_s]), np.array([10, 10], np.int64),
                        np.array([10, 10], np.int64))
        sched = Scheduler(reqs, num_ranks=1, max_running=4, chunk_tokens=100, mode="null")
        for now in range(6):
            formed_s = float(now - 1) if ahead and now > 0 else None
            plan = sched.plan(float(now), formed_s=formed_s)
            sched.commit(plan, now + 1.0)
        assert sched.state.first_token_s[0] == 1.0
        assert sched.state.first_token_s[1] == first_token_s


@pytest.mark.parametrize("mode, disable, spec, ahead", [
    ("null", False, None, True), ("prefill", False, None, True), ("prefill", True, None, False),
    ("prefill", False, "EAGLE", False), ("decode", False, None, False)])
def test_which_loops_form_ahead(mode, disable, spec, ahead):
    # SGLang's overlap loops, agg and P/D prefill, form a batch a step ahead; a P/D decode's
    # prebuilt batch gives a transferred request's first token as the step after the one in
    # flight ends, which a batch formed at once lands too (module doc); `event_loop_normal`
    # (`--disable-overlap-schedule`, the v1 speculative worker) forms each batch as it starts
    from types import SimpleNamespace

    from epsim.sim.recv import forms_ahead
    deployment = SimpleNamespace(disaggregation_mode=mode, disable_overlap_schedule=disable,
                                 speculative_algorithm=spec)
    assert forms_ahead(deployment) is ahead
