"""Expert and rank load over simulated time: a step observer summing each step's loads into
fixed windows, for heatmaps of where the tokens went and how a rebalance moved them.

    sim = Simulation(scenario)
    trace = LoadTrace(sim, num_windows=60)
    result = sim.run()
    share = trace.rank_share()          # [windows, ranks] load / mean rank load

A step counts in the window its start falls in. Loads are token-expert pairs of the whole
batch (with two-batch overlap, both micro-batches).
"""

from __future__ import annotations

import numpy as np


def load_share(sums: np.ndarray, layer: int | None = None) -> np.ndarray:
    """Each column's share of a window relative to the mean column: 1.0 = an average rank or
    expert, 2.0 = twice the average.

    Args:
        sums: [windows, layers, columns] loads (`LoadTrace.rank_pairs` or `.expert_loads`).
        layer: one MoE layer, or None for all layers summed.
    Returns:
        [windows, columns] float64; NaN in windows without steps.
    """
    sums = np.asarray(sums, dtype=np.float64)
    part = sums.sum(axis=1) if layer is None else sums[:, layer]      # [windows, columns]
    mean = part.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mean > 0, part / mean, np.nan)


class LoadTrace:
    """Per-window sums of a run's loads, filled as the run steps.

    Args:
        sim: an `epsim.sim.Simulation` not yet run; the trace registers as its observer.
        num_windows: windows the run's `workload.duration_s` is cut into.
    Attributes:
        window_s: width of a window (s).
        rank_pairs: [windows, layers, ranks] float64, token-expert pairs each EP rank computed.
        expert_loads: [windows, layers, experts] float64, pairs routed to each logical expert.
        num_steps: [windows] int64, steps that started in each window.
    """

    def __init__(self, sim, num_windows: int = 60):
        if not isinstance(num_windows, int) or num_windows < 1:
            raise ValueError(f"num_windows ({num_windows}) must be an integer >= 1")
        m, d = sim.scenario.model, sim.scenario.deployment
        self.window_s = sim.scenario.workload.duration_s / num_windows
        self.rank_pairs = np.zeros((num_windows, m.num_moe_layers, d.ep_size))
        self.expert_loads = np.zeros((num_windows, m.num_moe_layers, m.num_experts))
        self.num_steps = np.zeros(num_windows, dtype=np.int64)
        sim.add_observer(self.on_step)

    @property
    def num_windows(self) -> int:
        return self.num_steps.shape[0]

    @property
    def t_s(self) -> np.ndarray:
        """[windows] window centres (s)."""
        return (np.arange(self.num_windows) + 0.5) * self.window_s

    def on_step(self, info) -> None:
        """Add one finished step (`epsim.sim.StepInfo`) to its window."""
        window = min(int(info.start_us * 1e-6 / self.window_s), self.num_windows - 1)
        traffic = info.cost.traffic
        self.rank_pairs[window] += traffic.pairs / traffic.fraction      # [layers, ranks]
        self.expert_loads[window] += info.loads                          # [layers, experts]
        self.num_steps[window] += 1

    def rank_share(self, layer: int | None = None) -> np.ndarray:
        """[windows, ranks] pairs per rank / mean over ranks (1.0 = balanced; the busiest rank
        sets the pace), of MoE layer `layer` or all layers summed."""
        return load_share(self.rank_pairs, layer)

    def expert_share(self, layer: int | None = None) -> np.ndarray:
        """[windows, experts] pairs per logical expert / mean over experts, of MoE layer
        `layer` or all layers summed."""
        return load_share(self.expert_loads, layer)
