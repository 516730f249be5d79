"""The host terms of a rebalance (SGLang / vLLM steps), their fit, and the elastic-EP recovery terms."""

import json
from pathlib import Path

import numpy as np
import pytest

from epsim.calibrate.inputs import load_records
from epsim.calibrate.rebalance_host import fit_line, fit_rebalance_host, heldout
from epsim.eplb.host_terms import (
    NIXL_POLL_US, Shape, allreduce_us, host_us, sglang_rebalance, unit_of, vllm_rebalance, work_of,
)
from epsim.eplb.recovery import (
    DETECTION_US, SGLANG_MOONCAKE_TIMEOUT_US, detection_us, failure_terms, rejoin_metadata_bytes,
    rejoin_terms,
)
from epsim.errors import PlacementError

RECORDS = Path(__file__).resolve().parents[3] / "epsim/data/records/host/eplb_host.jsonl"
SHAPE = Shape(num_stat_layers=3, num_moe_layers=2, num_experts=8, num_physical=12, num_ranks=4,
              num_nodes=2, num_groups=2, window_steps=10)


def _params(*keys):
    return {k: v for key in keys for k, v in ((f"{key}_base_us", 1.0), (f"{key}_us_per_unit", 2.0))}


def test_allreduce_is_the_ring_formula():
    # 4 ranks: 2 * 3 / 4 of 1e6 bytes at 1 GB/s (1e3 bytes/us) + 6 latencies of 10 us
    assert allreduce_us(1e6, 4, 1.0, 10.0) == pytest.approx(1500.0 + 60.0)
    assert allreduce_us(1e6, 1, 1.0, 10.0) == 0.0


def test_work_counts_follow_the_loops_each_implementation_runs():
    dims = dict(num_layers=3, num_experts=8, num_physical=12, num_ranks=4, num_nodes=2, num_groups=2)
    assert work_of("sglang_reference_hierarchical", **dims) == (36.0, 36.0 * 2)   # 2 GPUs per node
    assert work_of("sglang_reference_global", **dims) == (36.0, 36.0 * 4)         # all 4 GPUs
    assert work_of("sglang047_dispatch_map", **dims) == (24.0, 24.0 * 4)
    assert work_of("sglang_updater", **dims) == (9.0, 0.0)                         # 3 slots per rank
    assert unit_of("sglang047_dispatch_map") == "sglang_dispatch_map"
    with pytest.raises(PlacementError, match=r"implementation \('trtllm'\) has no work unit"):
        unit_of("trtllm")


def test_host_us_names_what_was_measured():
    params = {"deepseek_base_us": 5.0, "deepseek_us_per_unit": 2.0, "deepseek_us_per_unit2": 0.5}
    assert host_us(params, "deepseek", (100.0, 10.0)) == pytest.approx(5.0 + 200.0 + 5.0)
    with pytest.raises(PlacementError, match=r"host term \('sticky'\).*measured: \['deepseek'\]"):
        host_us(params, "sticky", (10.0, 0.0))


def test_sglang_terms_sum_and_the_static_map_is_optional():
    host = _params("sglang047_reference_hierarchical", "sglang047_dispatch_map", "sglang_updater")
    moves = [100.0, 300.0]
    with_map = sglang_rebalance(host, SHAPE, moves, gather_gbps=1.0, gather_latency_us=0.0)
    without = sglang_rebalance(host, SHAPE, moves, gather_gbps=1.0, gather_latency_us=0.0,
                               dispatch_static=False)
    assert with_map.terms["algorithm"].us == pytest.approx(1.0 + 2.0 * 3 * 12)   # hierarchical
    assert with_map.terms["dispatch_map"].us == pytest.approx(1.0 + 2.0 * 3 * 8)
    assert "dispatch_map" not in without.terms
    assert with_map.terms["moves"].us == 400.0
    assert with_map.stall_us == pytest.approx(sum(t.us for t in with_map.terms.values()))
    # the per-layer costs and the once-costs add up to the stall (layer chunking splits them)
    assert with_map.once_us + sum(with_map.layer_us) == pytest.approx(with_map.stall_us)
    # the gather all-reduces the whole buffer [10 steps, 3 layers, 8 experts] int32
    assert with_map.terms["gather"].us == pytest.approx(allreduce_us(4.0 * 10 * 3 * 8, 4, 1.0, 0.0))


def test_vllm_waits_in_half_millisecond_polls_and_barriers_every_layer():
    host = _params("vllm_policy", "vllm_move_to_buffer", "gloo_message")
    terms = vllm_rebalance(host, SHAPE, [10.0, 600.0], gather_gbps=1.0, gather_latency_us=0.0)
    assert terms.terms["moves"].us == NIXL_POLL_US + 2 * NIXL_POLL_US
    assert terms.terms["barrier"].us == pytest.approx(2 * (1.0 + 2.0 * 2 * (4 - 1)))
    assert terms.once_us + sum(terms.layer_us) == pytest.approx(terms.stall_us)


def test_failure_terms_carry_the_configured_timeout():
    terms = failure_terms(rebalance_us=2e5)
    assert terms.terms["detection"][0] == SGLANG_MOONCAKE_TIMEOUT_US == 1e7
    assert terms.interruption_us == pytest.approx(1e7 + 2e5)
    assert "rerun" not in terms.terms and "rerun" in terms.unpriced   # no step: said, not priced
    rerun = failure_terms(rebalance_us=2e5, reload_us=3e5, rerun_us=9e4)
    assert rerun.interruption_us == pytest.approx(1e7 + 3e5 + 2e5 + 9e4)


