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


def test_ranks_that_take_none_some_or_all_of_their_queue_in_one_call(rng):
    # the head is probed first and a rank it does not fit takes none: several ranks in one call,
    # each with the answer of SGLang's loop, and the three kinds of answer all met
    pool = KVPool(20_000, 512, 64, 4000, 0.0, colocated=True)
    kinds = set()
    for _ in range(60):
        num_ranks, slots = 4, 12
        left = np.zeros((num_ranks, slots), np.int64)
        held = np.zeros((num_ranks, slots), np.int64)
        used, admit, prompts, outputs, rows, expected = [], [], [], [], [], []
        for rank in range(num_ranks):
            running = [(int(rng.choice([100, 500, rng.integers(1, 2000)])),
                        int(rng.integers(100, 3000))) for _ in range(int(rng.integers(0, slots)))]
            for j, (lft, hld) in enumerate(running):
                left[rank, j], held[rank, j] = lft, hld
            used.append(min(sum(h for _, h in running), pool.capacity - 1))
            candidates = [(int(rng.integers(50, 6000)), int(rng.choice([100, 500, 1999])))
                          for _ in range(int(rng.integers(0, 9)))]
            admit.append(len(candidates))
            rows += [rank] * len(candidates)
            prompts += [c[0] for c in candidates]
            outputs += [c[1] for c in candidates]
            expected.append(_sglang_loop(pool.capacity, used[-1], running, candidates))
            if candidates:
                kinds.add("none" if expected[-1] == 0 else
                          "all" if expected[-1] == len(candidates) else "some")
        fit = pool.admissible_ignore_eos(np.array(admit), np.array(used), np.array(rows, np.int64),
                                         np.array(prompts, np.int64), np.array(outputs, np.int64),
                                         left, held)
        assert fit.tolist() == expected
    assert kinds == {"none", "some", "all"}


def test_one_candidates_bounds_answer_as_the_whole_walk(rng):
    # `_SortedWalk`'s one-candidate bounds and `fits_ignore_eos`'s one-candidate terms against
    # the sort and walk (`_merged_fits`), on states
    # with ties (few distinct lengths), no running request, and pools near either answer
    from epsim.sim.kv_pool import _SortedWalk
    pool = KVPool(20_000, 512, 64, 4000, 0.0, colocated=True)
    answers = []
    for _ in range(300):
        num = int(rng.integers(0, 40))
        left = rng.choice([1, 100, 500, 1000, 1999], num).astype(np.int64)
        held = rng.integers(100, 800, num).astype(np.int64)
        used = min(int(held.sum()), pool.capacity - 1)
        walk = _SortedWalk(pool.capacity, float(used), left, held)
        for _ in range(4):
            prompt = np.array([int(rng.integers(1, 4000))])
            output = np.array([int(rng.choice([1, 100, 500, 1000, 1999, 3000]))])
            want = bool(pool._merged_fits(used, left[None], held[None], prompt, output)[0])
            assert walk.fits(prompt, output) == want
            answers.append(want)
            # several states at once (a leap's plans ahead): each as the walk answers it
            grown = rng.integers(0, 3, (5, num)).cumsum(axis=0)
            states = (used + grown.sum(axis=1), left - grown, held + grown)
            assert np.array_equal(pool.fits_ignore_eos(*states, prompt, output),
                                  pool._merged_fits(*states, prompt, output))
    assert 0.1 < np.mean(answers) < 0.9


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
