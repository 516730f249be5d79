"""Dispatch and combine time of one MoE layer, per all-to-all backend.

A DeepEP-class all-to-all (`torch`, `deepep`, `mooncake`) costs, per layer,

    t = base_us + max_r(max(nvl_bytes_r / nvl_gbps, rdma_bytes_r / rdma_gbps)) * 1e-3
        + per_copy_us * max_r(copies_r) + slot_us_per_kb * max_s(slot_bytes_s) * 1e-3

where `nvl_bytes_r` is the busier direction (send or receive) of rank r's NVLink traffic and
likewise for RDMA: the busiest rank sets the pace. NVLink and the NIC are separate engines
that move bytes at the same time (DeepEP's normal kernels pipeline RDMA receive and NVLink
forwarding through chunked buffers; low-latency kernels and NCCL post to both at once), so a
rank's transfer ends with its slower link, not the sum of both. bytes / (GB/s) is ns, hence
the 1e-3.
`slot_bytes_s` is what the busiest single expert slot receives: low-latency kernels (DeepEP LL,
Mooncake EP) queue copies per expert, so one hot expert paces them even when the ranks are
balanced (measured on two H200: Zipf(1) routing, whose hottest expert takes every token, made
Mooncake's dispatch 2x slower than uniform routing with the same bytes per rank).
The `none` backend (forward_normal) instead all-gathers the batch's hidden states and
all-reduces the expert outputs; a ring moves `(n-1)/n` (all-gather) or `2(n-1)/n` (all-reduce)
of the bytes over each rank's slowest link.

Every model is linear in its coefficients (`base_us`, `1/nvl_gbps`, `1/rdma_gbps`,
`per_copy_us`) once the busiest rank is known: `comm_features` returns the design row a
least-squares fitter needs, `comm_us` is that row times `COMM_TERMS.coefficients(params)`.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.linear import COLLECTIVE_TERMS, COMM_TERMS
from epsim.cost.traffic import Traffic
from epsim import vocab
from epsim.errors import SpecError
from epsim.spec.hardware import ClusterSpec

# Datasheet defaults: achieved / datasheet bandwidth, and small fixed latencies (us). The
# calibration profile replaces them with fitted values where a live measurement exists.
NVLINK_EFFICIENCY = 0.8
RDMA_EFFICIENCY = 0.8
_BASE_US = {
    ("torch", ""): 40.0,             # NCCL all_to_all_single + the split-size exchange
    ("deepep", "normal"): 30.0,      # layout + notify kernels before the copy
    ("deepep", "low_latency"): 12.0,
    ("mooncake", ""): 15.0,          # derived from DeepEP low-latency
    ("none", ""): 15.0,              # one NCCL collective
}

_FP8_BLOCK = 128          # DeepEP FP8 dispatch: one float32 scale per 128 hidden values
_DEDUP_META_BYTES = 12    # per top-k choice: int64 expert index + float32 weight
_PAIR_META_BYTES = 16     # per copy: DeepEP low-latency's int4 source-info header


def check_backend(backend: str) -> str:
    if backend not in vocab.BACKENDS:
        raise SpecError(f"backend ({backend!r}) must be one of {list(vocab.A2A_BACKENDS)}")
    return backend


def dedup_for(backend: str, mode: str = "") -> str:
    """How `backend` (in deepep `mode`) counts copies: "pair", "rank", "node" or "" (none)."""
    return vocab.copies_for(check_backend(backend), mode)


def dispatch_bytes_per_copy(hidden_size: int, dispatch_dtype: str, top_k: int, dedup: str) -> float:
    """Bytes one dispatched token copy carries.

    BF16: 2 bytes per hidden value. FP8: 1 byte per value + one float32 scale per 128 values.
    Plus routing metadata: a deduplicated copy carries all `top_k` (index, weight) pairs; a
    per-(token, expert) copy carries a 16-byte header.
    """
    if dispatch_dtype == "bf16":
        payload = 2.0 * hidden_size
    elif dispatch_dtype == "fp8":
        payload = hidden_size + 4.0 * hidden_size / _FP8_BLOCK
    else:
        raise SpecError(f"dispatch_dtype ({dispatch_dtype!r}) must be one of "
                        f"{list(vocab.DISPATCH_DTYPES)}")
    meta = _PAIR_META_BYTES if dedup == "pair" else _DEDUP_META_BYTES * top_k
    return payload + meta


def combine_bytes_per_copy(hidden_size: int) -> float:
    """Combine returns each copy's expert output in BF16: 2 bytes per hidden value."""
    return 2.0 * hidden_size


# -- all-to-all (torch, deepep, mooncake) ------------------------------------------------------
def rdma_gbps_default(backend: str, cluster: ClusterSpec) -> float:
    """Achievable scale-out GB/s per GPU: NIC line rate x RDMA_EFFICIENCY x the framing ratio of
    the backend's transport path over the cluster's network (`epsim.cost.transport`)."""
    from epsim.cost.transport import transport_path
    path = transport_path(backend, cluster.network_resolved.kind)
    return cluster.rdma_gbps_resolved * RDMA_EFFICIENCY * path.wire_ratio


def comm_defaults(backend: str, mode: str, cluster: ClusterSpec) -> dict[str, float]:
    """Datasheet parameters of `<backend>/dispatch|combine[/mode]` for a cluster."""
    check_backend(backend)
    return {
        "base_us": _BASE_US[(backend, mode if backend == "deepep" else "")],
        "nvl_gbps": cluster.nvlink_gbps_resolved * NVLINK_EFFICIENCY,
        "rdma_gbps": rdma_gbps_default(backend, cluster),
        "per_copy_us": 0.0,
        "slot_us_per_kb": 0.0,
    }


