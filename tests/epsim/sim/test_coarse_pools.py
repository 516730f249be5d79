"""Coarse pools (`Simulation(coarse_pools=True)`, the silicon scoreboard's runs): the fast
engine's MoE draws serve nearby batch shapes and the speculative draft's forwards take theirs
from pools; fewer draws, the same figures within a fraction of a percent, and nothing moves
without the flag."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.report import summarize
from epsim.sim import Simulation
from tests.epsim.sim.test_engine import tiny_scenario


def _closed(**deployment):
    # a decode instance under 256 closed-loop clients over 4 DP ranks: requests end and join
    # every few steps, so the batch's shape changes at nearly every step
    return tiny_scenario(
        deployment={"disaggregation_mode": "decode", "enable_dp_attention": True,
                    "max_running_requests": 64, **deployment},
        workload={"arrivals": {"kind": "concurrency", "clients": 256},
                  "input_len": {"kind": "uniform", "low": 800, "high": 1000},
                  "output_len": {"kind": "uniform", "low": 40, "high": 60},
                  "initial_running_per_rank": 64, "duration_s": 1.5, "warmup_s": 0.3})


def _run(scenario, coarse: bool) -> tuple[Simulation, dict]:
    sim = Simulation(scenario, coarse_pools=coarse)
    return sim, summarize(sim.run())


def test_coarse_pools_draw_fewer_and_agree_within_a_fraction_of_a_percent():
    exact_sim, exact = _run(_closed(), False)
    coarse_sim, coarse = _run(_closed(), True)
    assert coarse_sim.stepper.num_draws < 0.5 * exact_sim.stepper.num_draws
    for name in ("tpot_ms", "ttft_ms", "step_ms"):
        assert coarse[name]["mean"] == pytest.approx(exact[name]["mean"], rel=0.005), name


def test_draft_forwards_share_pools_and_agree():
    spec = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3}
    exact_sim, exact = _run(_closed(**spec), False)
    coarse_sim, coarse = _run(_closed(**spec), True)
    assert exact_sim.draft.num_pools == 0 < coarse_sim.draft.num_pools
    assert coarse_sim.draft.num_pools < 0.2 * coarse_sim.draft.num_forwards
    for name in ("tpot_ms", "ttft_ms", "step_ms"):
        assert coarse[name]["mean"] == pytest.approx(exact[name]["mean"], rel=0.005), name


def test_without_the_flag_nothing_moves():
    a = Simulation(_closed()).run()
    b = Simulation(_closed(), coarse_pools=False).run()
    for name in a.steps:
        np.testing.assert_array_equal(a.steps[name], b.steps[name], err_msg=name)
