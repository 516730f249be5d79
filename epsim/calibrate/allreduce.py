"""Fit the all-reduce model (`epsim.cost.allreduce`) on measured op timings, each coefficient
bounded by the datasheet.

A point is one timed all-reduce (message bytes, GPUs, device µs, the algorithm that ran it).
Each custom algorithm is one line, fitted by bounded least squares; NCCL is the smaller of two
protocol lines, fitted by alternating assignment (each point goes to the line that predicts it
faster, as NCCL's tuner picks; both refitted until no point moves), started from a split at
each decile of the message sizes, the split with the smallest error kept. Residuals are
weighted by `1 / sqrt(measured)`, a middle way between absolute error (the large messages
alone) and relative error (the small ones alone).
Bounds: fixed costs >= 0, bandwidths <= the datasheet (NVLink per direction of the cluster's
GPU; NCCL's LL line <= half of it, the share of each 16-byte LL line that is data).

Op tables only (ours, or aiconfigurator-core's `custom_allreduce_perf` and `nccl_perf`):
end-to-end measurements never reach this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.allreduce import (ALGORITHMS, LL_BANDWIDTH_RATIO, algorithm, allreduce_defaults,
                                  custom_features, ring_features)
from epsim.records import MeasurementRecord
from epsim.spec.hardware import ClusterSpec

MAX_ROUNDS = 40
SPLITS = np.linspace(0.1, 0.9, 9)     # the NCCL fit's starting splits: deciles of the bytes


@dataclass(frozen=True)
class AllReducePoint:
    """One timed all-reduce.

    Attributes:
        num_bytes: message size (bytes).
        num_ranks: GPUs in the group (one node).
        latency_us: measured device time (µs).
        algorithm: "oneshot", "twoshot" or "nccl" (what ran it).
    """

    num_bytes: float
    num_ranks: int
    latency_us: float
    algorithm: str


def points_from_records(records: list[MeasurementRecord], gpus_per_host: int) -> list[AllReducePoint]:
    """The all-reduce records among `records` (kind `allreduce` with `bytes`: the op tables'
    collectives, `epsim.calibrate.aic_comm`) as points: NCCL's (`extra.kernel` "NCCL") as `nccl`
    at every size; SGLang's device-time ones (a CUDA-graph capture) as the algorithm SGLang runs
    at their size on one host of `gpus_per_host` GPUs, those beyond its custom kernel (SGLang
    calling NCCL) and eager ones left out."""
    out = []
    for r in records:
        if r.kind != "allreduce" or r.bytes <= 0:
            continue
        if r.extra.get("kernel") == "NCCL":
            out.append(AllReducePoint(r.bytes, r.ep_size, r.median_us, "nccl"))
        elif r.timing == "device":
            algo = algorithm(r.bytes, r.ep_size, -(-r.ep_size // gpus_per_host))
            if algo != "nccl":
                out.append(AllReducePoint(r.bytes, r.ep_size, r.median_us, algo))
    return out


def _rows(points: list[AllReducePoint], algo: str) -> tuple[np.ndarray, np.ndarray]:
    """([points, 3] design rows, [points] µs) of `points` under `algo`'s form."""
    rows = [custom_features(p.num_bytes, p.num_ranks, algo) if algo != "nccl"
            else ring_features(p.num_bytes, p.num_ranks) for p in points]
    return np.array(rows, dtype=np.float64), np.array([p.latency_us for p in points])


def _solve(rows: np.ndarray, us: np.ndarray, max_gbps: float) -> np.ndarray:
    """[3] (fixed µs, µs per latency count, µs per KB) minimising the weighted squared error,
    the fixed terms >= 0 and the bandwidth <= `max_gbps`."""
    from scipy.optimize import lsq_linear       # scipy waits for the fit (epsim's import rule)
    weight = 1.0 / np.sqrt(us)
    # one GPU count makes the fixed and per-peer columns collinear: the solver's trust region
    # then meets 0 / 0 on its way (it still returns a bounded least-squares solution)
    with np.errstate(invalid="ignore"):
        fit = lsq_linear(rows * weight[:, None], us * weight,
                         bounds=([0.0, 0.0, 1.0 / max_gbps], [np.inf, np.inf, np.inf]))
    return fit.x


def _line(x: np.ndarray, names: tuple[str, str, str]) -> dict[str, float]:
    return {names[0]: float(x[0]), names[1]: float(x[1]), names[2]: float(1.0 / x[2])}


def _fit_nccl(rows: np.ndarray, us: np.ndarray, nvl_gbps: float) -> tuple[np.ndarray, np.ndarray]:
    """(LL line, Simple line) coefficients: alternating assignment started from a split at
    each decile of the moved bytes (the best kept: the assignment alone can stall in a split
    that is not the protocols')."""
    moved = rows[:, 2]
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for threshold in np.unique(np.quantile(moved, SPLITS)):
        large = moved >= threshold
        for _ in range(MAX_ROUNDS):
            lines = []
            for side, cap in ((~large, nvl_gbps * LL_BANDWIDTH_RATIO), (large, nvl_gbps)):
                pick = side if side.sum() >= 3 else np.ones_like(side)
                lines.append(_solve(rows[pick], us[pick], cap))
            predicted = np.stack([rows @ line for line in lines], axis=1)   # [points, 2]
            error = float(np.mean(np.abs(predicted.min(axis=1) / us - 1.0)))
            if best is None or error < best[0]:
                best = (error, lines[0], lines[1])
            moved_to = predicted.argmin(axis=1) == 1
            if (moved_to == large).all():
                break
            large = moved_to
    return best[1], best[2]


def fit_allreduce(points: list[AllReducePoint], cluster: ClusterSpec) -> dict[str, dict[str, float]]:
    """{algorithm: coefficients} fitted on `points` (each algorithm on its own points; one with
    fewer than 3 keeps its datasheet defaults, `allreduce_defaults`).

    Raises:
        ValueError: a point of an unknown algorithm or with a non-positive time.
    """
    defaults = allreduce_defaults(cluster)
    nvl = cluster.nvlink_gbps_resolved
    out = {algo: dict(values) for algo, values in defaults.items()}
    for p in points:
        if p.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm ({p.algorithm!r}) must be one of {list(ALGORITHMS)}")
        if not p.latency_us > 0:
            raise ValueError(f"latency_us ({p.latency_us}) must be > 0")
    for algo in ALGORITHMS:
        mine = [p for p in points if p.algorithm == algo]
        if len(mine) < 3:
            continue
        rows, us = _rows(mine, algo)
        if algo == "nccl":
            ll, simple = _fit_nccl(rows, us, nvl)
            out[algo].update(_line(ll, ("ll_base_us", "ll_hop_us", "ll_gbps")))
            out[algo].update(_line(simple, ("base_us", "hop_us", "nvl_gbps")))
        else:
            out[algo].update(_line(_solve(rows, us, nvl), ("base_us", "per_peer_us", "nvl_gbps")))
    return out
