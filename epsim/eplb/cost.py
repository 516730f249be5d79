"""What a rebalance costs: bytes moved per link, time with the slowest rank deciding, the
spare buffer it needs, and the stall it causes (stop-the-world or spread over later steps).

Model (coefficients from the profile component `any/rebalance`, datasheet defaults):
  - a slot whose logical expert changes needs that expert's weights (`expert_bytes`): a
    local copy if its GPU already held the expert, else one point-to-point transfer from a
    GPU that held it (same node first, then the holder that has sent least);
  - per rank and chunk of layers: `t_link = max(sent, received bytes) / link_gbps + transfers
    x link_latency_us`, for NVLink and RDMA separately; both links run at once, so the rank
    takes `max(t_nvlink, t_rdma)`; the chunk takes `per_layer_us x layers` plus its slowest
    rank's time;
  - a rebalance adds `algorithm_us + base_us` once. Stop-the-world stalls serving for all
    of it; spread mode moves one chunk per later step, each step paying its chunk;
  - the spare buffer holds one chunk's worth of expert slots on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.eplb.placement import Placement
from epsim.errors import PlacementError

# Assumed values (no datasheet gives them) until the live EPLB updater measures rebalances and
# the fitter replaces them (profile component "any/rebalance").
REBALANCE_DEFAULTS: dict[str, float] = {
    "base_us": 500.0,            # gather statistics, broadcast new maps, barrier
    "per_layer_us": 20.0,        # per layer: map update, copy-kernel launches
    "nvlink_latency_us": 10.0,   # per point-to-point transfer over NVLink
    "rdma_latency_us": 25.0,     # per transfer over the NIC
}

# Algorithm wall time per (layer x physical slot), microseconds, measured single-threaded with
# `benchmarks/eplb_gain.py --timing` (see docs/eplb.md); override per algorithm in the profile
# as "<algorithm>_us_per_slot".
ALGORITHM_US_PER_SLOT: dict[str, float] = {
    "deepseek": 0.75,
    "deepseek_hierarchical": 0.75,
    "deepseek_global": 0.9,
    "sticky": 10.0,
}


def rebalance_params(profile=None, cluster=None) -> dict[str, float]:
    """Cost coefficients: the profile's `any/rebalance` over defaults.

    Args:
        profile: an `epsim.profile.Profile`, or None for defaults only.
        cluster: an `epsim.spec.ClusterSpec` giving datasheet `nvlink_gbps`/`rdma_gbps`
            (GB/s, 1e9 bytes/s, per direction); None = the H200 zoo entry.
    """
    if cluster is None:
        from epsim.spec.hardware import ClusterSpec
        cluster = ClusterSpec()
    defaults = {**REBALANCE_DEFAULTS, "nvlink_gbps": cluster.nvlink_gbps_resolved,
                "rdma_gbps": cluster.rdma_gbps_resolved}
    defaults.update({f"{name}_us_per_slot": value for name, value in ALGORITHM_US_PER_SLOT.items()})
    if profile is None:
        return defaults
    return profile.params("any", "rebalance", defaults=defaults)


def algorithm_us(params: dict[str, float], algorithm: str, num_layers: int, num_physical: int) -> float:
    """Modelled wall time of a placement algorithm (µs): per-slot cost x layers x slots."""
    key = f"{algorithm}_us_per_slot"
    if key not in params:
        raise PlacementError(f"algorithm ({algorithm!r}) must be one of {sorted(ALGORITHM_US_PER_SLOT)}")
    return params[key] * num_layers * num_physical


@dataclass(frozen=True, eq=False)
class TransferPlan:
    """Weight moves from one placement to the next, per layer and rank (bytes, counts).

    Attributes (all [layers, gpus] unless noted):
        send_nvlink_bytes, recv_nvlink_bytes, send_rdma_bytes, recv_rdma_bytes: float64.
        nvlink_transfers, rdma_transfers: int64, transfers a rank takes part in (either end).
        changed_slots: [layers] int64, slots whose logical expert changes.
        local_copies: [layers] int64, changed slots filled from the same GPU (no link).
        expert_bytes: bytes of one expert's weights.
    """

    send_nvlink_bytes: np.ndarray
    recv_nvlink_bytes: np.ndarray
    send_rdma_bytes: np.ndarray
    recv_rdma_bytes: np.ndarray
    nvlink_transfers: np.ndarray
    rdma_transfers: np.ndarray
    changed_slots: np.ndarray
    local_copies: np.ndarray
    expert_bytes: float

    @property
    def moved_bytes(self) -> float:
        """Changed slots x expert bytes: what the rebalance rewrites, links or not."""
        return float(self.changed_slots.sum()) * self.expert_bytes


def plan_transfers(old: Placement, new: Placement, expert_bytes: float,
                   alive: np.ndarray | None = None) -> TransferPlan:
    """Route every changed slot's weights (module docstring) and tally bytes per link.

    Args:
        alive: [gpus] bool, GPUs that can send (elastic EP: a failed GPU holds weights no one
            can read); None = all.
    Raises:
        PlacementError: placements of different shape or topology, expert_bytes <= 0, or an
            expert with no live holder to copy from.
    """
    if not expert_bytes > 0:
        raise PlacementError(f"expert_bytes ({expert_bytes}) must be > 0")
    if (old.physical_to_logical.shape != new.physical_to_logical.shape or old.num_gpus != new.num_gpus
            or old.num_nodes != new.num_nodes):
        raise PlacementError(
            f"old and new placements (shape {list(old.physical_to_logical.shape)} on "
            f"{old.num_gpus} GPUs/{old.num_nodes} nodes vs {list(new.physical_to_logical.shape)} "
            f"on {new.num_gpus}/{new.num_nodes}) must have the same shape and topology")
    num_layers, num_gpus = new.num_layers, new.num_gpus
    gpu_of_slot, node_of_gpu = new.gpu_of_slot(), new.node_of_gpu()
    shape = (num_layers, num_gpus)
    send = {"nvlink": np.zeros(shape), "rdma": np.zeros(shape)}
    recv = {"nvlink": np.zeros(shape), "rdma": np.zeros(shape)}
    transfers = {"nvlink": np.zeros(shape, dtype=np.int64), "rdma": np.zeros(shape, dtype=np.int64)}
    changed = new.changed_slots(old)
    local = np.zeros(num_layers, dtype=np.int64)
    for layer in range(num_layers):
        old_row, new_row = old.physical_to_logical[layer], new.physical_to_logical[layer]
        holders: dict[int, set[int]] = {}
        for slot, expert in enumerate(old_row):
            if alive is None or alive[gpu_of_slot[slot]]:
                holders.setdefault(int(expert), set()).add(int(gpu_of_slot[slot]))
        sent = np.zeros(num_gpus)
        for slot in np.nonzero(old_row != new_row)[0]:
            dst, expert = int(gpu_of_slot[slot]), int(new_row[slot])
            sources = holders.get(expert)
            if sources is None:
                # the expert was on no GPU before (a rank came back empty): nothing to copy from
                raise PlacementError(f"layer {layer}: logical expert {expert} has no replica in "
                                     f"the old placement to copy from")
            if dst in sources:
                local[layer] += 1
                continue
            near = [g for g in sources if node_of_gpu[g] == node_of_gpu[dst]]
            src = min(near or sources, key=lambda g: (sent[g], g))
            link = "nvlink" if near else "rdma"
            sent[src] += expert_bytes
            send[link][layer, src] += expert_bytes
            recv[link][layer, dst] += expert_bytes
            transfers[link][layer, src] += 1
            transfers[link][layer, dst] += 1
    return TransferPlan(send["nvlink"], recv["nvlink"], send["rdma"], recv["rdma"],
                        transfers["nvlink"], transfers["rdma"], changed, local, float(expert_bytes))


@dataclass(frozen=True, eq=False)
class RebalanceCost:
    """Cost of one rebalance.

    Attributes:
        changed_slots: slots rewritten, all layers.
        moved_bytes: changed slots x expert bytes.
        nvlink_bytes, rdma_bytes: bytes sent over each link kind, all ranks and layers.
        algorithm_us, base_us: paid once per rebalance (µs).
        chunk_us: [chunks] float64, time to move each layer chunk (µs).
        chunk_slowest_rank: [chunks] int64, the rank that decides each chunk's time.
        layers_per_chunk: layers moved together.
        stall_us: serving paused by a stop-the-world rebalance (µs).
        step_us: [chunks] float64, extra time of each later step when spread: step 0 also
            pays algorithm and base (µs). Same total as `stall_us`, spread over steps.
        spare_buffer_bytes: per rank, one chunk of expert slots.
        stop_the_world: which of the two the deployment uses.
    """

    changed_slots: int
    moved_bytes: float
    nvlink_bytes: float
    rdma_bytes: float
    algorithm_us: float
    base_us: float
    chunk_us: np.ndarray
    chunk_slowest_rank: np.ndarray
    layers_per_chunk: int
    stall_us: float
    step_us: np.ndarray
    spare_buffer_bytes: float
    stop_the_world: bool

    @property
    def num_chunks(self) -> int:
        return int(self.chunk_us.shape[0])


def chunk_rank_us(plan: TransferPlan, params: dict[str, float], layers: slice) -> np.ndarray:
    """[gpus] float64 µs each rank spends moving one chunk of layers (transfers issued together).

    Per link: max(sent, received bytes) / bandwidth + transfers x latency; the rank takes the
    slower of NVLink and RDMA, which run at once.
    """
    def total(per_layer: np.ndarray) -> np.ndarray:
        return per_layer[layers].sum(axis=0)

    nvlink = (np.maximum(total(plan.send_nvlink_bytes), total(plan.recv_nvlink_bytes))
              / (params["nvlink_gbps"] * 1e3)                                # 1 GB/s = 1e3 bytes/µs
              + total(plan.nvlink_transfers) * params["nvlink_latency_us"])
    rdma = (np.maximum(total(plan.send_rdma_bytes), total(plan.recv_rdma_bytes))
            / (params["rdma_gbps"] * 1e3)
            + total(plan.rdma_transfers) * params["rdma_latency_us"])
    return np.maximum(nvlink, rdma)


def rebalance_cost(old: Placement, new: Placement, expert_bytes: float, params: dict[str, float],
                   algorithm: str | None = "deepseek", layers_per_chunk: int | None = None,
                   stop_the_world: bool = True, measured_algorithm_us: float | None = None,
                   alive: np.ndarray | None = None) -> RebalanceCost:
    """Time, bytes and memory of moving from `old` to `new`.

    Args:
        expert_bytes: one routed expert's weights (`ModelSpec.expert_bytes`).
        params: from `rebalance_params` (keys `base_us`, `per_layer_us`, `nvlink_gbps`,
            `rdma_gbps`, `nvlink_latency_us`, `rdma_latency_us`, `<algorithm>_us_per_slot`).
        algorithm: name for the modelled algorithm time; None = no algorithm time.
        layers_per_chunk: `eplb_rebalance_layers_per_chunk`; None = all layers at once.
        stop_the_world: `eplb_stop_the_world`.
        measured_algorithm_us: use this instead of the model (e.g. a timed call).
        alive: [gpus] bool, GPUs that can send weights (see `plan_transfers`).
    Raises:
        PlacementError: mismatched placements, bad chunk size or non-positive bandwidths.
    """
    for key in ("nvlink_gbps", "rdma_gbps"):
        if not params.get(key, 0) > 0:
            raise PlacementError(f"{key} ({params.get(key)}) must be > 0")
    num_layers = new.num_layers
    if layers_per_chunk is None:
        layers_per_chunk = num_layers
    if not isinstance(layers_per_chunk, (int, np.integer)) or layers_per_chunk <= 0:
        raise PlacementError(f"layers_per_chunk ({layers_per_chunk!r}) must be a positive integer")
    layers_per_chunk = min(int(layers_per_chunk), num_layers)
    plan = plan_transfers(old, new, expert_bytes, alive)
    chunk_us, slowest = [], []
    for start in range(0, num_layers, layers_per_chunk):
        layers = slice(start, min(start + layers_per_chunk, num_layers))
        per_rank = chunk_rank_us(plan, params, layers)                          # [gpus]
        slowest.append(int(np.argmax(per_rank)))
        chunk_us.append(params["per_layer_us"] * (layers.stop - layers.start) + float(per_rank.max()))
    chunk = np.asarray(chunk_us)
    if measured_algorithm_us is not None:
        algo_us = float(measured_algorithm_us)
    elif algorithm is None:
        algo_us = 0.0
    else:
        algo_us = algorithm_us(params, algorithm, num_layers, new.num_physical)
    once = algo_us + params["base_us"]
    step = chunk.copy()
    step[0] += once
    return RebalanceCost(
        changed_slots=int(plan.changed_slots.sum()), moved_bytes=plan.moved_bytes,
        nvlink_bytes=float(plan.send_nvlink_bytes.sum()), rdma_bytes=float(plan.send_rdma_bytes.sum()),
        algorithm_us=algo_us, base_us=float(params["base_us"]), chunk_us=chunk,
        chunk_slowest_rank=np.asarray(slowest, dtype=np.int64), layers_per_chunk=layers_per_chunk,
        stall_us=once + float(chunk.sum()), step_us=step,
        spare_buffer_bytes=float(layers_per_chunk * new.slots_per_gpu * expert_bytes),
        stop_the_world=bool(stop_the_world))
