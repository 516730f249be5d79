"""What a rebalance costs: bytes moved per link, time with the slowest rank deciding, the
spare buffer it needs, and the stall it causes (stop-the-world or spread over later steps).

Model (coefficients from the profile component `any/rebalance`, datasheet defaults):
  - a slot whose logical expert changes needs that expert's weights (`expert_bytes`): a
    local copy if its rank already held the expert, else one point-to-point transfer from a
    rank that held it (`epsim.eplb.moves.plan_moves`, the rule `live/` moves weights by);
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

from epsim.eplb.moves import plan_moves
from epsim.eplb.placement import Placement
from epsim.errors import PlacementError
from epsim.spec.hardware import ClusterSpec

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


def chunk_rank_us(tallies: dict[str, np.ndarray], params: dict[str, float],
                  layers: slice) -> np.ndarray:
    """[ranks] float64 µs each rank spends moving one chunk of layers (transfers issued together).

    Per link: max(sent, received bytes) / bandwidth + transfers x latency; the rank takes the
    slower of NVLink and RDMA, which run at once.

    Args:
        tallies: `MovePlan.link_tallies()`, [layers, ranks] per link.
    """
    def total(name: str) -> np.ndarray:
        return tallies[name][layers].sum(axis=0)

    nvlink = (np.maximum(total("send_nvlink_bytes"), total("recv_nvlink_bytes"))
              / (params["nvlink_gbps"] * 1e3)                                # 1 GB/s = 1e3 bytes/µs
              + total("nvlink_transfers") * params["nvlink_latency_us"])
    rdma = (np.maximum(total("send_rdma_bytes"), total("recv_rdma_bytes"))
            / (params["rdma_gbps"] * 1e3)
            + total("rdma_transfers") * params["rdma_latency_us"])
    return np.maximum(nvlink, rdma)


def rebalance_cost(old: Placement, new: Placement, expert_bytes: float, params: dict[str, float],
                   algorithm: str | None = "deepseek", layers_per_chunk: int | None = None,
                   stop_the_world: bool = True,
                   measured_algorithm_us: float | None = None) -> RebalanceCost:
    """Time, bytes and memory of moving from `old` to `new` (ranks alive in both send and
    receive; `epsim.eplb.moves.plan_moves`).

    Args:
        expert_bytes: one routed expert's weights (`ModelSpec.expert_bytes`).
        params: from `rebalance_params` (keys `base_us`, `per_layer_us`, `nvlink_gbps`,
            `rdma_gbps`, `nvlink_latency_us`, `rdma_latency_us`, `<algorithm>_us_per_slot`).
        algorithm: name for the modelled algorithm time; None = no algorithm time.
        layers_per_chunk: `eplb_rebalance_layers_per_chunk`; None = all layers at once.
        stop_the_world: `eplb_stop_the_world`.
        measured_algorithm_us: use this instead of the model (e.g. a timed call).
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
    plan = plan_moves(old, new, expert_bytes=expert_bytes)
    tallies = plan.link_tallies()
    chunk_us, slowest = [], []
    for start in range(0, num_layers, layers_per_chunk):
        layers = slice(start, min(start + layers_per_chunk, num_layers))
        per_rank = chunk_rank_us(tallies, params, layers)                       # [ranks]
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
        nvlink_bytes=float(tallies["send_nvlink_bytes"].sum()),
        rdma_bytes=float(tallies["send_rdma_bytes"].sum()),
        algorithm_us=algo_us, base_us=float(params["base_us"]), chunk_us=chunk,
        chunk_slowest_rank=np.asarray(slowest, dtype=np.int64), layers_per_chunk=layers_per_chunk,
        stall_us=once + float(chunk.sum()), step_us=step,
        spare_buffer_bytes=float(layers_per_chunk * new.slots_per_rank * expert_bytes),
        stop_the_world=bool(stop_the_world))
