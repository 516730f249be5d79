"""Imbalance statistics of expert and rank loads."""

from __future__ import annotations

import numpy as np


def max_over_mean(loads: np.ndarray) -> np.ndarray:
    """Max load over mean load along the last axis (1.0 = perfectly balanced).

    Args:
        loads: [..., n] loads (tokens).
    Returns:
        [...] float64; 1.0 where every load is zero.
    """
    loads = np.asarray(loads, dtype=np.float64)
    mean = loads.mean(axis=-1)
    return np.where(mean > 0, loads.max(axis=-1) / np.where(mean > 0, mean, 1.0), 1.0)


def balancedness(loads: np.ndarray) -> np.ndarray:
    """Mean over max along the last axis, the EPLB literature's measure (1.0 = balanced)."""
    return 1.0 / max_over_mean(loads)


def gini(loads: np.ndarray) -> np.ndarray:
    """Gini coefficient along the last axis (0 = equal, ->1 = one takes all).

    G = sum_i (2i - n - 1) x_(i) / (n sum x), x sorted ascending, i = 1..n.
    """
    x = np.sort(np.asarray(loads, dtype=np.float64), axis=-1)
    n = x.shape[-1]
    total = x.sum(axis=-1)
    weights = 2.0 * np.arange(1, n + 1) - n - 1
    return np.where(total > 0, (x * weights).sum(axis=-1) / (n * np.where(total > 0, total, 1.0)), 0.0)


def rank_loads(expert_loads: np.ndarray, num_ranks: int) -> np.ndarray:
    """Loads per rank under the contiguous placement (experts e*R//E.. on rank r).

    Args:
        expert_loads: [..., experts]; experts must divide evenly over ranks.
    Returns:
        [..., ranks] float64.
    """
    loads = np.asarray(expert_loads, dtype=np.float64)
    num_experts = loads.shape[-1]
    if num_experts % num_ranks:
        raise ValueError(f"num_ranks ({num_ranks}) must divide the experts ({num_experts})")
    return loads.reshape(*loads.shape[:-1], num_ranks, num_experts // num_ranks).sum(axis=-1)


def load_stats(expert_loads: np.ndarray, num_ranks: int | None = None) -> dict[str, float]:
    """Summary of a [layers, experts] load matrix, averaged over layers."""
    loads = np.atleast_2d(np.asarray(expert_loads, dtype=np.float64))
    out = {
        "expert_max_over_mean": float(max_over_mean(loads).mean()),
        "expert_gini": float(gini(loads).mean()),
    }
    if num_ranks:
        per_rank = rank_loads(loads, num_ranks)
        out["rank_max_over_mean"] = float(max_over_mean(per_rank).mean())
        out["rank_balancedness"] = float(balancedness(per_rank).mean())
    return out
