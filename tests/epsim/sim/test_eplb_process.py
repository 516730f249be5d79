"""EPLB over time in the engine: when rebalances happen, what they cost, what they do to balance,
and the interval sweep. Runs use datasheet costs (`DATASHEET`), so they test the mechanics
whatever profile ships."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from epsim.eplb import Placement, rebalance_cost, rebalance_params
from epsim.eplb.host_terms import deployment_terms, per_op_params, shipped_host_params, tensors_per_expert
from epsim.errors import SpecError
from epsim.profile import Profile
from epsim.report import summarize
from epsim.sim import Simulation, simulate
from epsim.sim.eplb_process import LoadWindow, window_balancedness
from epsim.plan.eplb_sweep import compare_eplb, sweep_rebalance_interval
from epsim.spec import load_scenario
from tests.epsim.sim.test_engine import tiny_scenario

NUM_EXPERTS, NUM_RANKS, NUM_LAYERS = 16, 4, 4
DATASHEET = Profile(name="datasheet-H200", hardware="H200")        # no fitted component


def eplb_scenario(deployment=None, workload=None, **sections):
    """Tiny model (4 MoE layers, 16 experts, top-4) on 4 ranks, 8 redundant slots, decode with
    full batches, Zipf 1.2 skew without drift unless asked."""
    return tiny_scenario(
        deployment={"enable_eplb": True, "ep_num_redundant_experts": 8, "disaggregation_mode": "decode",
                    "max_running_requests": 64, "eplb_rebalance_num_iterations": 10,
                    "expert_distribution_recorder_buffer_size": 10, "ep_dispatch_algorithm": "random",
                    "eplb_algorithm": "deepseek_global", **(deployment or {})},
        workload={"initial_running_per_rank": 64, "arrivals": {"kind": "poisson", "rate_per_s": 20_000.0},
                  "skew": {"kind": "zipf", "alpha": 1.2}, "duration_s": 0.3, "warmup_s": 0.0,
                  **(workload or {})},
        **sections)


def run_with_steps(scenario, **kwargs):
    """Run; `seen[k]` is the placement the manager leaves after pass k, i.e. pass k + 1's."""
    sim = Simulation(scenario, profile=DATASHEET, **kwargs)
    seen = []
    sim.add_observer(lambda info: seen.append((info.index, sim.placement.physical_to_logical.copy())))
    return sim, sim.run(), seen


def test_rebalance_every_n_forward_passes_stop_the_world():
    sim, res, _ = run_with_steps(eplb_scenario())
    steps = [e["step"] for e in res.rebalances]
    # after passes 10, 20, 30, ... (0-based index of the pass that ends each count)
    assert len(steps) >= 3 and steps == list(range(9, 10 * len(steps), 10))
    assert all(e["reason"] == "interval" and e["window_steps"] == 10 for e in res.rebalances)
    assert [s[2] for s in res.stalls] == ["eplb"] * len(steps)


def test_chunked_rebalance_spans_passes_then_counts_again():
    sc = eplb_scenario({"eplb_stop_the_world": False, "eplb_rebalance_layers_per_chunk": 1})
    sim, res, seen = run_with_steps(sc)
    steps = [e["step"] for e in res.rebalances]
    # 4 chunks take passes 10..13; the count of 10 passes restarts after the last chunk
    assert steps[:3] == [9, 9 + 3 + 10, 9 + 2 * (3 + 10)]
    assert not res.stalls
    first = res.rebalances[0]
    assert first["num_chunks"] == 4 and first["stall_us"] == 0 and first["spread_us"] > 0
    extra = res.steps["extra_us"]
    # chunk i's time is added to pass 10 + i, and only there
    charged = np.flatnonzero(extra > 0)
    assert charged[:4].tolist() == [10, 11, 12, 13]
    assert extra[10:14].sum() == pytest.approx(first["spread_us"])
    assert extra[10] > extra[11]                                    # pass 10 also pays algorithm + base
    # the new placement arrives one layer per pass: layer i changes from pass 10 + i on
    before, final = seen[8][1], seen[12][1]
    assert (before != final).any()
    for i in range(4):
        at_pass = seen[9 + i][1]                                    # what pass 10 + i ran on
        np.testing.assert_array_equal(at_pass[:i + 1], final[:i + 1])
        np.testing.assert_array_equal(at_pass[i + 1:], before[i + 1:])


