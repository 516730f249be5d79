"""Base expert-popularity vectors: the share of routed token slots each expert receives.

A popularity vector `q` has `q.sum() == 1`; an expert's *inclusion probability* (the chance a
given token routes to it) is `top_k * q`. Because a token picks an expert at most once,
`top_k * q <= 1` must hold; `cap_shares` enforces it by water-filling.
"""

from __future__ import annotations

import numpy as np


def uniform_shares(num_experts: int) -> np.ndarray:
    """[experts] float64, equal shares."""
    return np.full(num_experts, 1.0 / num_experts)


def zipf_shares(num_experts: int, alpha: float) -> np.ndarray:
    """[experts] float64, share of the i-th most popular expert proportional to (i+1)^-alpha."""
    ranks = np.arange(1, num_experts + 1, dtype=np.float64)
    shares = ranks ** -alpha
    return shares / shares.sum()


def hotset_shares(num_experts: int, num_hot: int, hot_frac: float) -> np.ndarray:
    """[experts] float64: `num_hot` experts share `hot_frac` equally, the rest share the rest."""
    shares = np.full(num_experts, (1.0 - hot_frac) / (num_experts - num_hot))
    shares[:num_hot] = hot_frac / num_hot
    return shares


def cap_shares(shares: np.ndarray, top_k: int) -> np.ndarray:
    """Cap shares at 1/top_k (inclusion probability 1), giving the excess to the others.

    Water-filling: capped experts stay at the cap, the rest are rescaled in proportion until
    no share exceeds it. Rows of a 2-D input are capped independently.

    Args:
        shares: [..., experts] float64, rows summing to 1.
    Returns:
        [..., experts] float64, rows summing to 1, every entry <= 1/top_k.
    """
    cap = 1.0 / top_k
    out = np.array(shares, dtype=np.float64, copy=True)
    for _ in range(out.shape[-1]):
        over = out > cap * (1 + 1e-12)
        if not over.any():
            break
        at_cap = out >= cap * (1 - 1e-12)
        capped_mass = at_cap.sum(axis=-1, keepdims=True) * cap
        free_mass = np.where(at_cap, 0.0, out).sum(axis=-1, keepdims=True)
        scale = np.where(free_mass > 0, (1.0 - capped_mass) / np.maximum(free_mass, 1e-300), 0.0)
        out = np.where(at_cap, cap, out * scale)
    return out
