"""A colocated rank's KV admission: SGLang's `add_one_req_ignore_eos` (`epsim.sim.kv_pool`)."""

from __future__ import annotations

import numpy as np

from epsim.sim.arrivals import Requests
from epsim.sim.batching import Scheduler
from epsim.sim.kv_pool import IGNORE_EOS_RESERVE_TOKENS, KVPool


def _sglang_loop(capacity, used, running, candidates) -> int:
    """How many candidates SGLang's PrefillAdder admits, transcribed from 0.5.9's
    `add_one_req_ignore_eos` (one request at a time, in queue order, stopping at the first
    NO_TOKEN; its `req_states` built on the first call, sorted stably, and each later request
    inserted before the first state it does not exceed): running [(tokens left, tokens held)],
    candidates [(prompt, output)]."""
    offset, states = 0, None
    for num, (prompt, output) in enumerate(candidates):
        if prompt > capacity - used - offset:
            return num
        if states is None:
            states = sorted([(output, prompt)] + list(running), key=lambda s: s[0])
        else:
            at = next((i for i, s in enumerate(states) if output <= s[0]), len(states))
            states.insert(at, (output, prompt))
        cur_rem = capacity - used - offset - prompt
        freed = 0
        for i, (left, held) in enumerate(states):
            bs = len(states) - i
            if cur_rem + freed - left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
                return num
            freed += held
        offset += prompt
    return len(candidates)


def _admit(pool, used, running, candidates) -> int:
    slots = max(len(running), 1)
    left = np.zeros((1, slots), np.int64)
    held = np.zeros((1, slots), np.int64)
    for j, (lft, hld) in enumerate(running):
        left[0, j], held[0, j] = lft, hld
    prompts = np.array([c[0] for c in candidates], np.int64)
    outputs = np.array([c[1] for c in candidates], np.int64)
    rows = np.zeros(len(candidates), np.int64)
    return int(pool.admissible_ignore_eos(np.array([len(candidates)]), np.array([used]), rows,
                                          prompts, outputs, left, held)[0])


def test_whole_outputs_are_reserved_where_the_decode_rule_reserves_a_few_tokens():
    # 1000 tokens, prompts of 100 with outputs of 300: two fit whole (2 x 400 = 800), a third
    # (1200) does not; the decode server's rule (100 reserved each) would take all three
    pool = KVPool(1000, 100, 8, 400, 0.0, colocated=True)
    assert _admit(pool, 0, [], [(100, 300)] * 3) == 2
    reqs = Requests(np.zeros(3), np.full(3, 100, np.int64), np.full(3, 300, np.int64))
    decode = Scheduler(reqs, 1, 8, 1000, mode="decode", kv=KVPool(1000, 100, 8, 400, 0.0))
    decode.plan(0.0)
    assert decode.occupied.tolist() == [3]
    agg = Scheduler(reqs, 1, 8, 1000, mode="null", kv=pool)
    plan = agg.plan(0.0)
    assert agg.occupied.tolist() == [2] and plan.num_waiting == 1
    assert float(plan.batch.prefill_tokens.sum()) == 200.0


def test_a_request_near_its_end_frees_its_tokens_for_the_longer_ones():
    # 500 held by a running request 10 tokens from its end: a 100 + 400 request fits (the pool
    # runs out only if the running one never frees), a 100 + 900 one does not
    pool = KVPool(1000, 100, 8, 1000, 0.0, colocated=True)
    assert _admit(pool, 500, [(10, 500)], [(100, 400)]) == 1
    assert _admit(pool, 500, [(10, 500)], [(100, 900)]) == 0
    assert _sglang_loop(1000, 500, [(10, 500)], [(100, 400)]) == 1
    assert _sglang_loop(1000, 500, [(10, 500)], [(100, 900)]) == 0


def test_the_bisection_admits_what_sglangs_loop_admits(rng):
    pool = KVPool(20_000, 512, 64, 4000, 0.0, colocated=True)
    for _ in range(200):
        running = [(int(rng.choice([100, 500, 1000, rng.integers(1, 2000)])),
                    int(rng.integers(100, 3000)))
                   for _ in range(int(rng.integers(0, 12)))]
        used = sum(h for _, h in running)
        if used >= pool.capacity:
            continue
        # few distinct lengths: ties, whose order SGLang's walk fixes
        candidates = [(int(rng.integers(50, 3000)), int(rng.choice([100, 500, 1000, 1999])))
                      for _ in range(int(rng.integers(1, 16)))]
        assert _admit(pool, used, running, candidates) == \
            _sglang_loop(pool.capacity, used, running, candidates)


def test_a_leap_over_quiet_steps_stops_at_the_plan_that_admits():
    # A (100 + 400) runs; B (300 + 450) waits: the pool runs out before A ends (1000 - 100 -
    # 300 - 2 x 399 < 2) until A nears its end, one token a step easing the walk by one. The
    # leap (`epsim.sim.quiet`) must cover exactly the plans that still hold B out
    def started():
        reqs = Requests(np.zeros(2), np.array([100, 300], np.int64), np.array([400, 450], np.int64))
        sched = Scheduler(reqs, 1, 8, 1000, mode="null",
                          kv=KVPool(1000, 100, 8, 900, 0.0, colocated=True))
        sched.commit(sched.plan(0.0), 1.0)            # A's prefill; B held
        assert sched.occupied.tolist() == [1]
        return sched

    sched = started()
    held_plans = 0
    while True:
        plan = sched.plan(1.0 + held_plans)
        if sched.occupied[0] == 2:
            break
        sched.commit(plan, 2.0 + held_plans)
        held_plans += 1
    assert 100 < held_plans < 399                     # B joins while A still runs
    assert started().quiet(1.0, 1024).num == held_plans