def test_stop_the_world_stall_is_sglangs_rebalance_term_by_term():
    sc = eplb_scenario({"eplb_rebalance_num_iterations": 12, "eplb_rebalance_layers_per_chunk": 2},
                       cluster={"num_nodes": 2, "gpus_per_node": 2})
    sim, res, seen = run_with_steps(sc)
    event = res.rebalances[0]
    old = Placement.from_physical_to_logical(seen[0][1], NUM_EXPERTS, NUM_RANKS, 2)
    new = Placement.from_physical_to_logical(seen[event["step"]][1], NUM_EXPERTS, NUM_RANKS, 2)
    links = rebalance_params(None, sc.cluster)
    moves = rebalance_cost(old, new, sc.model.expert_bytes,
                           per_op_params(links, tensors_per_expert(sc.model.weight_dtype)),
                           algorithm=None, layers_per_chunk=1)
    assert moves.rdma_bytes > 0                                      # moves cross nodes
    expected = deployment_terms(shipped_host_params(), links, sc.model, sc.deployment, 2,
                                moves.chunk_us)
    # SGLang's algorithm, the gather, per-layer plans and moves (the dispatch map with static only)
    static = {"dispatch_map"} if sc.deployment.ep_dispatch_algorithm == "static" else set()
    assert set(event["terms_us"]) == {"gather", "algorithm", "updater", "moves"} | static
    assert event["terms_us"]["moves"] == pytest.approx(moves.chunk_us.sum())
    assert event["stall_us"] == pytest.approx(expected.stall_us)
    assert event["changed_slots"] == moves.changed_slots and event["num_chunks"] == 2
    start, stall, label = res.stalls[0]
    assert (label, stall) == ("eplb", pytest.approx(expected.stall_us))
    # the next pass starts exactly one stall after the rebalancing pass ended
    s = res.steps
    k = event["step"]
    assert s["start_us"][k + 1] == pytest.approx(s["start_us"][k] + s["step_us"][k] + expected.stall_us)


def test_balancedness_improves_after_a_rebalance_under_skew():
    sc = eplb_scenario({"eplb_rebalance_num_iterations": 40, "expert_distribution_recorder_buffer_size": 40},
                       {"duration_s": 0.5})
    res = simulate(sc, profile=DATASHEET)
    first = res.rebalances[0]
    bal = res.steps["balancedness"]
    k = first["step"]
    assert bal[:k + 1].mean() < 0.75                           # trivial placement, Zipf 1.2
    assert bal[k + 1:k + 40].mean() > bal[:k + 1].mean() + 0.15
    assert first["balancedness_after"] > 0.9 > first["balancedness_before"]
    assert summarize(res)["eplb"]["num_rebalances"] == len(res.rebalances)


@pytest.mark.parametrize("drift_rate_per_s", [0.0, 1.0])
def test_balancedness_decays_under_drift(drift_rate_per_s):
    # after the last rebalance the placement stays; popularity drifts (1 swap per expert per
    # second) or holds still. Measured on the expected loads (popularity), free of per-step
    # sampling noise.
    sc = eplb_scenario({"eplb_rebalance_num_iterations": 20, "expert_distribution_recorder_buffer_size": 20},
                       {"skew": {"kind": "zipf", "alpha": 1.2, "drift_rate_per_s": drift_rate_per_s},
                        "duration_s": 0.1})
    sim = Simulation(sc, profile=DATASHEET)
    res = sim.run()
    assert len(res.rebalances) >= 1
    tables, at_s = sim.placement.tables, res.rebalances[-1]["at_s"]
    later = [window_balancedness(tables, sim.skew.popularity(at_s + dt)) for dt in (0.0, 0.5, 2.0)]
    # the placement answers the window's loads: under drift they are 20 steps old at `at_s`
    assert later[0] > 0.8
    if drift_rate_per_s == 0:
        assert later[-1] == pytest.approx(later[0])
    else:
        assert later[-1] < later[0] - 0.15


def test_load_window_keeps_the_last_passes():
    window = LoadWindow(3, 2, 4)
    assert not window.total().any()
    for value in range(1, 6):
        window.add(np.full((2, 4), float(value)))
    assert window.num_steps == 3 and window.count == 5
    np.testing.assert_allclose(window.total(), np.full((2, 4), 3.0 + 4.0 + 5.0))
    window.reset()                                  # a rebalance read it: start afresh
    window.add(np.full((2, 4), 7.0))
    assert window.num_steps == 1
    np.testing.assert_allclose(window.total(), np.full((2, 4), 7.0))


