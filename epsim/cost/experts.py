"""Routed-expert compute of one MoE layer: grouped GEMM over each rank's local experts.

Per rank r (SwiGLU experts: gate, up, down projections; 2 flops per multiply-add):

    t_r = base_us + per_expert_us * active_r
          + active_r * expert_bytes / hbm_gbps * 1e-3
          + 6 * hidden * moe_intermediate * pairs_r / tflops * 1e-6

Additive, not a roofline max: every active expert streams its weights from HBM once and fills
its GEMM pipeline — a cost proportional to the expert's size whatever its token count — and
the FLOPs then run at the asymptotic rate. Measured on two H200 (docs/validation.md), a rank
whose 16 hot experts each take ~2048 tokens computed 46% more pairs than a uniform rank (~512
per expert) in only 17% more time, which a max() with one FLOP rate cannot express and this
sum can (the per-expert term is what small GEMMs lose). Weight reads dominate at low load,
FLOPs at high. The layer waits for the slowest rank: `experts_us = max_r t_r`.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.roofline import HBM_EFFICIENCY, TENSOR_EFFICIENCY
from epsim.spec.hardware import HardwareSpec


def experts_defaults(hardware: HardwareSpec, weight_dtype: str = "bf16") -> dict[str, float]:
    """Datasheet parameters of `any/experts`: HBM and tensor peak times stated efficiencies."""
    peak = hardware.fp8_tflops if weight_dtype == "fp8" else hardware.bf16_tflops
    return {"base_us": 8.0, "per_expert_us": 1.0,
            "hbm_gbps": hardware.hbm_gbps * HBM_EFFICIENCY, "tflops": peak * TENSOR_EFFICIENCY}


def flops_per_pair(hidden_size: int, moe_intermediate_size: int) -> float:
    """FLOPs of one token through one SwiGLU expert: 3 GEMMs x 2 flops per multiply-add."""
    return 6.0 * hidden_size * moe_intermediate_size


def experts_rank_us(pairs: np.ndarray, active: np.ndarray, expert_bytes: float,
                    pair_flops: float, params: dict[str, float]) -> np.ndarray:
    """[..., ranks] microseconds each rank spends on its local experts.

    Args:
        pairs: [..., ranks] token-expert pairs computed per rank.
        active: [..., ranks] local experts that received >= 1 token.
        expert_bytes: weight bytes of one expert; pair_flops: `flops_per_pair`.
    """
    return params["base_us"] + _variable_us(pairs, active, expert_bytes, pair_flops, params)


def _variable_us(pairs: np.ndarray, active: np.ndarray, expert_bytes: float, pair_flops: float,
                 params: dict[str, float]) -> np.ndarray:
    """`experts_rank_us` without `base_us` (the max over ranks adds it once per layer)."""
    t = (active * (expert_bytes * 1e-3 / params["hbm_gbps"])
         + pairs * (pair_flops * 1e-6 / params["tflops"]))
    if params["per_expert_us"]:
        t += params["per_expert_us"] * active
    return t


def experts_features(pairs: np.ndarray, active: np.ndarray, expert_bytes: float,
                     pair_flops: float, params: dict[str, float]) -> np.ndarray:
    """Design rows at the slowest rank (picked with `params`).

    Returns:
        [..., 4] columns (1, active, weight_bytes*1e-3 or 0, flops*1e-6 or 0); times
        `EXPERT_TERMS.coefficients(params)` gives `experts_us`.
    """
    pairs = np.asarray(pairs, dtype=np.float64)
    active = np.asarray(active, dtype=np.float64)
    slowest = experts_rank_us(pairs, active, expert_bytes, pair_flops, params).argmax(axis=-1)[..., None]
    a = np.take_along_axis(active, slowest, axis=-1)[..., 0]
    p = np.take_along_axis(pairs, slowest, axis=-1)[..., 0]
    bound = np.stack([a * expert_bytes * 1e-3, p * pair_flops * 1e-6], axis=-1)
    return np.concatenate([np.stack([np.ones_like(a), a], axis=-1), bound], axis=-1)


def experts_us(pairs: np.ndarray, active: np.ndarray, expert_bytes: float, pair_flops: float,
               params: dict[str, float]) -> np.ndarray:
    """[...] microseconds of the slowest rank (`max_r experts_rank_us`)."""
    return params["base_us"] + _variable_us(np.asarray(pairs, dtype=np.float64),
                                            np.asarray(active, dtype=np.float64),
                                            expert_bytes, pair_flops, params).max(axis=-1)
