"""The P/D handoff's terms (`epsim.validate.silicon.handoff`) and what each side of a pair runs
in the closed loop (`epsim.validate.silicon.run`), each against a small exact case."""

from __future__ import annotations

import pytest

from epsim.cost.kv_transfer import kv_bytes_per_request, kv_transfer, last_chunk_tokens
from epsim.cost.tokenize import tokenize_s
from epsim.spec.scenario import scenario_from_dict
from epsim.validate.silicon.handoff import (Handoff, decode_by_room, handoff, receive_wait_steps,
                                            room_routed_decode)
from epsim.validate.silicon.mapping import Instance
from epsim.validate.silicon.run import closed_round, decoding_share


def _prefill(**deployment) -> dict:
    return {"name": "p", "seed": 0, "model": "DeepSeek-V3", "cluster": {"gpu": "H200", "num_nodes": 1},
            "deployment": {"ep_size": 8, "enable_dp_attention": True, "moe_a2a_backend": "deepep",
                           "disaggregation_mode": "prefill", **deployment},
            "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 1.0},
                         "input_len": {"kind": "fixed", "value": 8192},
                         "output_len": {"kind": "fixed", "value": 1024}}}


@pytest.mark.parametrize("prompt, chunk, last", [(8192, 8192, 8192), (8193, 8192, 1), (10000, 4096, 1808),
                                                 (1, 8192, 1), (0, 8192, 0)])
def test_only_the_last_chunk_is_sent_after_the_forward(prompt, chunk, last):
    assert last_chunk_tokens(prompt, chunk) == last


def test_mla_kv_bytes_are_the_576_element_latent_at_the_cache_dtype():
    sc = scenario_from_dict(_prefill())
    layers = sc.model.num_layers
    assert kv_bytes_per_request(sc.model, 1000) == 1000 * layers * 576 * 2
    assert kv_bytes_per_request(sc.model, 1000, "fp8_e4m3") == 1000 * layers * 576 * 1


def test_handoff_terms_add_up_exactly():
    sc = scenario_from_dict(_prefill(chunked_prefill_size=4096, kv_cache_dtype="fp8_e4m3"))
    hand = handoff(sc, decode_step_ms=40.0, decode_first_ms=55.0)
    kv = kv_transfer(sc.model, sc.cluster, "mooncake", 8192 - 4096, kv_cache_dtype="fp8_e4m3")
    bytes_ = (8192 - 4096) * sc.model.num_layers * 576
    assert kv.bytes_per_request == bytes_
    assert hand == Handoff(20.0, kv.latency_us * 1e-3 + bytes_ / (kv.gbps * 1e3) * 1e-3, 55.0)
    assert hand.ttft_ms(300.0) == pytest.approx(300.0 + 20.0 + hand.transfer_ms + 55.0, abs=1e-12)


def test_a_frontend_that_tokenises_adds_the_mean_prompts_tokenisation():
    # Dynamo's frontend tokenises each text prompt on its own thread before the prefill server
    # sees it: the pair's TTFT adds that prompt's measured price, and the prefill instance's
    # simulated arrivals stay as they were
    base = handoff(scenario_from_dict(_prefill()), decode_step_ms=40.0, decode_first_ms=55.0)
    sc = scenario_from_dict(_prefill(server_tokenize="parallel"))
    hand = handoff(sc, decode_step_ms=40.0, decode_first_ms=55.0)
    assert base.tokenize_ms == 0.0
    assert hand.tokenize_ms == pytest.approx(float(tokenize_s(8192)) * 1e3)
    assert hand.ttft_ms(300.0) == pytest.approx(base.ttft_ms(300.0) + hand.tokenize_ms, abs=1e-12)
    instance = Instance("prefill", _prefill(server_tokenize="parallel"), clients=4, num_workers=1,
                        dp_ranks=8, closed_loop=True)
    data = closed_round(instance, 0.5, 0.01, 1024, 10.0)
    assert data["deployment"]["server_tokenize"] == "off"


