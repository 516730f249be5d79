"""Closed-loop clients: sends follow completions; TTFT and TPOT as bench_serving counts them."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.errors import SpecError
from epsim.report import summarize
from epsim.report.benchmark import weighted_percentile
from epsim.sim import simulate
from epsim.sim.clients import ClosedLoop
from tests.epsim.sim.test_engine import tiny_scenario


def _closed(clients: int, think_s: float = 0.0, mode: str = "decode", **workload):
    return tiny_scenario(
        deployment={"disaggregation_mode": mode},
        workload={"arrivals": {"kind": "concurrency", "clients": clients, "think_time_s": think_s},
                  "input_len": {"kind": "fixed", "value": 64},
                  "output_len": {"kind": "fixed", "value": 8},
                  "duration_s": 0.6, "warmup_s": 0.0, **workload})


@pytest.mark.parametrize("think_s", [0.0, 0.004])
def test_one_client_ttft_and_tpot_follow_from_the_step_times(think_s):
    # one client, fixed lengths, a decode instance: request i is sent when request i-1 ended
    # (plus the think time), its first token ends its first step, and each later step adds one
    # token, so TTFT is its first step's time and TPOT its other steps' mean
    result = simulate(_closed(1, think_s))
    steps = result.steps
    start, end = steps["start_us"] * 1e-6, (steps["start_us"] + steps["step_us"]) * 1e-6
    done = np.flatnonzero(np.isfinite(result.finish_s))
    assert done.shape[0] >= 5
    out = 8
    for i in done:
        first = int(np.flatnonzero(np.isclose(end, result.first_token_s[i], atol=1e-12))[0])
        # no queueing (the engine's clock is in µs: a send after an idle wait may start 1 µs late)
        assert start[first] == pytest.approx(result.arrival_s[i], abs=2e-6)
        assert result.finish_s[i] == pytest.approx(end[first + out - 1], abs=1e-12)
        ttft = result.first_token_s[i] - result.arrival_s[i]
        assert ttft == pytest.approx(steps["step_us"][first] * 1e-6, abs=2e-6)
        tpot = (result.finish_s[i] - result.first_token_s[i]) / (out - 1)
        assert tpot == pytest.approx(steps["step_us"][first + 1:first + out].mean() * 1e-6,
                                     rel=1e-9)
        if i + 1 < result.arrival_s.shape[0]:       # the next send: its end plus the think time
            assert result.arrival_s[i + 1] == pytest.approx(result.finish_s[i] + think_s, abs=1e-12)
    bench = summarize(result)["bench_serving"]
    ttft_ms = (result.first_token_s[done] - result.arrival_s[done]) * 1e3
    tpot_ms = (result.finish_s[done] - result.first_token_s[done]) / (out - 1) * 1e3
    assert bench["completed"] == done.shape[0]
    assert bench["mean_ttft_ms"] == pytest.approx(ttft_ms.mean())
    assert bench["median_tpot_ms"] == pytest.approx(np.median(tpot_ms))
    assert bench["p99_tpot_ms"] == pytest.approx(np.percentile(tpot_ms, 99))


def test_clients_hold_their_number_in_flight():
    # 8 clients on 4 ranks: every finish is followed by a send at the same time, so at every
    # step's end 8 requests are in flight (sent and not finished)
    result = simulate(_closed(8))
    steps = result.steps
    ends = (steps["start_us"] + steps["step_us"]) * 1e-6
    finish = np.where(np.isfinite(result.finish_s), result.finish_s, np.inf)
    in_flight = ((result.arrival_s[None, :] <= ends[:, None])
                 & (finish[None, :] > ends[:, None])).sum(axis=1)
    assert (in_flight == 8).all()
    assert steps["num_running"].max() == 8
    sent = np.flatnonzero(~result.is_initial)
    assert result.arrival_s[sent][:8].tolist() == [0.0] * 8
    ended = np.sort(result.finish_s[np.isfinite(result.finish_s)])
    assert np.allclose(np.sort(result.arrival_s[8:]), ended[:result.arrival_s.shape[0] - 8])


def test_a_benchmark_run_sends_its_requests_then_drains():
    # bench_serving --num-prompts 20 --max-concurrency 8: 8 sends at t=0, then one per finish
    # until 20 are sent; the last 8 finish with nothing sent after them
    def closed(num_requests):
        sc = _closed(8, duration_s=2.0)
        arrivals = sc.workload.arrivals.model_copy(update={"num_requests": num_requests})
        return sc.model_copy(update={"workload": sc.workload.model_copy(update={"arrivals": arrivals})})
    result = simulate(closed(20))
    assert result.arrival_s.shape[0] == 20
    assert (result.arrival_s[:8] == 0).all()
    assert np.isfinite(result.finish_s).all()
    ended = np.sort(result.finish_s)
    assert np.allclose(np.sort(result.arrival_s[8:]), ended[:12])     # the 12 later sends
    unbounded = simulate(closed(None))
    assert unbounded.arrival_s.shape[0] > 20
    np.testing.assert_array_equal(unbounded.arrival_s[:20], result.arrival_s)


def test_closed_loop_starts_part_way_and_keeps_its_clients():
    # 2 per rank running at t=0 (8 of 10 clients), the other 2 send at t=0
    result = simulate(_closed(10, initial_running_per_rank=2))
    assert int(result.is_initial.sum()) == 8
    assert (result.arrival_s[~result.is_initial][:2] == 0).all()
    ends = (result.steps["start_us"] + result.steps["step_us"]) * 1e-6
    finish = np.where(np.isfinite(result.finish_s), result.finish_s, np.inf)
    in_flight = ((result.arrival_s[None, :] <= ends[:, None])
                 & (finish[None, :] > ends[:, None])).sum(axis=1)
    assert (in_flight == 10).all()


def test_colocated_closed_loop_prefills_then_decodes():
    result = simulate(_closed(4, mode="null"))
    done = np.isfinite(result.finish_s)
    assert done.sum() >= 4
    assert (result.first_token_s[done] > result.arrival_s[done]).all()
    assert summarize(result)["bench_serving"]["mean_tpot_ms"] > 0


def test_closed_loop_same_seed_same_run():
    a, b = simulate(_closed(6)), simulate(_closed(6))
    np.testing.assert_array_equal(a.finish_s, b.finish_s)
    np.testing.assert_array_equal(a.steps["step_us"], b.steps["step_us"])


def test_random_lengths_as_bench_serving_draws_them():
    # bench_serving: randint(max(int(L * r), 1), L + 1)
    sc = _closed(4, input_len={"kind": "random", "value": 100, "range_ratio": 0.5})
    loop = ClosedLoop(sc.workload, seed=3, num_initial=0)
    inputs, _ = loop.lengths(0, 5000)
    assert inputs.min() == 50 and inputs.max() == 100
    assert inputs.mean() == pytest.approx(75, abs=1)
    again = ClosedLoop(sc.workload, seed=3, num_initial=0).lengths(0, 10)[0]
    np.testing.assert_array_equal(again, inputs[:10])


def test_bad_closed_loop_input_names_the_field():
    with pytest.raises(SpecError, match=r"workload.arrivals.clients"):
        _closed(0)
    with pytest.raises(SpecError, match=r"workload.arrivals.num_requests"):
        tiny_scenario(workload={"arrivals": {"kind": "concurrency", "clients": 2, "num_requests": 0}})
    with pytest.raises(SpecError, match=r"range_ratio"):
        _closed(2, input_len={"kind": "random", "value": 10, "range_ratio": 1.5})


def test_weighted_percentile_is_numpys_of_the_repeated_samples():
    rng = np.random.default_rng(0)
    values, weights = rng.random(40), rng.integers(0, 5, 40)
    weights[0] = 1
    for q in (0, 7, 50, 95, 99, 100):
        assert weighted_percentile(values, weights, q) == pytest.approx(
            np.percentile(np.repeat(values, weights), q))


def test_closed_loop_keeps_up_by_construction():
    keep = summarize(simulate(_closed(8)))["keep_up"]
    assert keep["ok"] and keep["verdict"].startswith("closed loop of 8 clients")


def test_steady_model_of_a_closed_decode_loop_is_its_batch():
    # 8 clients on 4 ranks: 2 per rank; the screen's TPOT is a decode step at 2 per rank, the
    # simulation's bench_serving TPOT the same steps' mean (within the load draws' spread)
    from epsim.sim.steady import steady_state
    sc = _closed(8, duration_s=1.0)
    state = steady_state(sc)
    assert state.running_per_rank == 2 and state.keep_up
    bench = summarize(simulate(sc))["bench_serving"]
    assert bench["mean_tpot_ms"] == pytest.approx(state.tpot_s * 1e3, rel=0.05)
    assert bench["request_throughput"] == pytest.approx(state.served_rps, rel=0.1)


def test_max_clients_brackets_the_slo_boundary(tmp_path):
    import yaml

    from epsim.plan.max_rate import find_max_rates
    path = tmp_path / "closed.yaml"
    # 16 slots per rank, 4 ranks: beyond 64 clients some wait for a slot and their TTFT grows
    # by a whole request's time, so a TTFT bound of three steps holds the clients to <= 64
    sc = _closed(4)
    path.write_text(yaml.safe_dump(sc.model_dump(mode="json", exclude={"base_dir"})))
    bound = 3 * steady_tpot_ms(sc)
    answers = find_max_rates(str(path), [], constraints=[f"bench_serving.p99_ttft_ms<={bound}"],
                             workers=1, rel_tol=0.05, out=tmp_path / "res")
    (a,) = answers
    assert a.whole and float(a.rate_per_s).is_integer() and a.fails_at_per_s is not None
    assert a.rate_per_s < a.fails_at_per_s <= a.rate_per_s * 1.05 + 1
    assert 32 <= a.rate_per_s <= 64
    assert a.row["bench_serving.p99_ttft_ms"] <= bound


def steady_tpot_ms(scenario) -> float:
    from epsim.sim.steady import steady_state
    return steady_state(scenario).tpot_s * 1e3


def test_instances_share_the_workload():
    # xPyD: 2 decode instances behind the router, each simulated one gets half the clients
    sc = tiny_scenario(
        deployment={"disaggregation_mode": "decode", "num_instances": 2},
        workload={"arrivals": {"kind": "concurrency", "clients": 8},
                  "input_len": {"kind": "fixed", "value": 64},
                  "output_len": {"kind": "fixed", "value": 8}, "duration_s": 0.6, "warmup_s": 0.0})
    result = simulate(sc)
    ends = (result.steps["start_us"] + result.steps["step_us"]) * 1e-6
    finish = np.where(np.isfinite(result.finish_s), result.finish_s, np.inf)
    in_flight = ((result.arrival_s[None, :] <= ends[:, None])
                 & (finish[None, :] > ends[:, None])).sum(axis=1)
    assert (in_flight == 4).all()
    s = summarize(result)
    assert s["num_instances"] == 2 and s["scenario"]["workload"]["arrivals"]["clients"] == 8
    assert s["keep_up"]["verdict"].startswith("closed loop of 4 clients")
    # an open loop: each instance gets half the rate
    open_loop = tiny_scenario(deployment={"num_instances": 4})
    assert open_loop.one_instance().workload.arrivals.rate_per_s == 100.0
    with pytest.raises(SpecError, match=r"num_instances \(2\) needs poisson, bursty or concurrency"):
        tiny_scenario(deployment={"num_instances": 2},
                      workload={"arrivals": {"kind": "trace", "path": __file__}})


def test_colocated_closed_loop_starts_steady_and_matches_the_steady_model():
    # aggregated serving: prefill and decode on one instance, started at the screen's batch;
    # the normal loop, whose prefill steps the steady model spaces (the overlap loop holds each
    # send a step longer and prefills more of them at once: at 8 output tokens a request its
    # TPOT is 7.0 ms here against the normal loop's 10.4, which the model leaves out;
    # docs/model.md, section 7)
    from epsim.sim.steady import steady_state
    sc = _closed(16, mode="null", initial_running_per_rank="steady", duration_s=1.5,
                 warmup_s=0.5)
    sc = sc.model_copy(update={"deployment": sc.deployment.model_copy(
        update={"disable_overlap_schedule": True})})
    state = steady_state(sc)
    result = simulate(sc)
    assert result.initial_running_per_rank == 4
    bench = summarize(result)["bench_serving"]
    assert bench["mean_tpot_ms"] == pytest.approx(state.tpot_s * 1e3, rel=0.15)


def test_max_clients_line_counts_every_instance():
    # the row's requests_per_s is the simulated instance's, num_gpus every instance's: 2
    # instances of 8 GPUs serving 4 req/s each are 0.5 req/s/GPU
    from epsim.plan.max_rate import MaxRate, max_rate_lines
    row = {"requests_per_s": 4.0, "num_instances": 2.0, "num_gpus": 16.0, "tpot_ms.p99": 30.0,
           "ttft_ms.p99": 100.0}
    answer = MaxRate({}, rate_per_s=64, row=row, fails_at_per_s=66, fails_because="x", whole=True,
                     tried=[(64, True), (66, False)])
    assert "64 clients on 16 GPUs (0.5 req/s/GPU served" in max_rate_lines([answer], [])[1]


def test_overlap_loop_prefills_a_request_behind_the_step_in_flight():
    # aggregated, SGLang's default overlap loop (`epsim.sim.recv.forms_ahead`): a request's
    # prefill step was formed as the step before it started, so that step started after the
    # request was sent, unless the loop sat idle between them; `--disable-overlap-schedule`
    # takes a request into the first step that starts once it is sent
    for disable in (False, True):
        # outputs of 4-16 tokens: the clients fall out of step (fixed ones finish together)
        sc = _closed(6, mode="null", output_len={"kind": "uniform", "low": 4, "high": 16})
        sc = sc.model_copy(update={"deployment": sc.deployment.model_copy(
            update={"disable_overlap_schedule": disable})})
        result = simulate(sc)
        start = result.steps["start_us"] * 1e-6
        end = start + result.steps["step_us"] * 1e-6
        done = np.flatnonzero(np.isfinite(result.first_token_s) & ~result.is_initial)
        formed_behind = 0
        for i in done:
            k = int(np.flatnonzero(np.isclose(end, result.first_token_s[i], atol=1e-12))[0])
            arrival = result.arrival_s[i]
            assert start[k] >= arrival - 2e-6
            if k == 0 or start[k] > end[k - 1] + 2e-6 or result.steps["num_running"][k - 1] == 0:
                continue       # an idle loop, or one with nothing behind the last step, forms at once
            formed_behind += 1
            if disable:
                assert start[k - 1] <= arrival            # the first step after the send
            else:
                assert start[k - 1] > arrival             # formed as that step started
        assert formed_behind >= done.shape[0] // 2


def test_prefill_server_forms_each_batch_behind_the_step_in_flight():
    # a P/D prefill server runs the overlap loop too (`event_loop_overlap_disagg_prefill`,
    # `epsim.sim.recv.forms_ahead`): a step that starts as the last one ends was formed as that
    # one started, taking the arrivals from before it -- or, where that found none, formed as it
    # ends, taking only the arrivals from during it; never both. `--disable-overlap-schedule`
    # forms each batch as its step starts, taking both. Poisson arrivals, ~3 a step, of 16-80
    # tokens under a 64-token chunk: the queue outlasts some steps and drains in others (a
    # chunked prompt's last step takes it too: it was sent before the step ahead started).
    mixed = {}
    for disable in (False, True):
        sc = tiny_scenario(
            deployment={"disaggregation_mode": "prefill", "chunked_prefill_size": 64,
                        "disable_overlap_schedule": disable},
            workload={"input_len": {"kind": "uniform", "low": 16, "high": 80},
                      "output_len": {"kind": "fixed", "value": 1}, "warmup_s": 0.0})
        result = simulate(sc)
        start = result.steps["start_us"] * 1e-6
        end = start + result.steps["step_us"] * 1e-6
        done = np.flatnonzero(np.isfinite(result.first_token_s))
        step_of = np.searchsorted(end, result.first_token_s[done] - 1e-9)
        assert np.allclose(end[step_of], result.first_token_s[done], atol=1e-12)
        mixed[disable] = behind = 0
        for k in range(1, start.shape[0]):
            if start[k] > end[k - 1] + 2e-6:
                continue                 # the loop sat idle: the batch formed as it started
            sent = result.arrival_s[done[step_of == k]]
            assert np.all(sent <= start[k] + 2e-6)
            before = bool(np.any(sent < start[k - 1]))
            behind += before
            mixed[disable] += before and bool(np.any(sent > start[k - 1]))
        assert behind >= 10
    assert mixed[False] == 0
    assert mixed[True] > 0


def _prefill_clients(per_token_s: float, seed: int | None = None):
    """Two clients of a P/D prefill instance whose outputs (16-400 tokens) are decoded
    elsewhere: each waits 1 ms plus `per_token_s` per output token after the first."""
    arrivals = {"kind": "concurrency", "clients": 2, "think_time_s": 0.001,
                "think_per_output_token_s": per_token_s}
    sc = _closed(2, mode="prefill", arrivals=arrivals, duration_s=0.4,
                 output_len={"kind": "uniform", "low": 16, "high": 400})
    return sc if seed is None else sc.model_copy(update={"seed": seed})


def test_prefill_clients_wait_out_their_own_requests_decode():
    # each finished request's client sends again after 1 ms plus 50 µs x (its drawn output - 1):
    # the run's sends after the first two are exactly those times (the outputs redrawn as
    # the clients draw them, in send order from the seed), not one constant wait
    sc = _prefill_clients(5e-5)
    result = simulate(sc)
    done = np.flatnonzero(np.isfinite(result.finish_s))
    assert done.shape[0] >= 6
    drawn = ClosedLoop(sc.workload, sc.seed, 0).lengths(0, result.arrival_s.shape[0])[1]
    assert np.all(result.output_len == 1)          # the prefill ends at the first token here
    expected = np.sort(result.finish_s[done] + 0.001 + 5e-5 * (drawn[done] - 1))
    np.testing.assert_allclose(np.sort(result.arrival_s[2:]), expected, rtol=0, atol=1e-12)


def test_prefill_clients_with_different_outputs_leave_lockstep():
    # both clients send at t=0 and are prefilled in one batch; with one constant wait they
    # send again together every cycle, with waits that follow their different outputs they do not
    together = simulate(_prefill_clients(0.0)).arrival_s
    assert together.shape[0] >= 6
    np.testing.assert_array_equal(together[0::2][:together.shape[0] // 2],
                                  together[1::2][:together.shape[0] // 2])
    apart = simulate(_prefill_clients(5e-5)).arrival_s
    assert apart[0] == apart[1] == 0.0
    assert np.unique(apart[2:]).shape[0] == apart.shape[0] - 2


def test_prefill_clients_same_seed_same_run():
    a, b = simulate(_prefill_clients(5e-5)), simulate(_prefill_clients(5e-5))
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.first_token_s, b.first_token_s)
    c = simulate(_prefill_clients(5e-5, seed=8))
    n = min(a.arrival_s.shape[0], c.arrival_s.shape[0])
    assert not np.array_equal(a.arrival_s[:n], c.arrival_s[:n])


def test_no_per_token_wait_is_written_as_before():
    # a loop without the per-token wait serialises as before the field existed (summaries keep
    # their bits); one with it keeps it
    plain = _closed(2, 0.001).workload.arrivals.model_dump()
    assert "think_per_output_token_s" not in plain
    assert _prefill_clients(5e-5).workload.arrivals.model_dump()["think_per_output_token_s"] == 5e-5


def test_steady_model_waits_the_mean_output_per_token():
    # the screen's closed prefill loop: each client's cycle is its prefill plus its wait, the
    # per-token part at the mean drawn output (fixed 8 tokens: 1 ms + 7 x 0.5 ms)
    from epsim.sim.steady import steady_model
    arrivals = {"kind": "concurrency", "clients": 8, "think_time_s": 0.001,
                "think_per_output_token_s": 5e-4}
    model = steady_model(_closed(8, mode="prefill", arrivals=arrivals))
    assert model.think_s == pytest.approx(0.001 + 7 * 5e-4, rel=1e-12)
