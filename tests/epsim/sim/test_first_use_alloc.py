"""SGLang's paged-allocator kernels compiled on first use: the keys a warm-up of identical
requests meets, the ones a run of varied lengths adds, and the stall each new key costs once."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.errors import SpecError
from epsim.sim import Simulation
from epsim.sim.first_use_alloc import PagedAllocCompiles, new_pages, next_power_of_2
from epsim.sim.step_plan import Plan
from tests.epsim.sim.test_engine import tiny_scenario

EXTEND_S, DECODE_S = 0.05, 0.02


def _tracker(warmup_batches=(), first=(1000, 32), chunk=8192):
    return PagedAllocCompiles(64, EXTEND_S, DECODE_S, chunk, list(warmup_batches), first)


def _plan(decoding=None, prefill=None):
    """A one-rank plan of 4 slots."""
    decoding = np.zeros((1, 4), bool) if decoding is None else np.array([decoding], bool)
    alloc = None if prefill is None else np.array([prefill], dtype=np.int64)
    return Plan(batch=None, decoding=decoding, prefill_alloc=alloc, finishing_prefill=None,
                fresh_ids=None)


@pytest.mark.parametrize("n, expected", [(0, 1), (1, 1), (2, 2), (3, 4), (4, 4), (17, 32)])
def test_next_power_of_2_is_tritons(n, expected):
    assert next_power_of_2(n) == expected


def test_new_pages_counts_the_pages_an_extend_opens():
    # 100 tokens from nothing: 2 pages; 10 after 60: crosses into a second page; 4 after 64: 1
    assert new_pages(np.array([0, 60, 64]), np.array([100, 10, 4]), 64) == 2 + 1 + 1


def test_the_startup_request_meets_one_extend_and_odd_decodes():
    t = _tracker()
    # 3 tokens take one page: its decodes run with free_pages one int64 off 16 bytes
    assert t.met == {("extend", 1, 4, True), ("decode", 1, False)}
    assert t.pages_out == 0 and t.seen_max_extend == 4


def test_a_warm_up_of_identical_requests_meets_one_alignment_per_batch_size():
    t = _tracker([4, 4])
    # 4 x 1000 tokens: one extend of 4 requests, max 4096; 4 x 16 pages: even, and every decode
    # step opens 0 or 4 pages, so the decodes of 4 only ever see an aligned free_pages
    assert ("extend", 4, 4096, True) in t.met
    assert ("decode", 4, True) in t.met and ("decode", 4, False) not in t.met
    assert t.seen_max_extend == 4096


def test_a_lone_prefill_after_the_warm_up_compiles_once():
    t = _tracker([4, 4])
    lone = _plan(prefill=[900, 0, 0, 0])
    context = np.zeros((1, 4), np.int64)
    slots = np.array([[0, -1, -1, -1]])
    assert t.stall_us(lone, context, slots) == pytest.approx(EXTEND_S * 1e6)
    assert ("extend", 1, 4096, True) in t.met     # start-up's lone extend ran at max 4: a new key
    assert t.pages_out == 15                      # 900 tokens: 15 pages, free_pages now unaligned
    # the same key again waits for nothing; a decode of 3 after it meets (4, unaligned): new
    t.pages_out = 0
    assert t.stall_us(lone, context, slots) == 0.0
    decode = _plan(decoding=[True, True, True, False])
    assert t.stall_us(decode, np.array([[1000, 1001, 1002, 0]]),
                      np.array([[0, 1, 2, -1]])) == pytest.approx(DECODE_S * 1e6)
    assert t.num_compiles == 2 and t.stalled_us == pytest.approx((EXTEND_S + DECODE_S) * 1e6)


def test_a_finished_request_rebuilds_free_pages_aligned():
    t = _tracker()
    t.stall_us(_plan(prefill=[100, 0, 0, 0]), np.zeros((1, 4)), np.array([[5, -1, -1, -1]]))
    assert t.pages_out == 2
    t.stall_us(_plan(prefill=[0, 70, 0, 0]), np.zeros((1, 4)), np.array([[-1, 6, -1, -1]]))
    assert t.pages_out == 2                       # request 5 left: reset, then 70 tokens, 2 pages


def _run(clients, warmup_batches, kernel="sglang_paged_alloc", draft=None, **fields):
    sc = tiny_scenario(
        cluster={"gpu": "B200"},
        deployment={**(draft or {}), "disaggregation_mode": "null", "chunked_prefill_size": 16384,
                    "enable_dp_attention": False, "dp_size": 1,
                    "first_use_compile": {"kernel": kernel, "compile_s": EXTEND_S,
                                          "decode_compile_s": DECODE_S,
                                          "warmup_batches": list(warmup_batches), **fields}},
        workload={"arrivals": {"kind": "concurrency", "clients": clients,
                               "num_requests": 10 * clients},
                  "input_len": {"kind": "random", "value": 1024, "range_ratio": 0.8},
                  "output_len": {"kind": "random", "value": 128, "range_ratio": 0.8},
                  "duration_s": 30.0, "warmup_s": 0.0})
    sim = Simulation(sc)
    return sim, sim.run()


def test_a_run_of_varied_lengths_meets_keys_its_warm_up_did_not():
    sim, result = _run(4, [4, 4])
    fu = sim.first_use
    # the lone prefill (start-up's ran at max 4) and decodes of other sizes or alignment
    assert fu.num_compiles == len(fu.compiled) == len(set(fu.compiled)) >= 2
    assert any(k[:2] == ("extend", 1) for k in fu.compiled)
    assert fu.stalled_us == pytest.approx(1e6 * sum(
        EXTEND_S if k[0] == "extend" else DECODE_S for k in fu.compiled))
    assert result.steps["extra_us"].sum() == pytest.approx(fu.stalled_us)


def test_page_size_must_be_a_page():
    with pytest.raises(SpecError, match="page_size"):
        _run(2, [], page_size=1)


SPEC_S = {"assign_req_to_token_pool": 0.04, "assign_draft_cache_locs": 0.03,
          "create_extend_after_decode_spec_info": 0.01}


def test_spec_kernels_meet_the_warm_up_s_request_counts_and_pay_new_ones():
    t = PagedAllocCompiles(64, EXTEND_S, DECODE_S, 8192, [4, 4], (1000, 32), SPEC_S, 2)
    # start-up decodes 1 request (create_extend pads to steps + 1 = 3: class 4), the warm-up 4
    assert {k for k in t.met if k[0] == "spec"} == {
        ("spec", "assign_req_to_token_pool", 1), ("spec", "assign_draft_cache_locs", 1),
        ("spec", "assign_req_to_token_pool", 4), ("spec", "assign_draft_cache_locs", 4),
        ("spec", "create_extend_after_decode_spec_info", 4)}
    decode = _plan(decoding=[True, True, False, False])   # 2 requests: class 2, padded 4
    t.pages_out = 0
    wait_us = t.stall_us(decode, np.array([[1000, 1001, 0, 0]]), np.array([[0, 1, -1, -1]]))
    spec = [k for k in t.compiled if k[0] == "spec"]
    assert sorted(spec) == [("spec", "assign_draft_cache_locs", 2),
                            ("spec", "assign_req_to_token_pool", 2)]
    assert wait_us == pytest.approx(1e6 * (0.04 + 0.03 + sum(
        DECODE_S for k in t.compiled if k[0] == "decode")))


def test_unknown_spec_kernel_is_refused():
    with pytest.raises(ValueError, match="spec_compile_s"):
        PagedAllocCompiles(64, EXTEND_S, DECODE_S, 8192, [], (1000, 32), {"nope": 0.1}, 2)


def test_spec_kernels_price_only_runs_with_a_draft():
    sim, _ = _run(4, [4, 4], spec_compile_s=SPEC_S)
    assert not any(k[0] == "spec" for k in sim.first_use.met)   # no speculative_algorithm
    sim, result = _run(4, [4, 4], draft={"speculative_algorithm": "NEXTN",
                                         "speculative_num_steps": 2, "speculative_eagle_topk": 1,
                                         "speculative_num_draft_tokens": 3},
                       spec_compile_s=SPEC_S)
    fu = sim.first_use
    assert ("spec", "create_extend_after_decode_spec_info", 4) in fu.met
    spec = [k for k in fu.compiled if k[0] == "spec"]
    # the run's tail decodes fewer than the warm-up's 4: classes 2 (and 1 is start-up's)
    assert ("spec", "assign_req_to_token_pool", 2) in spec
    assert fu.stalled_us == pytest.approx(1e6 * sum(
        SPEC_S[k[1]] if k[0] == "spec" else EXTEND_S if k[0] == "extend" else DECODE_S
        for k in fu.compiled))
    assert result.steps["extra_us"].sum() == pytest.approx(fu.stalled_us)


def test_without_the_extend_tokens_key_a_longer_extend_meets_the_warm_up_s_key():
    # 0.5.10: a lone prefill of 900 after start-up's lone 3 keys (extend, 1, 0, aligned) both times
    t = PagedAllocCompiles(64, EXTEND_S, DECODE_S, 8192, [], (1000, 32), extend_keys_tokens=False)
    assert ("extend", 1, 0, True) in t.met
    lone = _plan(prefill=[900, 0, 0, 0])
    assert t.stall_us(lone, np.zeros((1, 4), np.int64), np.array([[0, -1, -1, -1]])) == 0.0
