"""The host terms of a rebalance (SGLang / vLLM steps) and the elastic-EP recovery terms."""

import json
from pathlib import Path

import pytest

from epsim.calibrate.inputs import load_records
from epsim.calibrate.rebalance_host import fit_rebalance_host, impl_key
from epsim.eplb.host_terms import allreduce_us, engine_rebalance, host_us
from epsim.eplb.recovery import SGLANG_MOONCAKE_TIMEOUT_US, failure_terms, rejoin_terms
from epsim.errors import PlacementError

RECORDS = Path(__file__).resolve().parents[3] / "epsim/data/records/host/eplb_host.jsonl"


def test_allreduce_is_the_ring_formula():
    # 4 ranks: 2 * 3 / 4 of 1e6 bytes at 1 GB/s (1e3 bytes/us) + 6 latencies of 10 us
    assert allreduce_us(1e6, 4, 1.0, 10.0) == pytest.approx(1500.0 + 60.0)
    assert allreduce_us(1e6, 1, 1.0, 10.0) == 0.0


def test_host_us_names_what_was_measured():
    params = {"deepseek_coef_us": 2.0, "deepseek_exponent": 1.5}
    assert host_us(params, "deepseek", 100) == pytest.approx(2000.0)
    with pytest.raises(PlacementError, match=r"host term \('sticky'\).*measured: \['deepseek'\]"):
        host_us(params, "sticky", 10)


def test_engine_rebalance_sums_its_terms_and_rejects_bad_names():
    params = {"deepseek_coef_us": 1.0, "deepseek_exponent": 1.0}
    terms = engine_rebalance("vllm", "vllm_default", params, num_layers=2, num_moe_layers=2,
                             num_experts=8, num_physical=12, num_ranks=4, num_nodes=1,
                             window_steps=10, gather_gbps=1.0, gather_latency_us=0.0, moves=None)
    assert terms.terms["algorithm"].us == 24.0                       # 2 layers x 12 slots
    assert terms.terms["gather"].us == pytest.approx(1.5 * 8 * 2 * 12 / 1e3)
    assert terms.stall_us == pytest.approx(sum(t.us for t in terms.terms.values()))
    with pytest.raises(PlacementError, match="engine"):
        engine_rebalance("trtllm", "vllm_default", params, num_layers=2, num_moe_layers=2,
                         num_experts=8, num_physical=12, num_ranks=4, num_nodes=1, window_steps=1,
                         gather_gbps=1.0, gather_latency_us=0.0, moves=None)


def test_failure_terms_carry_the_configured_timeout():
    terms = failure_terms(rebalance_us=2e5)
    assert terms.terms["detection"][0] == SGLANG_MOONCAKE_TIMEOUT_US == 1e7
    assert terms.interruption_us == pytest.approx(1e7 + 100.0 + 2e5)
    assert rejoin_terms(5.0).interruption_us == pytest.approx(1e4 + 5.0)


def test_the_recorded_host_terms_fit_every_implementation():
    raw, _ = load_records([RECORDS])
    component = fit_rebalance_host(raw)
    keys = {impl_key(s.record.extra["term"], s.record.extra["impl"]) for s in raw}
    assert {"deepseek", "sticky", "sglang_reference_hierarchical", "sglang046_prefill",
            "plan", "map_update"} <= keys
    for key in keys:
        assert component.params[f"{key}_coef_us"] > 0
    # the line reproduces the largest measured shape of SGLang 0.4.6's algorithm within its spread
    big = max((s for s in raw if impl_key(s.record.extra["term"], s.record.extra["impl"])
               == "sglang046_prefill"), key=lambda s: s.record.extra["work"])
    predicted = host_us(component.params, "sglang046_prefill", big.record.extra["work"])
    assert predicted == pytest.approx(big.measured_us, rel=component.residuals["max_ape"] / 100)
    assert json.loads(RECORDS.read_text().splitlines()[0])["kind"] == "rebalance_term"
