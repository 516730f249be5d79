"""Elastic EP in the engine: a failed rank is masked and loses its requests, its experts are served
by replicas or reloaded, it comes back; the scheduler's routing; the load-time checks. Runs use
datasheet costs, so they test the mechanics whatever profile ships."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.errors import PlacementError, SpecError
from epsim.report import latency_windows, summarize
from epsim.sim import Simulation
from epsim.sim.arrivals import Requests
from epsim.sim.batching import Scheduler
from epsim.eplb import fill_lost
from epsim.sim.elastic import ElasticEP
from tests.epsim.sim.test_engine import tiny_scenario
from tests.epsim.sim.test_eplb_process import DATASHEET

FAIL_S, BACK_S = 0.1, 0.1
DETECT_S = 0.01      # the dispatch timeout, short so that the outage has passes to look at


def failing_scenario(deployment=None, workload=None):
    """Tiny model, 16 experts + 16 redundant on 4 ranks (trivial placement: every expert on two
    ranks, r and r + 2), rank 1 fails at 0.1 s and is back 0.1 s later; decode with full batches."""
    return tiny_scenario(
        deployment={"enable_eplb": True, "ep_num_redundant_experts": 16, "disaggregation_mode": "decode",
                    "max_running_requests": 32, "eplb_rebalance_num_iterations": 100_000,
                    "failures": [{"at_s": FAIL_S, "rank": 1, "recover_after_s": BACK_S}],
                    "moe_dispatch_timeout_s": DETECT_S,
                    **(deployment or {})},
        workload={"initial_running_per_rank": 32, "arrivals": {"kind": "poisson", "rate_per_s": 4000.0},
                  "duration_s": 0.3, "warmup_s": 0.0, **(workload or {})})


def run(scenario):
    sim = Simulation(scenario, profile=DATASHEET)
    seen = []
    sim.add_observer(lambda info: seen.append((info.start_us * 1e-6, info.tokens_per_rank.copy(),
                                               info.cost.traffic.pairs.sum(axis=0))))
    return sim, sim.run(), seen


def test_failure_masks_the_rank_and_the_rejoined_rank_serves_attention_before_experts():
    sim, res, seen = run(failing_scenario())
    during = [(tokens, pairs) for t, tokens, pairs in seen
              if FAIL_S + DETECT_S + 0.005 < t < FAIL_S + BACK_S]
    after = [(tokens, pairs) for t, tokens, pairs in seen if t > FAIL_S + BACK_S + 0.005]
    before = [(tokens, pairs) for t, tokens, pairs in seen if t < FAIL_S]
    assert during and after and before
    # while down: no attention tokens and no expert pairs on rank 1 (nothing dispatched to it)
    assert all(tokens[1] == 0 and pairs[1] == 0 for tokens, pairs in during)
    assert all(tokens[1] > 0 and pairs[1] > 0 for tokens, pairs in before)
    # rejoined (SGLang 0.5.12): its scheduler serves at once, its slots hold unreferenced
    # placeholders until the next rebalance, which this run's interval never reaches
    assert all(tokens[1] > 0 and pairs[1] == 0 for tokens, pairs in after)
    assert (sim.placement.physical_to_logical[:, 8:16] == 0).all()
    alive = res.steps["num_alive"]
    starts = res.steps["start_us"] * 1e-6
    assert set(alive[(starts > FAIL_S) & (starts < FAIL_S + BACK_S)]) == {3}
    assert alive[-1] == 3 and alive[0] == 4 and sim.elastic.awaiting == {1}
    # every expert had a replica on a survivor: nothing reloaded, no stall but EPLB's (which
    # rebalances onto the survivors, and not again at the rejoin)
    assert [e["reason"] for e in res.rebalances] == ["failure"]
    fail, back = res.elastic_events
    assert (fail["kind"], fail["rank"], fail["num_alive"], back["kind"], back["num_alive"]) == \
        ("failure", 1, 3, "recovery", 4)
    # the stall: detection, then the forward that timed out run again (the length of the last
    # step finished when the rank failed)
    ends = starts + res.steps["step_us"] * 1e-6
    last_before = np.flatnonzero(ends <= FAIL_S)[-1]
    assert fail["rerun_us"] == pytest.approx(res.steps["step_us"][last_before]) and fail["rerun_us"] > 0
    assert fail["reloaded_experts"] == 0 and fail["detection_us"] == DETECT_S * 1e6
    assert fail["stall_us"] == pytest.approx(DETECT_S * 1e6 + fail["rerun_us"])
    # the failure's detection, the rebalance onto the survivors and the rerun stop the same
    # pass; the rejoin stops the survivors for its resynchronisation's collectives over the 4
    # ranks of one node (NVLink), its terms summed, no rebalance, no recapture, no weights
    assert [label for _, _, label in res.stalls] == ["failure detection+forward rerun+eplb",
                                                     "rejoin resync"]
    terms = back["terms"]["terms"]
    assert back["stall_us"] == pytest.approx(sum(t["us"] for t in terms.values())) and back["stall_us"] > 0
    assert res.stalls[1][1] == pytest.approx(back["stall_us"])
    assert terms["placement"]["us"] == terms["recapture"]["us"] == terms["weights"]["us"] == 0.0
    assert FAIL_S + BACK_S <= res.stalls[1][0] * 1e-6 < FAIL_S + BACK_S + 0.005


def test_failed_rank_loses_its_requests_and_later_arrivals_avoid_it():
    sim, res, _ = run(failing_scenario())
    sched = sim.scheduler
    lost = np.flatnonzero(res.lost)
    assert res.elastic_events[0]["lost_requests"] == lost.size > 0
    assert not np.isfinite(res.finish_s[lost]).any()
    # requests arriving while rank 1 is down go round-robin over ranks 0, 2, 3; then to all again
    routed = sched.arrived(FAIL_S + BACK_S) - sched.arrived(FAIL_S)
    assert routed[1] == 0 and routed[[0, 2, 3]].min() >= 100
    assert routed[[0, 2, 3]].max() - routed[[0, 2, 3]].min() <= 1
    assert (sched.arrived(0.3) - sched.arrived(FAIL_S + BACK_S))[1] >= 50
    summary = summarize(res)
    assert summary["num_requests"]["lost"] == lost.size
    assert summary["elastic"]["lost_requests"] == lost.size


def test_lost_experts_are_reloaded_and_serving_stalls_for_the_slowest_survivor():
    # 16 experts + 8 redundant: the trivial placement replicates experts 0..7 only (on ranks 2
    # and 3), so rank 1's experts 8..11 have no other replica and are reloaded onto survivors
    sc = failing_scenario({"ep_num_redundant_experts": 8, "reload_gbps": 10.0})
    sim = Simulation(sc, profile=DATASHEET, scenario_processes=False)  # the failure alone, no EPLB
    sim.elastic = ElasticEP(sim)
    res = sim.run()
    fail = res.elastic_events[0]
    p2l = sim.placement.physical_to_logical
    trivial = np.tile(np.arange(24) % 16, (4, 1))
    live = np.r_[0:6, 12:24]                                           # rank 1 holds slots 6..11
    expected, lost = fill_lost(trivial[:, live], 16)
    assert lost == {layer: [8, 9, 10, 11] for layer in range(4)}
    changed = expected != trivial[:, live]                             # [layers, live slots]
    per_rank = changed.reshape(4, 3, 6).sum(axis=(0, 2))               # survivors 0, 2, 3
    stall_us = per_rank.max() * sc.model.expert_bytes / (10.0 * 1e3)
    assert fail["reloaded_experts"] == 16
    assert fail["stall_us"] == pytest.approx(DETECT_S * 1e6 + stall_us + fail["rerun_us"])
    assert res.stalls[0][2] == "failure detection+expert reload+forward rerun"
    assert res.stalls[0][1] == pytest.approx(DETECT_S * 1e6 + stall_us + fail["rerun_us"])
    np.testing.assert_array_equal(p2l[:, live], expected)
    np.testing.assert_array_equal(p2l[:, 6:12], trivial[:, 6:12])        # rank 1 kept its slots


def test_eplb_rebalances_onto_the_survivors_at_once():
    sc = failing_scenario({"ep_num_redundant_experts": 8, "eplb_algorithm": "deepseek_global",
                           "ep_dispatch_algorithm": "random"})
    sim, res, _ = run(sc)
    reasons = [(e["reason"], e["num_alive"]) for e in res.rebalances]
    assert reasons[:1] == [("failure", 3)]
    failure = res.rebalances[0]
    assert failure["at_s"] >= FAIL_S and failure["balancedness_after"] >= failure["balancedness_before"]


def test_the_rejoin_restarts_the_interval_and_the_next_rebalance_places_the_rank():
    interval = 40
    sc = failing_scenario({"eplb_rebalance_num_iterations": interval, "eplb_algorithm": "deepseek_global",
                           "ep_dispatch_algorithm": "random"})
    sim, res, seen = run(sc)
    back_step = int(np.searchsorted(res.steps["start_us"] * 1e-6, FAIL_S + BACK_S))
    after = [e for e in res.rebalances if e["at_s"] >= FAIL_S + BACK_S]
    assert after and all(e["reason"] == "interval" for e in res.rebalances if e["reason"] != "failure")
    first = after[0]
    # SGLang's reset_generator: a whole interval of passes from the rejoin, then a rebalance
    # over all four ranks, which puts experts on rank 1 again
    assert first["step"] - back_step in (interval - 1, interval)
    assert first["num_alive"] == 4 and not sim.elastic.awaiting
    placed = [pairs[1] for t, _, pairs in seen if t > first["done_s"] + 1e-9]
    waiting = [pairs[1] for t, _, pairs in seen if FAIL_S + BACK_S + 0.005 < t < first["at_s"]]
    assert placed and waiting and min(placed) > 0 and max(waiting) == 0


def test_a_failure_after_a_rejoin_places_over_the_rejoined_rank_too():
    # rank 1 back at 0.2 s (slots unreferenced), then rank 3 fails: SGLang's mask has rank 1
    # active, so the survivors' placement covers ranks 0, 1 and 2
    sc = failing_scenario({"failures": [{"at_s": FAIL_S, "rank": 1, "recover_after_s": BACK_S},
                                        {"at_s": 0.25, "rank": 3}]})
    sim, res, seen = run(sc)
    assert [e["reason"] for e in res.rebalances] == ["failure", "failure"]
    assert res.rebalances[1]["num_alive"] == 3 and not sim.elastic.awaiting
    assert sim.placement.alive.tolist() == [True, True, True, False]
    late = [pairs for t, _, pairs in seen if t > 0.25 + DETECT_S + 0.005]
    assert late and all(pairs[1] > 0 and pairs[3] == 0 for pairs in late)


def test_reload_mode_pauses_the_instance_until_the_rank_is_back():
    sc = failing_scenario({"enable_eplb": False, "ep_num_redundant_experts": 0, "elastic_recovery": "reload",
                           "reload_gbps": 50.0})
    sim, res, seen = run(sc)
    fail = res.elastic_events[0]
    reload_us = 4 * 4 * sc.model.expert_bytes / (50.0 * 1e3)         # 4 slots x 4 layers
    assert fail["reload_bytes"] == 16 * sc.model.expert_bytes
    starts = np.array([t for t, _, _ in seen])
    gap = starts[starts > FAIL_S].min() - starts[starts <= FAIL_S].max()
    # no pass runs from the failure until the rank is back and reloaded
    assert gap >= BACK_S + reload_us * 1e-6
    assert res.stalls[0][2] == "rank failure"
    windows = latency_windows(res, 0.02)
    assert np.isnan(windows["step_ms"][(windows["t_s"] > FAIL_S + 0.02) & (windows["t_s"] < FAIL_S + BACK_S)]).all()


def test_scheduler_drop_and_reroute():
    reqs = Requests(np.linspace(0.0, 1.0, 12), np.full(12, 8, np.int64), np.full(12, 100, np.int64))
    sched = Scheduler(reqs, num_ranks=3, max_running=2, chunk_tokens=100, mode="decode")
    sched.plan(0.5)                                                   # requests 0..5 arrived
    assert sched.arrived(0.5).tolist() == [2, 2, 2]
    lost = sched.drop_rank(1, 0.5)
    assert sorted(lost.tolist()) == [1, 4] and sched.occupied[1] == 0 and sched.state.lost[[1, 4]].all()
    sched.route_to(np.array([True, False, True]), 0.5)
    sched.plan(1.0)
    # arrivals 6..11 alternate over ranks 0 and 2; rank 1 gets none
    assert sched.arrived(1.0).tolist() == [5, 2, 5]
    assert (sched.slot_req[1] < 0).all()
    assert sorted(sched.slot_req[0].tolist() + sched.slot_req[2].tolist()) == [0, 2, 3, 5]
    assert sched.num_waiting(1.0) == 6


def test_fill_lost_keeps_every_expert():
    p2l = np.array([[0, 0, 1, 2, 2, 2]])
    out, lost = fill_lost(p2l, 4)
    assert lost == {0: [3]} and sorted(out[0].tolist()) == [0, 0, 1, 2, 2, 3]
    with pytest.raises(PlacementError, match=r"the surviving slots \(3\) must hold every one of the 4"):
        fill_lost(p2l[:, :3], 4)


@pytest.mark.parametrize("deployment, message", [
    ({"enable_dp_attention": False, "failures": [{"at_s": 1.0, "rank": 1}]},
     r"deployment.failures needs deployment.enable_dp_attention: true"),
    ({"failures": [{"at_s": 1.0, "rank": 1}]},
     r"deployment.elastic_recovery \(replicas\) needs the surviving ranks to hold every expert: "
     r"3 ranks x 4 slots \(12\) must be >= num_experts \(16\)"),
    ({"failures": [{"at_s": 1.0, "rank": 1}], "elastic_recovery": "reload"},
     r"deployment.failures.0.recover_after_s \(None\) must be set with elastic_recovery: reload"),
    ({"failures": [{"at_s": 1.0, "rank": 1, "recover_after_s": 2.0}, {"at_s": 2.0, "rank": 1}],
      "elastic_recovery": "reload"},
     r"deployment.failures.1 \(rank 1 at 2 s\) must not overlap failures.0"),
    ({"enable_eplb": True, "ep_num_redundant_experts": 4,
      "failures": [{"at_s": 1.0, "rank": 1}, {"at_s": 1.5, "rank": 2}]},
     r"2 ranks x 5 slots \(10\) must be >= num_experts \(16\)"),
])
def test_bad_failure_specs_fail_at_load_time(deployment, message):
    with pytest.raises(SpecError, match=message):
        tiny_scenario(deployment=deployment)


def test_simulate_cli_reports_rebalances_and_failures(tmp_path, capsys):
    import csv
    import json

    import yaml

    from epsim.cli import main
    sc = failing_scenario({"eplb_rebalance_num_iterations": 40, "expert_distribution_recorder_buffer_size": 40})
    (tmp_path / "datasheet.json").write_text(DATASHEET.model_dump_json(by_alias=True))
    path = tmp_path / "failing.yaml"
    path.write_text(yaml.safe_dump({**sc.model_dump(mode="json", exclude={"base_dir"}),
                                    "profile": "datasheet.json"}))
    assert main(["simulate", str(path), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "EPLB " in out and "rebalances" in out and "elastic EP           1 failure(s)" in out
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eplb"]["num_rebalances"] == len(summary["eplb"]["rebalances"]) >= 3
    assert [e["kind"] for e in summary["elastic"]["events"]] == ["failure", "recovery"]
    rows = list(csv.DictReader((run / "timeseries.csv").open()))
    assert {"balancedness", "num_alive", "extra_us"} <= set(rows[0])
    assert {float(r["num_alive"]) for r in rows} == {3.0, 4.0}
    for name in ("eplb_timeline.png", "failure_latency.png"):
        assert (run / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