def test_the_rejoin_pauses_for_its_resync_collectives_and_runs_no_rebalance():
    # 4 ranks, 1 GB/s and 1 us a ring step: an all-reduce of b bytes is 6 steps + 1.5e-3 b us
    rejoin = rejoin_terms(4, 1.0, 1.0, metadata_bytes=1000.0)
    us = {name: value for name, (value, _) in rejoin.terms.items()}
    assert us["peer_state"] == pytest.approx(5 * (6 + 1.5e-3 * 16))       # 5 backends' flags
    assert us["ep_reconnect"] == pytest.approx(5 * (6 + 1.5e-3 * 32) / 2)  # 5 all-gathers
    # the flags all-gathered, the maps from one source to 3 peers, 3 more map and 2 seed steps
    assert us["metadata"] == pytest.approx((6 + 1.5e-3 * 32) / 2 + (1 + 3 * 1000 / 1e3) + 5)
    assert us["placement"] == us["recapture"] == us["weights"] == 0.0
    assert rejoin.interruption_us == pytest.approx(sum(us.values()))
    assert set(rejoin.unpriced) == {"store", "qp_setup", "collective_host", "poll"}
    # RoCE swaps the LIDs' all-to-all for two GID all-gathers
    roce = rejoin_terms(4, 1.0, 1.0, metadata_bytes=1000.0, roce=True)
    assert roce.terms["ep_reconnect"][0] == pytest.approx(6 * (6 + 1.5e-3 * 32) / 2)
    assert rejoin_terms(1, 1.0, 1.0, 1000.0).interruption_us == 0.0
    # int64 maps: [2 layers, 6 physical], [2, 4 experts, 2 replicas], [2, 4] (+ [2, 4] static)
    assert rejoin_metadata_bytes(2, 4, 6, 2) == 8 * 2 * (6 + 8 + 4 + 4)
    assert rejoin_metadata_bytes(2, 4, 6, 2, dispatch_static=False) == 8 * 2 * (6 + 8 + 4)


def test_detection_counts_cycles_at_the_reported_clock_down_at_the_sm_clock():
    # the kernel's budget is timeout_us x the reported (maximum) clock in cycles: a slower SM
    # stretches the wall time, never shortens it below the timeout at the maximum clock
    assert detection_us() == SGLANG_MOONCAKE_TIMEOUT_US
    assert detection_us(1e7, sm_clock_over_reported=1755 / 1980) == pytest.approx(1e7 * 1980 / 1755)
    # only Mooncake EP's non-IBGDA fallback reads the process group's mask, cleared by its ping
    assert DETECTION_US == {"ibgda": 1e7, "fallback": 100.0}


def test_fit_recovers_a_line_and_judges_it_on_held_out_sizes():
    work = np.array([[10.0, 20.0], [20.0, 80.0], [40.0, 80.0], [80.0, 640.0], [160.0, 640.0]])
    time_us = 3.0 + 2.0 * work[:, 0] + 0.25 * work[:, 1]
    assert fit_line(work, time_us) == pytest.approx([3.0, 2.0, 0.25], rel=1e-6)
    errors = heldout(work, time_us)
    assert max(errors["line"]) < 1e-6 < min(errors["constant"])


def test_the_recorded_host_terms_fit_every_implementation_better_than_the_baselines():
    raw, _ = load_records([RECORDS])
    component = fit_rebalance_host(raw)
    keys = {s.record.extra["key"] for s in raw}
    assert {"deepseek", "sticky", "sglang047_reference_hierarchical", "sglang047_dispatch_map",
            "sglang_updater", "vllm_policy", "vllm_move_to_buffer", "gloo_message", "plan"} <= keys
    for key in keys:
        assert component.params[f"{key}_us_per_unit"] > 0
    residuals = component.residuals
    assert residuals["heldout_line_mape"] < min(residuals["heldout_constant_mape"],
                                                residuals["heldout_loglog_mape"])
    first = json.loads(RECORDS.read_text().splitlines()[0])
    assert first["kind"] == "rebalance_term" and first["extra"]["clock"] == "thread_time"


def test_refit_in_a_profile_names_the_records_it_fitted(tmp_path, monkeypatch):
    from epsim.calibrate.rebalance_host import main
    monkeypatch.chdir(RECORDS.parents[4])        # the profile lists its records from the repo root
    from epsim.profile import default_profile_path
    from epsim.records import records_hash
    profile = tmp_path / "profile.json"
    profile.write_text(default_profile_path().read_text())
    records = tmp_path / "host.jsonl"
    records.write_text("".join(RECORDS.read_text().splitlines(keepends=True)[:20]))
    assert main([str(records), "--profile", str(profile)]) == 0
    data = json.loads(profile.read_text())
    entry = data["provenance"]["records"][-1]
    assert entry["path"] == str(records) and entry["num_records"] == 20
    assert data["provenance"]["records_sha256"] == records_hash(
        e["path"] for e in data["provenance"]["records"])
    assert data["components"]["any/rebalance_host"]["residuals"]["num_records"] == 20
    assert main([str(tmp_path / "none.jsonl"), "--profile", str(profile)]) == 2
