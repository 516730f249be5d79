"""`deployment.init_expert_location`: trivial, from_skew, recorded loads; the EPLB report says
why no rebalance happened."""

from __future__ import annotations

import json

import numpy as np
import pytest

from epsim.eplb import compute_placement
from epsim.errors import EpsimError
from epsim.report import summarize
from epsim.sim import Simulation, simulate
from tests.epsim.sim.test_engine import tiny_scenario

SKEWED = {"skew": {"kind": "zipf", "alpha": 1.2}, "duration_s": 0.3, "warmup_s": 0.05}


def test_from_skew_balances_the_first_steps_better_than_trivial():
    trivial = summarize(simulate(tiny_scenario(workload=SKEWED)))
    balanced = summarize(simulate(tiny_scenario(workload=SKEWED,
                                                deployment={"init_expert_location": "from_skew"})))
    assert balanced["imbalance_max_over_mean"] < trivial["imbalance_max_over_mean"]
    assert balanced["balancedness"] > trivial["balancedness"]


def test_from_skew_places_the_skew_models_expected_loads():
    sc = tiny_scenario(workload=SKEWED, deployment={"init_expert_location": "from_skew",
                                                    "ep_num_redundant_experts": 4})
    sim = Simulation(sc)        # redundant slots without EPLB: the initial placement fills them
    m, d = sc.model, sc.deployment
    expected = compute_placement(d.eplb_algorithm, sim.skew.mean_popularity(), m.num_experts + 4,
                                 m.num_expert_groups, 1, d.ep_size)
    np.testing.assert_array_equal(sim.placement.physical_to_logical, expected.physical_to_logical)
    hot = int(np.argmax(sim.skew.mean_popularity()[0]))
    assert (sim.placement.physical_to_logical[0] == hot).sum() >= 2     # the hottest is replicated


@pytest.mark.parametrize("fmt", ["npy", "jsonl"])
def test_recorded_loads_from_a_file(tmp_path, fmt):
    loads = np.ones((4, 16))
    loads[:, 5] = 50.0                                        # expert 5 is hot in every layer
    if fmt == "npy":
        np.save(tmp_path / "loads.npy", loads)
    else:
        (tmp_path / "loads.jsonl").write_text(
            "".join(json.dumps({"forward_pass_id": i, "loads": (loads / 2).tolist()}) + "\n" for i in range(2)))
    sc = tiny_scenario(base_dir=str(tmp_path), deployment={"init_expert_location": f"loads.{fmt}",
                                                           "ep_num_redundant_experts": 4})
    placement = Simulation(sc).placement.physical_to_logical
    expected = compute_placement(sc.deployment.eplb_algorithm, loads, 20, 1, 1, 4)
    np.testing.assert_array_equal(placement, expected.physical_to_logical)
    assert (placement[0] == 5).sum() >= 2


def test_bad_locations_fail_in_one_line(tmp_path):
    with pytest.raises(EpsimError, match=r"deployment.init_expert_location \('nope.jsonl'\) must be "
                                         r"trivial, from_skew or an existing file"):
        tiny_scenario(base_dir=str(tmp_path), deployment={"init_expert_location": "nope.jsonl"})
    np.save(tmp_path / "small.npy", np.ones((2, 16)))
    sc = tiny_scenario(base_dir=str(tmp_path), deployment={"init_expert_location": "small.npy"})
    with pytest.raises(EpsimError, match=r"loads shape \[2, 16\] must be \[moe layers, experts\] = \[4, 16\]"):
        Simulation(sc)


def test_eplb_report_says_why_no_rebalance_happened():
    sc = tiny_scenario(workload=SKEWED, deployment={"enable_eplb": True, "init_expert_location": "from_skew"})
    s = summarize(simulate(sc))
    note = s["eplb"]["note"]
    assert s["eplb"]["num_rebalances"] == 0 and s["eplb"]["init_expert_location"] == "from_skew"
    assert note.startswith("no rebalance: the run's ") and "fewer than eplb_rebalance_num_iterations (1000)" in note
    often = tiny_scenario(workload=SKEWED, deployment={"enable_eplb": True, "eplb_rebalance_num_iterations": 10})
    assert summarize(simulate(often))["eplb"]["note"] is None
