"""Speculative decoding: tokens per verify step, the verify and draft steps' prices, the
benchmark metrics counted as bench_serving counts them."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.attention import BatchCounts
from epsim.errors import SpecError
from epsim.report import summarize
from epsim.sim import simulate
from epsim.sim.accept_sources import DEEPSEEK_ACCEPT_RATE, chain_mean
from epsim.sim.speculative import Acceptance, verify_counts
from tests.epsim.sim.test_engine import tiny_scenario


def _spec(steps=3, accept=None, clients=4, out=12, duration=0.6, **deployment):
    return tiny_scenario(
        deployment={"disaggregation_mode": "decode", "speculative_algorithm": "NEXTN",
                    "speculative_num_steps": steps, "speculative_accept_length": accept,
                    **deployment},
        workload={"arrivals": {"kind": "concurrency", "clients": clients},
                  "input_len": {"kind": "fixed", "value": 64},
                  "output_len": {"kind": "fixed", "value": out}, "duration_s": duration,
                  "warmup_s": 0.0})


def test_acceptance_is_a_chain_with_the_stated_mean():
    default = Acceptance(3, None, seed=0)
    assert default.rate == DEEPSEEK_ACCEPT_RATE
    assert default.mean == pytest.approx(1 + 0.85 + 0.85 ** 2 + 0.85 ** 3)
    for steps, accept in ((2, 2.18), (3, 2.44), (1, 1.9)):
        a = Acceptance(steps, accept, seed=1)
        assert a.mean == pytest.approx(accept, rel=1e-9)
        assert chain_mean(a.rate, steps) == pytest.approx(accept, rel=1e-9)
        draws = a.draw(200_000)
        assert draws.min() >= 1 and draws.max() <= steps + 1
        assert draws.mean() == pytest.approx(accept, rel=0.01)
        # a chain: P(k) = a^(k-1)(1-a) below the last, P(S + 1) = a^S
        assert a.probs[-1] == pytest.approx(a.rate ** steps)
        if steps >= 2:
            assert a.probs[1] / a.probs[0] == pytest.approx(a.rate)


def test_counted_draws_are_the_binary_searchs_integers():
    # a long block counts thresholds, a short one searches: the same tokens from the same
    # uniforms (one stream, drawn once each way), every length 1..steps+1 met
    from epsim.sim.speculative import COUNT_DRAWS_FROM
    for steps, accept in ((1, 1.6), (3, 2.4), (3, None)):
        acc = Acceptance(steps, accept, seed=5)
        state = acc._rng.bit_generator.state
        counted = acc.draw(4 * COUNT_DRAWS_FROM)
        acc._rng.bit_generator.state = state
        u = acc._rng.random(4 * COUNT_DRAWS_FROM) * acc._cum[-1]
        searched = np.searchsorted(acc._cum, u, side="right") + 1
        assert counted.dtype == searched.dtype
        assert np.array_equal(counted, searched)
        assert set(counted.tolist()) == set(range(1, steps + 2))


def test_verify_counts_run_every_draft_token():
    batch = BatchCounts.uniform_decode(2, 3, context=100.0)      # 3 requests of 100 per rank
    v = verify_counts(batch, 4)
    np.testing.assert_allclose(v.decode_tokens, [12, 12])
    np.testing.assert_allclose(v.sampled_tokens, [12, 12])
    # query j reads context + j + 1 keys: 4 x 100 + (0+1+2+3) per request, 3 requests
    np.testing.assert_allclose(v.decode_context, [3 * (4 * 100 + 6)] * 2)
    assert v.decode_queries_per_seq == 4.0       # one KV read and one kernel sequence per request


def test_every_request_gets_its_output_and_the_accept_length_is_measured():
    # long outputs: a request's last verify step yields only the tokens it still needs, so the
    # measured length sits below the stated mean by about that truncation (12-token outputs
    # measure ~2.27 for 2.5 over any duration; 120-token ones ~2.43)
    # (0.9 s: a cycle of 16 requests is ~13 ms with the scheduler's host time SGLang's speculative
    # loop exposes, so 120 tokens at 2.5 a cycle take ~0.65 s)
    result = simulate(_spec(accept=2.5, clients=16, out=120, duration=0.9))
    done = np.isfinite(result.finish_s)
    assert done.sum() >= 8
    steps = result.steps
    # tokens out = the requests' outputs, made in fewer steps than tokens
    assert steps["output_tokens"].sum() >= result.output_len[done].sum()
    assert result.accept_length == pytest.approx(2.5, rel=0.1)
    assert summarize(result)["bench_serving"]["accept_length"] == result.accept_length
    assert (steps["draft_us"][steps["decode_tokens"] > 0] > 0).all()


def test_all_accepted_one_client_tpot_is_a_cycle_over_its_tokens():
    # accept length = num_steps + 1: every verify step gives 4 tokens; a request of 12 tokens
    # takes 3 steps, its first chunk (4 tokens) ends its first one; bench_serving's TPOT is
    # (E2E - TTFT) / 11 and its ITL every later chunk's gap / 4, four times
    result = simulate(_spec(steps=3, accept=4.0, clients=1, out=12))
    steps = result.steps
    ends = (steps["start_us"] + steps["step_us"]) * 1e-6
    done = np.flatnonzero(np.isfinite(result.finish_s))
    assert done.shape[0] >= 3
    for i in done:
        first = int(np.flatnonzero(np.isclose(ends, result.first_token_s[i], atol=1e-12))[0])
        assert result.finish_s[i] == pytest.approx(ends[first + 2], abs=1e-12)
        tpot = (result.finish_s[i] - result.first_token_s[i]) / 11
        assert tpot == pytest.approx(steps["step_us"][first + 1:first + 3].sum() * 1e-6 / 11)
    bench = summarize(result)["bench_serving"]
    gaps_ms = steps["step_us"] * 1e-3
    later = np.concatenate([[False], np.diff(steps["output_tokens"]) == 0]) & (
        steps["itl_count"] > 0)
    assert bench["max_itl_ms"] == pytest.approx(gaps_ms[later].max() / 4, rel=1e-9)
    assert result.itl_by_tokens[:, 3].sum() == (steps["itl_count"] > 0).sum()


def test_speculation_pays_its_draft_and_verify():
    # the same requests: with speculation each step is longer (the verify runs 4 tokens per
    # request, the draft its forwards) but makes more tokens
    spec = summarize(simulate(_spec(accept=3.0, clients=8)))
    plain = summarize(simulate(tiny_scenario(
        deployment={"disaggregation_mode": "decode"},
        workload={"arrivals": {"kind": "concurrency", "clients": 8},
                  "input_len": {"kind": "fixed", "value": 64},
                  "output_len": {"kind": "fixed", "value": 12}, "duration_s": 0.6,
                  "warmup_s": 0.0})))
    assert spec["step_ms"]["mean"] > plain["step_ms"]["mean"]
    assert spec["time_breakdown_frac"]["draft"] > 0 == plain["time_breakdown_frac"]["draft"]
    assert spec["bench_serving"]["mean_tpot_ms"] < spec["step_ms"]["mean"]


@pytest.mark.parametrize("deployment, message", [
    ({"speculative_num_steps": 2}, r"speculative_num_steps \(2\) needs speculative_algorithm"),
    ({"speculative_algorithm": "NEXTN", "speculative_num_steps": 2,
      "speculative_num_draft_tokens": 4}, r"must be speculative_num_steps \+ 1 \(3\)"),
    ({"speculative_algorithm": "EAGLE", "speculative_num_steps": 2,
      "speculative_accept_length": 3.5}, r"speculative_accept_length \(3.5\) must be <= "),
])
def test_bad_speculative_settings_name_the_field(deployment, message):
    with pytest.raises(SpecError, match=message):
        tiny_scenario(deployment=deployment)


def test_a_verify_step_reads_each_cache_once_and_runs_every_query():
    from epsim.cost.attention import attention_work
    from epsim.zoo import get_model
    qwen = get_model("Qwen3-235B-A22B")
    decode = BatchCounts.uniform_decode(1, 8, context=4000.0)
    verify = verify_counts(decode, 4)
    as_tokens = BatchCounts(verify.decode_tokens, verify.decode_context, verify.prefill_tokens,
                            verify.prefill_context, verify.prefill_pairs, verify.sampled_tokens)
    (b_v, f_v), (b_t, f_t), (b_d, _) = (attention_work(b, qwen) for b in (verify, as_tokens, decode))
    kv = qwen.kv_bytes_per_token_per_layer
    # the same FLOPs as 32 decode tokens; the KV of 8 requests, not of 32 queries
    np.testing.assert_allclose(f_v, f_t)
    np.testing.assert_allclose(b_t - b_v, kv * verify.decode_context * (1 - 1 / 4))
    assert b_v[0] == pytest.approx(b_d[0] + kv * (verify.decode_context[0] / 4 + 32
                                                  - decode.decode_context[0] - 8), rel=1e-12)
