"""How far ahead an unsaturated run's batches are known (`benchmarks/sim_speed.py
--speculation`): a bound for leaping over unsaturated steps as the fast engine leaps over
saturated ones (`epsim.sim.leap`).
"""

from __future__ import annotations

import numpy as np
from sim_speed_common import quietly, scenario_file

from epsim.sim import simulate
from epsim.spec import load_scenario

SPECULATION_CAP = 32      # steps ahead a speculation is followed, at most


def speculation_depths(name: str = "elastic_ep64_failure") -> np.ndarray:
    """How far an unsaturated run's batches are known ahead, a bound for leaping them: from each
    step k (k >= 1, with `SPECULATION_CAP` steps after it), guess that each next step lasts as
    long as step k - 1 and count the steps until an arrival falls between a guessed step start
    and the actual one. Until then every step admits the requests it actually admits (admission
    reads which requests have arrived and the batch), so its batch is known: a lower bound on
    how many steps such a guess holds.

    Returns:
        [steps - 1 - SPECULATION_CAP] int, steps each speculation holds (at most the cap).
    """
    with quietly():
        result = simulate(load_scenario(scenario_file(name)), engine="fast")
    start_s = result.steps["start_us"] * 1e-6
    step_s = result.steps["step_us"] * 1e-6
    arrivals = np.sort(np.asarray(result.arrival_s)[~np.asarray(result.is_initial)])
    ahead = np.arange(1, SPECULATION_CAP + 1)
    depths = []
    for k in range(1, start_s.shape[0] - SPECULATION_CAP):
        guessed = start_s[k] + ahead * step_s[k - 1]
        actual = start_s[k + ahead]                  # (stalls between steps count as actual)
        lo, hi = np.minimum(guessed, actual), np.maximum(guessed, actual)
        crossed = np.searchsorted(arrivals, hi, "right") > np.searchsorted(arrivals, lo, "right")
        depths.append(int(np.argmax(crossed)) if crossed.any() else SPECULATION_CAP)
    return np.asarray(depths, dtype=np.int64)


def speculation_line(name: str = "elastic_ep64_failure") -> str:
    depths = speculation_depths(name)
    if depths.shape[0] == 0:
        return f"{name}: {SPECULATION_CAP + 1} steps or fewer, nothing to speculate over"
    return (f"{name}: guessing each next step as long as the one before holds the batches of "
            f"{depths.mean():.1f} steps on average (median {np.median(depths):.0f}, 10th "
            f"percentile {np.percentile(depths, 10):.0f}, >= 4 steps {np.mean(depths >= 4):.0%}; "
            f"{depths.shape[0]} speculations, at most {SPECULATION_CAP} steps each)")
