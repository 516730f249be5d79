"""A client's resends of the requests a failed rank lost (`epsim.sim.retries`): when they go, where
they are routed, what their TTFT counts from, and a closed loop's clients waiting on them."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.errors import SpecError
from epsim.report import summarize
from epsim.report.summary import request_latencies_ms
from epsim.sim.arrivals import Requests
from epsim.sim.batching import Scheduler
from epsim.sim.rank_queues import RankQueues
from epsim.sim.retries import resend_times
from epsim.spec.workload import RetrySpec
from tests.epsim.sim.test_elastic import DETECT_S, FAIL_S, failing_scenario, run


def test_resend_times_wait_out_the_timeout_then_back_off():
    # sent at 0.0 / 4.0 / 1.0, lost at 5.0; timeout 2 s, 3 sends at most, backoff 0.1 s x 1.5^k
    resend, at_s = resend_times(np.array([0.0, 4.0, 1.0, 1.0]), np.array([1, 1, 2, 3]), 5.0,
                                timeout_s=2.0, max_attempts=3, backoff_s=0.1)
    assert resend.tolist() == [True, True, True, False]
    # timed out already: noticed at the loss; not yet: at send + timeout; the third send gives up
    assert at_s == pytest.approx([5.1, 6.1, 5.15, 5.0])


def test_a_send_in_between_is_routed_by_its_arrival_and_keeps_its_id():
    queues = RankQueues(np.array([0.1, 0.2, 0.3, 0.4]), 3)
    queues.route_to(np.array([True, False, True]), 0.15)       # arrivals 1.. over ranks 0, 2
    queues.add([0.25], [10])
    # arrival order 0.1 (id 0), 0.2 (1), 0.25 (10), 0.3 (2), 0.4 (3): id 0 to rank 0, then ranks
    # 0 and 2 in turn by arrival order (j % 2): id 1 to rank 2, id 10 to 0, id 2 to 2, id 3 to 0
    assert queues.arrived(0.5).tolist() == [3, 0, 2]
    assert queues.arrived(0.25).tolist() == [2, 0, 1]
    assert queues.request_ids(np.array([0, 0, 0, 2, 2]), np.array([0, 1, 2, 0, 1])).tolist() == \
        [0, 10, 3, 1, 2]
    assert queues.next_arrival_s(0.2) == 0.25 and queues.arrival_s.tolist() == [0.1, 0.2, 0.25, 0.3, 0.4]


def test_scheduler_resends_a_lost_request_as_a_new_one_from_its_first_send():
    reqs = Requests(np.arange(12) * 0.1, np.full(12, 8, np.int64), np.full(12, 100, np.int64))
    sched = Scheduler(reqs, num_ranks=3, max_running=2, chunk_tokens=100, mode="decode",
                      retry=RetrySpec(timeout_s=0.2, max_attempts=2, backoff_s=0.05))
    sched.plan(0.5)                            # ids 0..5 arrived: rank 1 runs ids 1 (0.1) and 4 (0.4)
    sched.route_to(np.array([True, False, True]), 0.5)
    lost = sched.drop_rank(1, 0.5)
    assert sorted(lost.tolist()) == [1, 4]
    state = sched.state
    # resent as ids 12, 13: id 1 timed out already (0.1 + 0.2 < 0.5), id 4 at 0.6; then 50 ms
    assert sched.retries.sent_s == pytest.approx({12: 0.55, 13: 0.65})
    assert sched.retries.origin == {12: 1, 13: 4}
    assert state.arrival_s[[12, 13]].tolist() == [0.1, 0.4]        # TTFT counts from the first send
    assert state.input_len[[12, 13]].tolist() == [8, 8] and state.output_len[[12, 13]].tolist() == [100, 100]
    assert sched.retries.retry_of(14).tolist() == [-1] * 12 + [1, 4]
    # by arrival from 0.5 on, over ranks 0 and 2: 0.55 (id 12) to 0, 0.6 (6) to 2, 0.65 (13) to 0
    # (id 7 arrives at 0.1 * 7, a hair after 0.7)
    assert sched.arrived(0.7).tolist() == [4, 2, 3]
    assert sched.queues.request_ids(np.array([0, 0]), np.array([2, 3])).tolist() == [12, 13]
    # rank 0 fails too: id 12 is lost again (its second send) and its client gives up, while
    # ids 0 and 3 (first sends) are resent, as ids 14 and 15
    sched.plan(0.7)
    sched.route_to(np.array([False, False, True]), 0.7)
    assert sorted(sched.drop_rank(0, 0.7).tolist()) == [0, 3, 12, 13]
    assert sched.state.count == 16
    assert {k: v for k, v in sched.retries.origin.items() if k >= 14} == {14: 0, 15: 3}
    assert sched.retries.attempt[14] == 2 and sorted(sched.retries.origin.values()) == [0, 1, 3, 4]


def resent(workload=None):
    return run(failing_scenario(workload={"retry": {"timeout_s": 0.02, "max_attempts": 2,
                                                    "backoff_s": 0.0}, **(workload or {})}))


def test_lost_requests_come_back_and_their_ttft_spans_the_outage():
    sim, res, _ = resent()
    lost = np.flatnonzero(res.lost)
    again = np.flatnonzero(res.retry_of >= 0)
    assert lost.size > 0 and sorted(res.retry_of[again].tolist()) == sorted(lost.tolist())
    # same request, same first send; resent once its 20-ms timeout ran out, not before the loss
    assert (res.arrival_s[again] == res.arrival_s[res.retry_of[again]]).all()
    sent = np.array([sim.scheduler.retries.sent_s[i] for i in again.tolist()])
    assert sent == pytest.approx(np.maximum(FAIL_S, res.arrival_s[again] + 0.02))
    # served after the failure's pause: their first token comes after detection, counted from
    # the first send (the t=0 requests among them stay out of TTFT, as their first sends do)
    served = again[np.isfinite(res.first_token_s[again])]
    assert served.size > 0 and (res.first_token_s[served] > FAIL_S + DETECT_S).all()
    counted = served[~res.is_initial[served]]
    assert counted.size > 0
    summary = summarize(res)
    # TTFT takes each request once: the resend's, from the first send, not the lost send's
    lat = request_latencies_ms(res)
    assert np.isin((res.first_token_s[counted] - res.arrival_s[counted]) * 1e3, lat["ttft_ms"]).all()
    assert lat["ttft_ms"].size == summary["num_requests"]["measured"]
    assert summary["num_requests"]["resent"] == lost.size == res.elastic_events[0]["lost_requests"]
    assert summary["num_requests"]["arrived"] == int((~res.is_initial & (res.retry_of < 0)).sum())


def test_without_a_resend_the_lost_stay_lost():
    _, res, _ = run(failing_scenario())             # bench_serving: one send, a 6-h timeout
    assert res.lost.sum() > 0 and (res.retry_of < 0).all()
    assert summarize(res)["num_requests"]["resent"] == 0


@pytest.mark.parametrize("retry, back", [({}, 0), ({"timeout_s": 0.02}, 1), ({"timeout_s": 0.02,
                                                                              "max_attempts": 2}, 1)])
def test_a_closed_loop_client_waits_on_its_lost_request(retry, back):
    clients = 128
    sim, res, _ = run(failing_scenario(workload={
        "arrivals": {"kind": "concurrency", "clients": clients}, "retry": retry}))
    num_lost = int(res.lost.sum())
    assert num_lost > 0
    sched = sim.scheduler
    in_flight = int(sched.occupied.sum()) + sched.num_waiting(res.duration_s)
    # bench_serving's 6-h timeout: a lost request's client hangs for the run; with a short
    # timeout it gives up and sends its next, or resends the same request
    assert in_flight == clients - num_lost * (1 - back)
    assert int((res.retry_of >= 0).sum()) == (num_lost if retry.get("max_attempts", 1) > 1 else 0)


@pytest.mark.parametrize("retry, message", [
    ({"timeout_s": 0}, r"workload.retry.timeout_s"),
    ({"max_attempts": 0}, r"workload.retry.max_attempts"),
    ({"backoff_s": -1}, r"workload.retry.backoff_s")])
def test_bad_retry_names_the_field(retry, message):
    with pytest.raises(SpecError, match=message):
        failing_scenario(workload={"retry": retry})