def test_each_side_of_a_pair_holds_its_share_of_the_cycle():
    def side(role, dp, harness=True):
        data = _prefill(disaggregation_mode=role)
        return Instance(role, data, clients=8, num_workers=1, dp_ranks=dp, closed_loop=True,
                        harness=harness)

    ttft_s, tpot_s, osl = 22.0, 0.04, 1024
    cycle_s = ttft_s + 1023 * tpot_s                    # 62.92 s
    outside_s = cycle_s / 2 + 0.1                       # the decode side holds a request < half the cycle
    pre = closed_round(side("prefill", 1), ttft_s, tpot_s, osl, 0.3)["workload"]
    dec = closed_round(side("decode", 2), ttft_s, tpot_s, osl, outside_s)["workload"]
    # the prefill's clients think for the handoff around their prefill and for each request's
    # own decode (TPOT per output token after the first, its drawn length), and send one Dynamo
    # harness run's 5 requests each, from an idle start, all measured
    assert pre["arrivals"] == {"kind": "concurrency", "clients": 8, "num_requests": 40,
                               "think_time_s": 0.3, "think_per_output_token_s": 0.04}
    assert pre["initial_running_per_rank"] == 0
    assert (pre["warmup_s"], pre["duration_s"]) == (0.0, 2 * 5 * cycle_s)
    # the decode holds 8 x (cycle - outside) / cycle = 3.99 -> 4 clients, 2 per rank part-way done
    assert decoding_share(cycle_s, outside_s) == pytest.approx(0.5 - 0.1 / cycle_s)
    assert dec["arrivals"] == {"kind": "concurrency", "clients": 4}
    assert dec["initial_running_per_rank"] == 2
    # the decode side's steady population: 2 warm-up and 10 measured cycles
    assert (dec["warmup_s"], dec["duration_s"]) == (2 * cycle_s, 12 * cycle_s)
    # an agg instance runs InferenceX's single-node harness: 10 requests per client
    agg = closed_round(side("agg", 1), ttft_s, tpot_s, osl)["workload"]
    assert agg["arrivals"] == {"kind": "concurrency", "clients": 8, "num_requests": 80}
    assert (agg["warmup_s"], agg["duration_s"]) == (0.0, 2 * 10 * cycle_s)
    # a row of no known harness: open-ended clients, a steady window after 2 cycles
    other = closed_round(side("prefill", 1, harness=False), ttft_s, tpot_s, osl, 0.3)["workload"]
    assert other["arrivals"] == {"kind": "concurrency", "clients": 8, "think_time_s": 0.3,
                                 "think_per_output_token_s": 0.04}
    assert (other["warmup_s"], other["duration_s"]) == (2 * cycle_s, 12 * cycle_s)


@pytest.mark.parametrize("interval, prebuilt, steps", [
    (1, 0.0, 0.5), (1, 0.7, 0.5),            # every iteration receives: half a step
    (10, 0.0, 5.0),                          # every 10th: gaps of 10, half of one on average
    (10, 1.0, 0.5),                          # a prebuilt batch after every step: each receives
    (2, 0.5, 2.5 / 3.0)])                    # G = 1 or 2 alike: E[G^2] / (2 E[G]) = 2.5 / 3
def test_the_decode_receives_every_n_steps_or_after_a_prebuilt_batch(interval, prebuilt, steps):
    assert receive_wait_steps(interval, prebuilt) == pytest.approx(steps, abs=1e-12)


def test_the_bootstrap_waits_for_the_busy_decode_s_next_receive():
    sc = scenario_from_dict(_prefill())
    # an idle decode loop receives at once: the wait counts the busy share only
    assert handoff(sc, 8.0, 20.0, recv_interval=10, busy=0.5).bootstrap_ms == pytest.approx(
        0.5 * 5.0 * 8.0)
    assert handoff(sc, 8.0, 20.0).bootstrap_ms == 4.0      # SGLang's default: half a step
    with pytest.raises(ValueError, match="interval"):
        receive_wait_steps(0, 0.0)


def test_the_decode_instance_runs_without_its_receive_interval():
    """Its arrivals are transferred requests, polled every iteration; the prefill keeps it."""
    def side(role):
        data = _prefill(disaggregation_mode=role, scheduler_recv_interval=10)
        return Instance(role, data, clients=8, num_workers=1, dp_ranks=1, closed_loop=True,
                        harness=True)

    dec = closed_round(side("decode"), 0.3, 0.01, 1024, 0.3)["deployment"]
    pre = closed_round(side("prefill"), 0.3, 0.01, 1024, 0.3)["deployment"]
    assert "scheduler_recv_interval" not in dec
    assert pre["scheduler_recv_interval"] == 10


@pytest.mark.parametrize("version, deployment, by_room", [
    ((0, 5, 5), {"enable_dp_attention": True, "dp_size": 32}, True),
    ((0, 5, 6), {"enable_dp_attention": True, "dp_size": 4}, True),
    ((0, 5, 8), {"enable_dp_attention": True, "dp_size": 32}, False),     # round-robin since
    (None, {"enable_dp_attention": True, "dp_size": 32}, False),          # no version: default
    ((0, 5, 5), {"enable_dp_attention": True, "dp_size": 1}, False),      # one rank: no choice
    ((0, 5, 5), {"dp_size": 4}, False),                                   # no DP attention
    ((0, 5, 5), {"enable_dp_attention": True, "dp_size": 32,
                 "load_balance_method": "round_robin"}, False)])          # a flag set: kept
def test_a_decode_before_0_5_8_meets_its_dp_rank_by_bootstrap_room(version, deployment, by_room):
    assert decode_by_room(version, deployment) is by_room


def test_a_room_routed_decode_may_hold_more_than_its_even_share():
    dep = {"enable_dp_attention": True, "dp_size": 32}
    # 8192 clients over 32 ranks: 256 a rank even, up to 256 + 6 x 16 drawn (the recipe's 2112 above)
    assert room_routed_decode((0, 5, 5), dep, 2112, 8192) == {
        "load_balance_method": "follow_bootstrap_room", "max_running_requests": 352}
    assert room_routed_decode((0, 5, 5), dep, 300, 8192)["max_running_requests"] == 300
    assert room_routed_decode((0, 5, 5), dep, None, 8192)["max_running_requests"] == 352
    assert room_routed_decode((0, 5, 8), dep, 2112, 8192) == {}
