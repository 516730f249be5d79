"""A P/D prefill's KV pool (`--max-total-tokens`): the cap on the pool, and forwards that wait
for their batch's KV transfer when the pool cannot hold two chunks (`epsim.sim.prefill_pool`)."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.kv_transfer import kv_transfer
from epsim.sim.engine import Simulation
from epsim.sim.memory import memory_plan
from epsim.sim.prefill_pool import KV_PATH, prefill_hold
from epsim.spec.scenario import scenario_from_dict

CHUNK = 16384
LABEL = "prefill pool: KV transfer"


def _prefill(mode: str = "prefill", **deployment):
    """DeepSeek-V3 on 8 H200, attention TP (one DP rank: a step's prefill tokens are the
    sending GPU's), prompts of 8000 arriving faster than the prefill serves them: two fill a
    chunk, and a pool of one chunk holds both (one token reserved each, not 512)."""
    return scenario_from_dict({
        "model": "DeepSeek-V3", "cluster": {"gpu": "H200"},
        "deployment": {"ep_size": 8, "enable_dp_attention": False, "disaggregation_mode": mode,
                       "chunked_prefill_size": CHUNK, "kv_cache_dtype": "fp8_e4m3",
                       "mem_fraction_static": 0.85, **deployment},
        "workload": {"input_len": {"kind": "fixed", "value": 8000},
                     "output_len": {"kind": "fixed", "value": 16}, "duration_s": 3.0,
                     "warmup_s": 0.0, "arrivals": {"kind": "poisson", "rate_per_s": 40.0}}})


def test_max_total_tokens_caps_what_memory_leaves():
    free = memory_plan(_prefill()).max_total_num_tokens
    assert free > 2 * CHUNK
    assert memory_plan(_prefill(max_total_tokens=CHUNK)).max_total_num_tokens == CHUNK
    assert memory_plan(_prefill(max_total_tokens=10 * free)).max_total_num_tokens == free


def test_only_a_prefill_pool_under_two_chunks_holds_the_next_forward():
    assert prefill_hold(_prefill(), 2 * CHUNK) is None
    assert prefill_hold(_prefill(mode="decode"), CHUNK) is None
    assert prefill_hold(_prefill(mode="null"), CHUNK) is None
    hold = prefill_hold(_prefill(), 2 * CHUNK - 1)
    assert hold is not None and hold.wait_us(0.0) == 0.0
    # the batch's KV from one GPU: 61 layers x 576 bytes (FP8 latent + rope key) a token
    sc = _prefill()
    one = kv_transfer(sc.model, sc.cluster, KV_PATH, CHUNK, kv_cache_dtype="fp8_e4m3")
    assert one.bytes_per_request == CHUNK * 61 * 576
    assert hold.wait_us(CHUNK) == pytest.approx(one.transfer_us)


def test_each_forward_waits_for_its_kv_where_the_pool_is_one_chunk():
    held = Simulation(_prefill(max_total_tokens=CHUNK))
    free = Simulation(_prefill(max_total_tokens=2 * CHUNK))
    assert held.prefill_hold is not None and free.prefill_hold is None
    a, b = held.run(), free.run()
    assert not b.stalls
    steps = a.steps["prefill_tokens"]
    assert len(a.stalls) == int((steps > 0).sum()) > 3
    waits = np.array([s[1] for s in a.stalls])
    assert {s[2] for s in a.stalls} == {LABEL}
    np.testing.assert_allclose(waits, [held.prefill_hold.wait_us(t) for t in steps[steps > 0]])
    # each wait starts where its forward ends: the next forward starts after it
    ends = a.steps["start_us"] + a.steps["step_us"]
    np.testing.assert_allclose([s[0] for s in a.stalls], ends[steps > 0])
    starts = a.steps["start_us"][1:]
    assert (starts >= (ends + np.array([s[1] for s in a.stalls]))[:-1] - 1e-6).all()
    # whole prompts while the pool holds them (two, one token reserved each; the first step:
    # one arrival), where two chunks' pool lets the chunk split a third; fewer forwards in the
    # same time, and the queue waits longer
    assert (a.steps["prefill_tokens"][1:] == 2 * 8000).all()
    assert (b.steps["prefill_tokens"][1:] == CHUNK).all()
    assert len(a.steps["step_us"]) <= len(b.steps["step_us"])
    assert np.nanmean(a.first_token_s - a.arrival_s) > np.nanmean(b.first_token_s - b.arrival_s)


def test_a_prefill_pool_reserves_one_token_a_request():
    from epsim.sim.prefill_pool import reserve_tokens
    assert reserve_tokens(_prefill().deployment) == 1
    assert reserve_tokens(_prefill(mode="decode", num_reserved_decode_tokens=112).deployment) == 112
