"""LoadTrace: per-window sums of a run's expert and rank loads (the app's heatmaps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from epsim.sim import Simulation
from epsim.sim.load_trace import LoadTrace, load_share
from epsim.spec import load_scenario

DEFAULT = Path(__file__).resolve().parents[3] / "scenarios" / "default.yaml"


@pytest.mark.parametrize("overlap", [False, True])
def test_trace_holds_every_step_and_conserves_pairs(overlap):
    scenario = load_scenario(DEFAULT, {"workload.duration_s": 1.0, "workload.warmup_s": 0.0,
                                       "deployment.enable_two_batch_overlap": overlap})
    sim = Simulation(scenario)
    trace = LoadTrace(sim, num_windows=7)
    steps = []
    sim.add_observer(lambda info: steps.append((info.start_us, info.loads.copy())))
    result = sim.run()
    assert trace.num_steps.sum() == len(steps) == result.steps["start_us"].shape[0] > 0
    width = scenario.workload.duration_s / 7
    for window in range(7):
        in_window = [loads for start, loads in steps if min(int(start * 1e-6 / width), 6) == window]
        assert trace.num_steps[window] == len(in_window)
        expected = np.sum(in_window, axis=0) if in_window else np.zeros(trace.expert_loads.shape[1:])
        np.testing.assert_allclose(trace.expert_loads[window], expected)
    # every token-expert pair routed to an expert is computed on some rank (whole batch)
    np.testing.assert_allclose(trace.rank_pairs.sum(axis=2), trace.expert_loads.sum(axis=2), rtol=1e-9)
    assert trace.rank_pairs.shape == (7, scenario.model.num_moe_layers, scenario.deployment.ep_size)
    np.testing.assert_allclose(trace.t_s, (np.arange(7) + 0.5) * width)


def test_share_is_relative_to_the_window_mean():
    sums = np.zeros((3, 2, 4))                    # [windows, layers, columns]
    sums[0, 0] = [1, 1, 1, 1]
    sums[0, 1] = [4, 0, 0, 0]
    sums[2, 1] = [0, 2, 2, 0]
    share = load_share(sums)
    np.testing.assert_allclose(share[0], [5 / 2, 1 / 2, 1 / 2, 1 / 2])
    assert np.isnan(share[1]).all()               # no step in that window
    np.testing.assert_allclose(share[2], [0, 2, 2, 0])
    np.testing.assert_allclose(load_share(sums, layer=0)[0], [1, 1, 1, 1])
    finite = np.isfinite(share).all(axis=1)
    np.testing.assert_allclose(share[finite].mean(axis=1), 1.0)


def test_num_windows_must_be_positive():
    sim = Simulation(load_scenario(DEFAULT, {"workload.duration_s": 1.0, "workload.warmup_s": 0.0}))
    with pytest.raises(ValueError, match=r"num_windows \(0\) must be an integer >= 1"):
        LoadTrace(sim, num_windows=0)
