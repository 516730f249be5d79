"""EPLB over time: SGLang's EPLB manager inside the simulator.

As SGLang's `EPLBManager`: the expert-distribution recorder keeps the logical expert loads of
the last `expert_distribution_recorder_buffer_size` forward passes (a ring, emptied when a
rebalance reads it); after every `eplb_rebalance_num_iterations` forward passes the manager
computes a placement of experts + `ep_num_redundant_experts` slots from that window
(`eplb_algorithm`, the previous placement given), moves the weights, then counts again. SGLang
asserts the interval is at least the window; here a shorter interval is allowed and its window
is simply the passes since the last rebalance. Cost term by term as SGLang's code runs it
(`epsim.eplb.host_terms.sglang_rebalance`: the recorder's all-reduce, the algorithm, the static
dispatch map, each layer's move plan and its `batch_isend_irecv`, waited on): stop-the-world
(`eplb_stop_the_world`) stalls serving for all of it; otherwise one chunk of
`eplb_rebalance_layers_per_chunk` layers moves per forward pass (the first also pays the
once-per-rebalance terms), its time added to that pass, and a chunk's layers serve the new
placement from the pass that moves them on.

The run starts from `deployment.init_expert_location` (`epsim.sim.initial_placement`; default
SGLang's trivial placement: experts in order, redundant slots repeating experts 0, 1, ...); the
first rebalance replaces it. With failed ranks (`epsim.sim.elastic`) the
placement is computed over the survivors' slots only; a failure triggers a rebalance at once,
a rank's rejoin restarts the interval (SGLang 0.5.12), and the next rebalance places experts on
the rejoined rank's slots.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Generator

import numpy as np

from epsim.cost.tables import PlacementTables, build_tables
from epsim.cost.traffic import count_traffic
from epsim.eplb import Placement, place_over_survivors, rebalance_cost, rebalance_params
from epsim.eplb.host_terms import (
    deployment_terms, per_op_params, shipped_host_params, tensors_per_expert,
)
from epsim.sim.metrics import balance

RESTART = "restart"      # `_pending` of a rejoin: restart the interval, no rebalance


@dataclass(eq=False)
class RebalanceEvent:
    """One rebalance.

    Attributes:
        at_s: simulated time it was decided (after forward pass `step`).
        reason: "interval" (every N passes) or "failure" (elastic EP).
        window_steps: forward passes in the statistics window.
        balancedness_before, balancedness_after: mean over layers of mean/max GPU load of the
            window's loads on the old and the new placement (live ranks, the deployment's
            replica selection).
        changed_slots, moved_bytes, nvlink_bytes, rdma_bytes: what moved (all layers).
        algorithm_us: modelled placement-algorithm time (µs).
        terms_us: every term of the rebalance (`host_terms.sglang_rebalance`), µs.
        stall_us: stop-the-world pause (0 when spread over steps).
        spread_us: time added to later steps when spread (0 when stop-the-world).
        num_chunks, layers_per_chunk: how the layers moved.
        spare_buffer_bytes: per rank, for one chunk in flight.
        done_s: when the last chunk took effect (None while moving or if cut short).
        num_alive: ranks serving when it was decided.
    """

    at_s: float
    step: int
    reason: str
    window_steps: int
    balancedness_before: float
    balancedness_after: float
    changed_slots: int
    moved_bytes: float
    nvlink_bytes: float
    rdma_bytes: float
    algorithm_us: float
    stall_us: float
    spread_us: float
    num_chunks: int
    layers_per_chunk: int
    spare_buffer_bytes: float
    stop_the_world: bool
    num_alive: int
    terms_us: dict | None = None
    done_s: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class LoadWindow:
    """Logical loads of the last `size` forward passes, each `[layers, experts]`.

    Kept as a running float64 sum of the passes (as float32, whose counts are exact up to 2^24
    token-expert pairs) and, for when more than `size` passes arrive between two reads, the
    last `size` passes themselves (float32: 48 MB for 1000 passes of Qwen3-235B at most,
    allocated as passes arrive).
    """

    def __init__(self, size: int, num_layers: int, num_experts: int):
        self.size = size
        self.shape = (num_layers, num_experts)
        self._passes: deque[np.ndarray] = deque(maxlen=size)
        self._sum = np.zeros(self.shape)
        self.count = 0                       # passes recorded since the last reset

    def reset(self) -> None:
        """Empty the window (SGLang's recorder starts afresh once a rebalance has read it)."""
        self.count = 0
        self._passes.clear()
        self._sum[:] = 0.0

    def add(self, loads: np.ndarray) -> None:
        """Record one pass's loads `[layers, experts]`."""
        self.add_many(loads[None])

    def add_many(self, loads: np.ndarray) -> None:
        """Record passes' loads `[passes, layers, experts]`, in order."""
        passes = loads.astype(np.float32)
        self._passes.extend(passes[-self.size:])
        for one in passes:                  # one by one: the running sum's bits as ever
            self._sum += one
        self.count += passes.shape[0]

    @property
    def num_steps(self) -> int:
        return min(self.count, self.size)

    def total(self) -> np.ndarray:
        """[layers, experts] float64 loads summed over the window."""
        if self.count <= self.size:
            return self._sum.copy()
        return np.sum(self._passes, axis=0, dtype=np.float64)


def window_balancedness(tables: PlacementTables, weight: np.ndarray) -> float:
    """Mean over layers of mean/max load of the live ranks, for `weight` [layers, experts]
    routed over `tables` as the step loop routes it (every live rank sending an equal share)."""
    alive = tables.placement.alive_mask
    pairs = count_traffic(weight, alive.astype(np.float64), tables, "").pairs      # [layers, ranks]
    return balance(pairs, int(alive.sum()))[1]


class EPLBManager:
    """Rebalances `sim.placement` every `eplb_rebalance_num_iterations` forward passes.

    Registers itself as a step observer of `sim` (SGLang calls its manager at the end of every
    forward pass; here a Python generator advanced once per pass, as SGLang's is).

    Attributes:
        events: every `RebalanceEvent`, in order.
        window: the statistics `LoadWindow`.
    """

    def __init__(self, sim):
        self.sim = sim
        m, c, d = sim.scenario.model, sim.scenario.cluster, sim.scenario.deployment
        self.model, self.deployment = m, d
        self.links = rebalance_params(sim.profile if sim.cost_model.params.profile_applies else None, c)
        self.params = per_op_params(self.links, tensors_per_expert(m.weight_dtype))
        # host terms were timed on a CPU: the scenario's profile if it has them, else the shipped ones
        host = sim.profile.params("any", "rebalance_host") if sim.profile is not None else {}
        self.host = host or shipped_host_params()
        self.num_nodes = max(1, d.ep_size // min(c.gpus_per_node_resolved, d.ep_size))
        self.window = LoadWindow(d.expert_distribution_recorder_buffer_size, m.num_moe_layers,
                                 m.num_experts)
        self.events: list[RebalanceEvent] = []
        self._pending: str | None = None
        self._quiet = 0          # passes ahead whose `on_step` only records (`quiet_steps`)
        self._main = self._entrypoint()
        next(self._main)
        sim.add_observer(self.on_step, fresh_loads=True)

    # -- driven by the step loop -----------------------------------------------------------
    def on_step(self, info) -> None:
        """After every forward pass: record its loads, advance the manager one pass."""
        self.window.add(info.loads)
        if self._pending is not None:
            # a failure: drop what is in flight, rebalance over the live ranks now; a rejoin:
            # restart the interval without a rebalance
            reason, self._pending = self._pending, None
            self._main.close()
            self._main = self._entrypoint(first=None if reason == RESTART else reason)
        next(self._main)

    @property
    def quiet_steps(self) -> int:
        """Forward passes ahead whose `on_step` only records their loads (neither a rebalance
        nor a chunk to move): the passes the fast engine may leap over (`epsim.sim.leap`),
        handing their loads over with `on_quiet_steps`."""
        return 0 if self._pending is not None else self._quiet

    def on_quiet_steps(self, loads: list[np.ndarray]) -> None:
        """`on_step` of passes within `quiet_steps`, given their loads in blocks `[passes,
        layers, experts]`, in order."""
        num = sum(block.shape[0] for block in loads)
        if num > self.quiet_steps:
            raise ValueError(f"{num} passes handed over; {self.quiet_steps} are quiet")
        for block in loads:
            self.window.add_many(block)
        for _ in range(num):
            next(self._main)

    def trigger(self, reason: str) -> None:
        """Rebalance at the end of the current forward pass (elastic EP calls this)."""
        self._pending = reason

    def restart_interval(self) -> None:
        """A rank's rejoin (SGLang 0.5.12's `reset_generator`, `epsim.eplb.recovery`): at the end
        of the current pass the interval starts again from zero, without a rebalance; the
        window keeps its passes, and a rebalance pending already still runs."""
        if self._pending is None:
            self._pending = RESTART

    def _entrypoint(self, first: str | None = None) -> Generator[None, None, None]:
        if first is not None:
            self._quiet = 0
            yield from self.rebalance(first)
        while True:
            interval = self.deployment.eplb_rebalance_num_iterations
            for passed in range(1, interval + 1):
                self._quiet = interval - passed     # the last pass's `on_step` rebalances
                yield
            self._quiet = 0
            yield from self.rebalance("interval")

    # -- one rebalance ---------------------------------------------------------------------
    def target(self, weight: np.ndarray) -> Placement:
        """The algorithm's placement of `weight` over the live ranks' slots (a dead rank's
        slots keep what they hold; `epsim.eplb.place_over_survivors`)."""
        return place_over_survivors(self.deployment.eplb_algorithm, weight, self.sim.placement.placement,
                                    self.model.num_expert_groups)

    def terms(self, layer_move_us: np.ndarray, num_alive: int):
        """The rebalance's terms over the `num_alive` serving ranks (`deployment_terms`)."""
        return deployment_terms(self.host, self.links, self.model, self.deployment,
                                self.num_nodes, layer_move_us, num_alive)

    def rebalance(self, reason: str) -> Generator[None, None, None]:
        """Compute, cost and install a placement; yields once per further pass it spans."""
        sim, d, state = self.sim, self.deployment, self.sim.placement
        weight = self.window.total()
        window_steps = self.window.num_steps
        self.window.reset()
        if not weight.any():
            return                                         # nothing recorded yet
        if sim.elastic is not None:
            sim.elastic.place_rejoined()       # rejoined ranks' slots join this placement
        old_tables = state.tables
        target = self.target(weight)
        new_tables = build_tables(target, d.ep_dispatch_algorithm)
        cost = rebalance_cost(old_tables.placement, target, self.model.expert_bytes, self.params,
                              algorithm=None, layers_per_chunk=1)
        terms = self.terms(cost.chunk_us, state.num_alive)
        chunk = min(d.eplb_rebalance_layers_per_chunk or self.model.num_moe_layers,
                    self.model.num_moe_layers)
        layer_us = np.asarray(terms.layer_us)
        starts = range(0, self.model.num_moe_layers, chunk)
        step_us = [terms.once_us * (i == 0) + float(layer_us[start:start + chunk].sum())
                   for i, start in enumerate(starts)]
        now_s = sim.env.now * 1e-6
        event = RebalanceEvent(
            at_s=now_s, step=sim.step_index, reason=reason, window_steps=window_steps,
            balancedness_before=window_balancedness(old_tables, weight),
            balancedness_after=window_balancedness(new_tables, weight),
            changed_slots=cost.changed_slots, moved_bytes=cost.moved_bytes,
            nvlink_bytes=cost.nvlink_bytes, rdma_bytes=cost.rdma_bytes,
            algorithm_us=terms.terms["algorithm"].us,
            stall_us=terms.stall_us if d.eplb_stop_the_world else 0.0,
            spread_us=0.0 if d.eplb_stop_the_world else float(sum(step_us)),
            num_chunks=len(step_us), layers_per_chunk=chunk,
            spare_buffer_bytes=float(chunk * target.slots_per_rank * self.model.expert_bytes),
            stop_the_world=d.eplb_stop_the_world, num_alive=state.num_alive,
            terms_us={k: t.us for k, t in terms.terms.items()})
        self.events.append(event)
        if d.eplb_stop_the_world:
            sim.stall(terms.stall_us, "eplb")
            state.update(target, tables=new_tables)
            event.done_s = now_s + terms.stall_us * 1e-6
            return
        num_layers = self.model.num_moe_layers
        for i, start in enumerate(starts):
            if i:
                yield                                      # one forward pass per chunk
            sim.charge(step_us[i], "eplb")
            state.update(target, layers=slice(start, min(start + chunk, num_layers)))
        event.done_s = sim.env.now * 1e-6
