"""What a run will cost, estimated before it starts, and refused past a stated budget.

A simulation's host work grows with its steps x MoE layers x ranks, its memory with the
requests it draws up front, the slots in flight and one row per step; a sweep multiplies
its points; an EPLB placement grows with layers x physical slots (`sticky` with their
square). The estimates are upper bounds from the spec alone (no step is priced): steps are
at most `duration / shortest possible step`, the shortest step being `MIN_LAYER_US` per MoE
layer plus `MIN_STEP_OVERHEAD_US`, well under any measured step. Past a budget the command
stops with one line saying what to shrink; `--no-budget-check` runs it anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from epsim.errors import SpecError
from epsim.spec.workload import STEADY
from epsim.text import duration, number

MAX_BYTES = 8 * 2**30            # memory budget of one run (GiB stated in messages)
MAX_RANK_LAYER_STEPS = 1e12      # time budget: ~1 day of simulated R1 decode on 64 ranks
MAX_SWEEP_POINTS = 100_000       # points of one plan (the product of every --sweep axis)
MAX_EPLB_SECONDS = 30.0          # estimated host seconds of one placement
MAX_RUN_EPLB_SECONDS = 3600.0    # estimated host seconds of every placement of one simulation

MIN_LAYER_US = 10.0              # no MoE layer is faster: the shipped fits' dispatch and
MIN_STEP_OVERHEAD_US = 100.0     # combine bases alone are >= 15 us each; a step's overhead ~150 us
# measured against peak RSS (benchmarks/results/memory_budget.md): ~190 B per request at 1-2M
# requests, ~260 B with a failure's bookkeeping, ~60 B per slot; these bound every row there
BYTES_PER_REQUEST = 320          # arrival, lengths, first token, finish, gaps, scheduler state
BYTES_PER_SLOT = 96              # the scheduler's [ranks, max_running] arrays
BYTES_PER_STEP = 256             # one row of `epsim.sim.metrics.STEP_COLUMNS`
# measured on this project's CI-class CPU: DeepSeek's greedy ~2e-5 s per layer x slot, sticky
# ~3e-8 s per layer x slot^2 (8192 slots: 0.14 s and 1.8 s)
EPLB_S_PER_SLOT = {"sticky": 3e-8}
EPLB_S_PER_SLOT_LINEAR = 2e-5
# pricing a rebalance's weight moves (`epsim.eplb.plan_moves`) gathers, per moved slot, the
# sender's slots: layers x slots x slots per rank "cells" of int64 and bool, ~9-11 B and ~60 ns
# each (measured: 16 layers x 4096 slots over 4 ranks, 67M cells: 628 MB peak, 3.9 s)
EPLB_BYTES_PER_MOVE_CELL = 12
EPLB_S_PER_MOVE_CELL = 6e-8
EPLB_BYTES_PER_SLOT = 64         # ~8 int64 [layers, slots] maps

OVERRIDE = "pass --no-budget-check to run it anyway"


@dataclass(frozen=True)
class RunCost:
    """Upper-bound estimate of one simulation.

    Attributes:
        num_requests: requests drawn up front (arrivals x duration + initial running).
        num_slots: DP ranks x max_running_requests.
        max_steps: duration / shortest possible step.
        rank_layer_steps: max_steps x MoE layers x ranks (the time budget's unit).
        bytes: requests, slots and step rows (memory budget's unit).
        eplb_algorithm: the placement algorithm of the run's rebalances ("" without EPLB).
        eplb_placements: placements the run computes at most (one per
            `eplb_rebalance_num_iterations` steps, plus the initial one and one per failure).
        eplb_seconds: host seconds of one placement and its move plan (`eplb_cost`).
        eplb_bytes: memory of one placement and its move plan (within `bytes`).
    """

    num_requests: float
    num_slots: float
    max_steps: float
    rank_layer_steps: float
    bytes: float
    eplb_algorithm: str = ""
    eplb_placements: float = 0.0
    eplb_seconds: float = 0.0
    eplb_bytes: float = 0.0

    def problem(self) -> str | None:
        """Why this run is over budget, with what to shrink (None if it is not)."""
        shrink = ("shrink workload.duration_s, workload.arrivals.rate_per_s or "
                  "deployment.max_running_requests")
        if self.bytes > MAX_BYTES:
            eplb = (f", an EPLB placement and its moves {self.eplb_bytes / 2**30:.3g} GiB"
                    if self.eplb_bytes else "")
            return (f"needs up to {self.bytes / 2**30:.3g} GiB (requests {self.num_requests:.3g} x "
                    f"{BYTES_PER_REQUEST} B, slots {self.num_slots:.3g} x {BYTES_PER_SLOT} B, steps "
                    f"{self.max_steps:.3g} x {BYTES_PER_STEP} B{eplb}); the budget is "
                    f"{MAX_BYTES / 2**30:g} GiB; "
                    + (self._eplb_shrink if self.eplb_bytes > MAX_BYTES / 2 else shrink))
        if self.rank_layer_steps > MAX_RANK_LAYER_STEPS:
            return (f"would simulate up to {self.rank_layer_steps:.3g} rank-layer steps (steps x MoE "
                    f"layers x ranks); the budget is {MAX_RANK_LAYER_STEPS:g}; {shrink}")
        eplb_shrink = self._eplb_shrink
        if self.eplb_placements and self.eplb_seconds > MAX_EPLB_SECONDS:
            return (f"would spend ~{duration(self.eplb_seconds * 1e6)} on each EPLB placement "
                    f"({self.eplb_algorithm}, as `epsim eplb` estimates it); the budget is "
                    f"{MAX_EPLB_SECONDS:g} s; {eplb_shrink}")
        total_s = self.eplb_seconds * self.eplb_placements
        if total_s > MAX_RUN_EPLB_SECONDS:
            return (f"would spend up to ~{duration(total_s * 1e6)} on EPLB placements (up to "
                    f"{self.eplb_placements:.3g} rebalances x ~{duration(self.eplb_seconds * 1e6)} "
                    f"with {self.eplb_algorithm}); the budget is {MAX_RUN_EPLB_SECONDS:g} s; "
                    f"{eplb_shrink}")
        return None

    _eplb_shrink = ("lower deployment.ep_num_redundant_experts, use eplb_algorithm deepseek, or "
                    "raise deployment.eplb_rebalance_num_iterations")


def run_cost(scenario) -> RunCost:
    """The upper-bound cost of simulating `scenario` (a validated `Scenario`)."""
    m, d, w = scenario.model, scenario.deployment, scenario.workload
    dp = scenario.dp_size
    rate = getattr(w.arrivals, "rate_per_s", 0.0)          # trace arrivals: bounded by the file cap
    per_rank = w.initial_running_per_rank
    initial = dp * (d.max_running_requests if per_rank == STEADY       # at most a full batch
                    else min(per_rank, d.max_running_requests))
    num_requests = rate * w.duration_s + initial
    num_slots = float(dp) * d.max_running_requests
    shortest_step_us = MIN_LAYER_US * max(m.num_moe_layers, 1) + MIN_STEP_OVERHEAD_US
    max_steps = w.duration_s * 1e6 / shortest_step_us
    cells = max_steps * max(m.num_moe_layers, 1) * d.ep_size
    nbytes = (num_requests * BYTES_PER_REQUEST + num_slots * BYTES_PER_SLOT
              + max_steps * BYTES_PER_STEP)
    placements = 0.0
    if d.enable_eplb:                     # a rebalance every so many steps, one per failure/recovery
        placements += math.floor(max_steps / d.eplb_rebalance_num_iterations) + 2 * len(d.failures)
    if d.init_expert_location == "from_skew":
        placements += 1
    eplb = EplbCost(0.0, 0.0)
    if placements:
        eplb = eplb_cost(d.eplb_algorithm, max(m.num_moe_layers, 1),
                         m.num_experts + d.ep_num_redundant_experts, d.ep_size)
    return RunCost(num_requests, num_slots, max_steps, cells, nbytes + eplb.bytes,
                   d.eplb_algorithm, placements, eplb.seconds, eplb.bytes)


def check_run(scenario, where: str = "scenario") -> RunCost:
    """Raise SpecError when a simulation of `scenario` would exceed the budget (memory, steps,
    EPLB placements: `RunCost.problem`).

    Raises:
        SpecError: `<where>: this run needs up to 37 GiB (...); the budget is 8 GiB; shrink
            workload.duration_s ..., or pass --no-budget-check`.
    """
    cost = run_cost(scenario)
    problem = cost.problem()
    if problem:
        raise SpecError(f"{where}: this run {problem}, or {OVERRIDE}")
    return cost


def check_sweep(num_points: int) -> None:
    """Raise SpecError when a sweep has more points than the budget (before expanding it)."""
    if num_points > MAX_SWEEP_POINTS:
        raise SpecError(f"--sweep ({num_points:.3g} points, the product of every axis) must have at "
                        f"most {MAX_SWEEP_POINTS} points; sweep fewer values, or {OVERRIDE}")


def eplb_seconds(algorithm: str, num_layers: int, num_replicas: int) -> float:
    """Estimated host seconds of one placement's algorithm (measured rates above)."""
    cells = float(num_layers) * num_replicas
    quadratic = EPLB_S_PER_SLOT.get(algorithm)
    return cells * num_replicas * quadratic if quadratic else cells * EPLB_S_PER_SLOT_LINEAR


@dataclass(frozen=True)
class EplbCost:
    """Upper-bound host cost of one placement and the plan of its weight moves."""

    seconds: float
    bytes: float


def eplb_cost(algorithm: str, num_layers: int, num_replicas: int, num_ranks: int) -> EplbCost:
    """One placement (`eplb_seconds`) plus its move plan: layers x slots x slots per rank
    cells (`EPLB_*_PER_MOVE_CELL`)."""
    slots = float(num_layers) * num_replicas
    move_cells = slots * num_replicas / max(num_ranks, 1)
    return EplbCost(eplb_seconds(algorithm, num_layers, num_replicas)
                    + move_cells * EPLB_S_PER_MOVE_CELL,
                    slots * EPLB_BYTES_PER_SLOT + move_cells * EPLB_BYTES_PER_MOVE_CELL)


def check_eplb(algorithm: str, num_layers: int, num_replicas: int, num_ranks: int = 1) -> None:
    """Raise SpecError when a placement (and pricing its moves over `num_ranks`) would exceed
    the time or memory budget.

    Raises:
        SpecError: `--replicas (400000000) would take ~8000 s ...; the budget is 120 s ...`.
    """
    cost = eplb_cost(algorithm, num_layers, num_replicas, num_ranks)
    seconds, nbytes = cost.seconds, cost.bytes
    if nbytes > MAX_BYTES or seconds > MAX_EPLB_SECONDS:
        raise SpecError(f"--replicas ({num_replicas}) over {num_layers} layer(s) would take "
                        f"~{duration(seconds * 1e6)} and {number(nbytes / 2**30, 2)} GiB with {algorithm}; "
                        f"the budget is "
                        f"{MAX_EPLB_SECONDS:g} s and {MAX_BYTES / 2**30:g} GiB; {OVERRIDE}")
