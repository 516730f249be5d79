"""EPLB manager: every N forward passes, a new placement from the recorded loads, applied.

`step()` after each forward records the pass; every `rebalance_num_iterations` passes (and on
`rebalance()`) control rank 0 runs `epsim.eplb.compute_placement` — the simulator's own
algorithms — on the window's loads summed over ranks, broadcasts the slot map, and every rank
applies it with the updater in the same order. With masked ranks the placement is computed over
the alive ranks and their slots only (`epsim.eplb.place_over_survivors`, the simulator's rule).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Mapping

import numpy as np
import torch

from epsim.eplb import ALGORITHMS, Placement, place_over_survivors
from epsim.errors import EpsimError
from live.eplb.control import Control, control_for
from live.eplb.recorder import ExpertLoadRecorder
from live.eplb.result import RebalanceResult
from live.eplb.updater import ExpertWeightUpdater, FaultHook
from live.errors import LiveError


class EplbManager:
    """Recorder + placement algorithm + updater for one rank's model (every rank builds one).

    Args:
        model: a `live.model.Qwen3MoeModel`.
        algorithm: an `epsim.eplb.ALGORITHMS` name (`deepseek`, `deepseek_global`, `sticky`, ...).
        rebalance_num_iterations: forward passes between automatic rebalances.
        window: forward passes of statistics (default: rebalance_num_iterations).
        layers_per_chunk, weight_source, fault: passed to `ExpertWeightUpdater`.
        num_groups: expert groups for the hierarchical algorithms (nodes: the placement's).
        control_group: group of the votes and load sums (default: the EP group).
    """

    def __init__(self, model, algorithm: str = "deepseek", rebalance_num_iterations: int = 1000,
                 window: int | None = None, layers_per_chunk: int = 1,
                 weight_source: Mapping[str, torch.Tensor] | None = None, num_groups: int = 1,
                 control_group=None, fault: FaultHook | None = None):
        if algorithm not in ALGORITHMS:
            raise LiveError(f"algorithm ({algorithm!r}) must be one of {sorted(ALGORITHMS)}")
        if not isinstance(rebalance_num_iterations, int) or rebalance_num_iterations <= 0:
            raise LiveError(f"rebalance_num_iterations ({rebalance_num_iterations!r}) must be a "
                            f"positive number of forward passes")
        self.model, self.algorithm = model, algorithm
        self.rebalance_num_iterations = rebalance_num_iterations
        self.num_groups = num_groups
        self.recorder = ExpertLoadRecorder(model, window or rebalance_num_iterations, control_group)
        self.updater = ExpertWeightUpdater(model, layers_per_chunk, weight_source, control_group,
                                           fault)
        self.control_group = control_group
        self.num_passes = 0
        self.results: list[RebalanceResult] = []

    @property
    def control(self) -> Control:
        """The control plane now (the model may have been masked or moved to a new group)."""
        return control_for(self.model, self.control_group)

    def step(self) -> RebalanceResult | None:
        """Record the forward just run; rebalance when the interval is reached."""
        self.recorder.record()
        self.num_passes += 1
        if self.num_passes % self.rebalance_num_iterations:
            return None
        return self.rebalance()

    def rebalance(self, loads: np.ndarray | None = None,
                  between_chunks: Callable[[int], None] | None = None) -> RebalanceResult:
        """Compute a placement from `loads` (default: the recorded window) and apply it.

        Args:
            loads: [layers, experts] tokens per logical expert, the same on every rank.
        Raises:
            LiveError: the algorithm rejected the loads (on every rank), or bad placements;
                RebalanceAborted: a rank failed mid-move, the old placement serves.
        """
        if loads is None:
            loads = self.recorder.window_loads()
        current = self.model.placement
        new, algorithm_us = self.compute(loads, current)
        result = self.updater.apply(new, between_chunks)
        mode = self.model.block(self.model.layer_ids[0]).dispatch_mode
        selection = "random" if mode == "random" else "static"     # as epsim.eplb models them
        extra = {"algorithm": self.algorithm, "algorithm_us": algorithm_us,
                 "balancedness_before": _balancedness(current, loads, selection),
                 "balancedness_after": _balancedness(new, loads, selection),
                 "selection": selection,
                 "active_ranks": np.flatnonzero(current.alive_mask).tolist(),
                 "forward_passes": self.num_passes}
        result = replace(result, extra={**result.extra, **extra})
        self.results.append(result)
        return result

    def compute(self, loads: np.ndarray, current: Placement) -> tuple[Placement, float]:
        """Control rank 0 runs the algorithm over the alive ranks; every rank gets its slot map.

        Returns:
            (the new placement, the algorithm's wall time in µs on control rank 0).
        """
        control = self.control
        answer = None
        if control.rank == 0:
            start = time.perf_counter()
            try:
                placement = place_over_survivors(self.algorithm, np.asarray(loads, dtype=np.float64),
                                                 current, self.num_groups)
                answer = (placement.physical_to_logical, (time.perf_counter() - start) * 1e6, None)
            except EpsimError as exc:
                answer = (None, 0.0, f"{self.algorithm}: {exc}")
        p2l, algorithm_us, error = control.broadcast_object(answer)
        if error is not None:
            raise LiveError(f"placement algorithm failed: {error}")
        return current.with_physical_to_logical(p2l), algorithm_us


def _balancedness(placement: Placement, loads: np.ndarray, selection: str) -> list[float]:
    """[layers] mean / max load of the alive ranks, from `loads` (as `epsim.eplb` models it)."""
    survivors = placement.survivors()
    return survivors.balancedness(np.asarray(loads, dtype=np.float64), selection).round(4).tolist()