def comm_features(nvl_copies: np.ndarray, rdma_copies: np.ndarray, copies: np.ndarray,
                  bytes_per_copy: float, params: dict[str, float],
                  max_slot_pairs: np.ndarray | float = 0.0) -> np.ndarray:
    """Design rows of the all-to-all model at each layer's busiest rank.

    Args:
        nvl_copies, rdma_copies: [..., ranks] busier direction of each rank's link (copies).
        copies: [..., ranks] link-crossing copies per rank (busier direction).
        params: picks the busiest rank (the one whose slower link takes longest) and, at it,
            the link that paces it (the other link's column is zero).
        max_slot_pairs: [...] pairs into the busiest single expert slot.
    Returns:
        [..., 5] float64 columns (1, nvl_bytes*1e-3, rdma_bytes*1e-3, max copies,
        slot_bytes*1e-3); times `COMM_TERMS.coefficients(params)` gives microseconds.
    """
    nvl_kb = np.asarray(nvl_copies, dtype=np.float64) * (bytes_per_copy * 1e-3)
    rdma_kb = np.asarray(rdma_copies, dtype=np.float64) * (bytes_per_copy * 1e-3)
    nvl_t, rdma_t = nvl_kb / params["nvl_gbps"], rdma_kb / params["rdma_gbps"]
    busiest = np.maximum(nvl_t, rdma_t).argmax(axis=-1)[..., None]
    nvl_b = np.take_along_axis(nvl_kb, busiest, axis=-1)[..., 0]
    rdma_b = np.take_along_axis(rdma_kb, busiest, axis=-1)[..., 0]
    rdma_paces = (np.take_along_axis(rdma_t, busiest, axis=-1)[..., 0]
                  > np.take_along_axis(nvl_t, busiest, axis=-1)[..., 0])
    nvl_b, rdma_b = np.where(rdma_paces, 0.0, nvl_b), np.where(rdma_paces, rdma_b, 0.0)
    slot_kb = np.broadcast_to(np.asarray(max_slot_pairs, dtype=np.float64) * (bytes_per_copy * 1e-3),
                              nvl_b.shape)
    return np.stack([np.ones_like(nvl_b), nvl_b, rdma_b, np.asarray(copies).max(axis=-1), slot_kb],
                    axis=-1)


def comm_us(traffic: Traffic, bytes_per_copy: float, params: dict[str, float]) -> np.ndarray:
    """[layers] microseconds of one dispatch (or combine) of `traffic`.

    The module formula evaluated directly (the step loop's hot path); equals
    `comm_features(...) @ COMM_TERMS.coefficients(params)`.
    """
    kb = bytes_per_copy * 1e-3
    busy = traffic.nvl_copies * (kb / params["nvl_gbps"])                # [layers, ranks]
    if traffic.multi_node:                     # links run concurrently: the slower one paces
        busy = np.maximum(busy, traffic.rdma_copies * (kb / params["rdma_gbps"]))
    t = params["base_us"] + busy.max(axis=-1)
    if params["per_copy_us"]:
        t = t + params["per_copy_us"] * traffic.copies.max(axis=-1)
    if params.get("slot_us_per_kb") and traffic.max_slot_pairs is not None:
        t = t + params["slot_us_per_kb"] * traffic.max_slot_pairs * kb
    return t


# -- collectives (the `none` backend, TP attention) ---------------------------------------------
def collective_defaults(cluster: ClusterSpec) -> dict[str, float]:
    """Datasheet parameters of `none/allreduce`."""
    return {"base_us": _BASE_US[("none", "")],
            "nvl_gbps": cluster.nvlink_gbps_resolved * NVLINK_EFFICIENCY,
            "rdma_gbps": rdma_gbps_default("none", cluster)}


def collective_features(num_bytes: np.ndarray | float, num_ranks: int, num_nodes: int,
                        passes: int) -> np.ndarray:
    """Design rows of a ring collective over `num_ranks` ranks.

    Each rank moves `passes * (n-1)/n * num_bytes` (all-gather: passes=1, all-reduce: 2) over
    its slowest link: RDMA when the ring spans nodes, else NVLink.

    Returns:
        [..., 3] float64 columns (1, nvl_bytes*1e-3, rdma_bytes*1e-3).
    """
    num_bytes = np.asarray(num_bytes, dtype=np.float64)
    moved_kb = passes * (num_ranks - 1) / num_ranks * num_bytes * 1e-3
    zero = np.zeros_like(moved_kb)
    if num_ranks == 1:
        return np.stack([zero, zero, zero], axis=-1)
    if num_nodes > 1:
        return np.stack([np.ones_like(moved_kb), zero, moved_kb], axis=-1)
    return np.stack([np.ones_like(moved_kb), moved_kb, zero], axis=-1)


def collective_us(num_bytes: np.ndarray | float, num_ranks: int, num_nodes: int, passes: int,
                  params: dict[str, float]) -> np.ndarray:
    """Microseconds of a ring all-gather (passes=1) or all-reduce (passes=2) of `num_bytes`."""
    rows = collective_features(num_bytes, num_ranks, num_nodes, passes)
    return rows @ COLLECTIVE_TERMS.coefficients(params)
