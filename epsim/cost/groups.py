"""Sums and products over consecutive groups of entries along the last axis: a rank's expert
slots (`[..., physical] -> [..., ranks]`), a node's ranks (`[..., ranks] -> [..., nodes]`).

The low owner of these reductions: `epsim.cost.tables` and `epsim.cost.traffic` both use them.
"""

from __future__ import annotations

import numpy as np


def rank_sum(x: np.ndarray, group: int) -> np.ndarray:
    """Sum consecutive groups of `group` entries along the last axis, `[..., n] -> [..., n // group]`.

    Sums along a short last axis are slow in numpy; strided adds (groups up to 16) or a sum over
    a reshaped axis are several times faster. Neither calls BLAS: a product with a block of ones
    was as fast on one thread, but its result (last bits) and speed (100x slower on two busy
    cores) changed with the BLAS thread count, so a seed did not give one result everywhere.
    """
    if group == 1:
        return x
    if group <= 16:
        out = x[..., 0::group] + x[..., 1::group]
        for k in range(2, group):
            out += x[..., k::group]
        return out
    return x.reshape(*x.shape[:-1], x.shape[-1] // group, group).sum(axis=-1)


def group_prod(x: np.ndarray, group: int) -> np.ndarray:
    """Product of consecutive groups of `group` entries along the last axis (entries > 0).

    Strided multiplies for groups up to 16; exp of summed logs beyond (`rank_sum`, no BLAS).
    """
    if group == 1:
        return x
    if group <= 16:
        out = x[..., 0::group] * x[..., 1::group]
        for k in range(2, group):
            out *= x[..., k::group]
        return out
    return np.exp(rank_sum(np.log(x), group))


def rank_sum_strided(x: np.ndarray, group: int) -> np.ndarray:
    """[n] -> [group]: sums of entries with the same index modulo `group` (same local rank)."""
    return x.reshape(-1, group).sum(axis=0)
