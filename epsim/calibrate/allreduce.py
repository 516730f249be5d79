"""Fit the all-reduce model (`epsim.cost.allreduce`) on measured op timings, each coefficient
bounded by the datasheet.

A point is one timed all-reduce (message bytes, GPUs, device µs, the algorithm that ran it).
Each custom algorithm is one line, fitted by bounded least squares; NCCL is the smallest of two
ring protocol lines, and of a third, NVLS, where it wins: fitted by alternating assignment
(each point goes to the line that predicts it faster, as NCCL's tuner picks; all refitted until
no point moves), started from a split at each decile of the message sizes (with NVLS: each
pair of deciles), the split with the smallest error kept. NVLS is kept where its fit is better
and it wins at least 3 points (on AIC's H100 and H200 tables it halves the error on 256-512
MiB fitted up to 128 MiB: 12-14 % -> 6 %); else the ring's two lines stand alone. Residuals are
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
                                  custom_features, nvls_features, ring_features)
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


def _solve(rows: np.ndarray, us: np.ndarray, max_gbps: float, hops: bool = True) -> np.ndarray:
    """[3] (fixed µs, µs per latency count, µs per KB) minimising the weighted squared error,
    the fixed terms >= 0 and the bandwidth <= `max_gbps` (`hops` False: no latency count, the
    column held at 0)."""
    from scipy.optimize import lsq_linear       # scipy waits for the fit (epsim's import rule)
    weight = 1.0 / np.sqrt(us)
    cols = [0, 1, 2] if hops else [0, 2]
    lower = np.array([0.0, 0.0, 1.0 / max_gbps])[cols]
    # one GPU count makes the fixed and per-peer columns collinear: the solver's trust region
    # then meets 0 / 0 on its way (it still returns a bounded least-squares solution)
    with np.errstate(invalid="ignore"):
        fit = lsq_linear(rows[:, cols] * weight[:, None], us * weight,
                         bounds=(lower, np.full(len(cols), np.inf)))
    out = np.zeros(3)
    out[cols] = fit.x
    return out


def _line(x: np.ndarray, names: tuple[str, str, str]) -> dict[str, float]:
    return {names[0]: float(x[0]), names[1]: float(x[1]), names[2]: float(1.0 / x[2])}


def _assign(forms: list[np.ndarray], caps: list[float], hops: list[bool], us: np.ndarray,
            starts: list[np.ndarray]) -> tuple[float, list[np.ndarray], np.ndarray]:
    """(mean relative error, [lines], [points] line index) of min-of-lines, by alternating
    assignment from each start ([points] line index), the best kept: the assignment alone can
    stall in a split that is not the protocols'."""
    best = None
    for side in starts:
        for _ in range(MAX_ROUNDS):
            lines = []
            for i, (rows, cap, hop) in enumerate(zip(forms, caps, hops)):
                pick = side == i if (side == i).sum() >= 3 else np.ones(len(us), dtype=bool)
                lines.append(_solve(rows[pick], us[pick], cap, hop))
            predicted = np.stack([rows @ line for rows, line in zip(forms, lines)], axis=1)
            error = float(np.mean(np.abs(predicted.min(axis=1) / us - 1.0)))
            moved_to = predicted.argmin(axis=1)
            if best is None or error < best[0]:
                best = (error, lines, moved_to)
            if (moved_to == side).all():
                break
            side = moved_to
    return best


def _fit_nccl(points: list[AllReducePoint], nvl_gbps: float) -> dict[str, float]:
    """NCCL's coefficients: the LL and Simple ring lines, and NVLS where it is kept (module
    doc)."""
    rows, us = _rows(points, "nccl")
    nvls = np.array([nvls_features(p.num_bytes) for p in points])
    moved = rows[:, 2]
    cuts = np.unique(np.quantile(moved, SPLITS))
    caps = [nvl_gbps * LL_BANDWIDTH_RATIO, nvl_gbps, nvl_gbps]
    ring = _assign([rows, rows], caps[:2], [True, True], us,
                   [(moved >= c).astype(int) for c in cuts])
    three = _assign([rows, rows, nvls], caps, [True, True, False], us,
                    [np.searchsorted([a, b], moved, side="right")
                     for i, a in enumerate(cuts) for b in cuts[i + 1:]])
    out = {**_line(ring[1][0], ("ll_base_us", "ll_hop_us", "ll_gbps")),
           **_line(ring[1][1], ("base_us", "hop_us", "nvl_gbps"))}
    if three[0] < ring[0] and (three[2] == 2).sum() >= 3:
        out = {**_line(three[1][0], ("ll_base_us", "ll_hop_us", "ll_gbps")),
               **_line(three[1][1], ("base_us", "hop_us", "nvl_gbps")),
               "nvls_base_us": float(three[1][2][0]), "nvls_gbps": float(1.0 / three[1][2][2])}
    return out


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
        if algo == "nccl":
            out[algo].update(_fit_nccl(mine, nvl))
        else:
            rows, us = _rows(mine, algo)
            out[algo].update(_line(_solve(rows, us, nvl), ("base_us", "per_peer_us", "nvl_gbps")))
    return out