def test_same_seed_same_summary_with_eplb_and_a_failure():
    sc = eplb_scenario({"ep_num_redundant_experts": 8, "failures": [{"at_s": 0.1, "rank": 2, "recover_after_s": 0.1}],
                        "ep_dispatch_algorithm": "static"},
                       {"arrivals": {"kind": "poisson", "rate_per_s": 3000.0}, "duration_s": 0.2})
    a, b = summarize(simulate(sc, profile=DATASHEET)), summarize(simulate(sc, profile=DATASHEET))
    c = summarize(simulate(sc, seed=99, profile=DATASHEET))
    for s in (a, b, c):
        s.pop("wall_seconds")
    assert a == b
    assert a["eplb"]["num_rebalances"] >= 2 and a["elastic"]["events"]
    assert a["eplb"]["rebalances"] != c["eplb"]["rebalances"]


def test_interval_sweep_and_comparison_helpers():
    sc = eplb_scenario({}, {"skew": {"kind": "zipf", "alpha": 1.2, "drift_rate_per_s": 2.0}, "duration_s": 0.2})
    sweep = sweep_rebalance_interval(sc, [5, 20, 80], profile=DATASHEET)
    assert [row["interval"] for row in sweep.rows] == [5, 20, 80]
    assert sweep.baseline is not None and not sweep.baseline["enable_eplb"]
    counts = [row["num_rebalances"] for row in sweep.rows]
    assert counts[0] > counts[1] > counts[2]                     # more often, more stalls
    assert sweep.rows[0]["stall_s"] > sweep.rows[2]["stall_s"]
    assert sweep.best in sweep.rows and "<- best" in sweep.table()
    comparison = compare_eplb(sc, profile=DATASHEET)
    assert comparison["eplb"]["balancedness"] > comparison["static"]["balancedness"]
    assert comparison["gain_frac"] == pytest.approx(
        comparison["eplb"]["output_tokens_per_s_per_gpu"] / comparison["static"]["output_tokens_per_s_per_gpu"] - 1)
    with pytest.raises(SpecError, match=r"intervals \(\[0\]\) must be one or more positive integers"):
        sweep_rebalance_interval(sc, [0])
    static = tiny_scenario()
    with pytest.raises(SpecError, match=r"deployment.enable_eplb \(False\) must be true"):
        sweep_rebalance_interval(static, [10])


def test_redundancy_scenario_takes_the_busiest_gpu_from_2_5x_to_under_1_15x():
    # scenarios/eplb_redundancy_32gpu.yaml at a small size: the first rebalance after 15 passes
    root = Path(__file__).resolve().parents[3]
    sc = load_scenario(root / "scenarios" / "eplb_redundancy_32gpu.yaml",
                       {"workload.duration_s": 3.2, "workload.warmup_s": 0.0,   # rebalance ~0.9 s
                        "deployment.eplb_rebalance_num_iterations": 15,
                        "deployment.expert_distribution_recorder_buffer_size": 15})
    res = simulate(sc, profile=DATASHEET)
    first = res.rebalances[0]
    k = first["step"]
    busiest_over_mean = res.steps["imbalance"]                     # per pass, max/mean over 32 GPUs
    assert 2.3 <= busiest_over_mean[:k + 1].mean() <= 2.8
    assert busiest_over_mean[k + 1:].size >= 5 and busiest_over_mean[k + 1:].max() <= 1.15
    assert 1.0 / first["balancedness_after"] <= 1.15
    assert res.steps["step_us"][k + 1:].mean() < 0.7 * res.steps["step_us"][:k + 1].mean()


@pytest.mark.parametrize("selection", ["static", "random"])
def test_placement_state_chunk_updates_match_a_fresh_build(selection, rng):
    from epsim.cost.tables import build_tables
    from epsim.eplb import Placement
    from epsim.sim.placement import PlacementState
    p2l = np.tile(np.arange(24) % 16, (4, 1))                      # 16 experts + 8 redundant
    state = PlacementState(Placement.on_cluster(p2l, 16, 4, 2), selection)   # 2 nodes of 2 ranks
    target = np.stack([rng.permutation(np.r_[np.arange(16), rng.integers(0, 16, 8)]) for _ in range(4)])
    new = Placement.on_cluster(target, 16, 4, 2)
    build_tables(new, selection)                                   # as EPLB does: maps computed
    for layer in range(4):
        state.update(new, layers=slice(layer, layer + 1))
        fresh = build_tables(Placement.on_cluster(state.physical_to_logical, 16, 4, 2), selection)
        np.testing.assert_array_equal(state.physical_to_logical[:layer + 1], target[:layer + 1])
        np.testing.assert_allclose(state.tables.slot_share, fresh.slot_share)
        if selection == "static":
            np.testing.assert_array_equal(state.tables.source_slot, fresh.source_slot)
        else:
            assert state.tables.source_slot is None and fresh.source_slot is None
    assert state.version == 5
