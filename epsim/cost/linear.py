"""The form a least-squares fitter sees: each cost model is linear in its coefficients.

A model's time is `design_row @ coefficients`, where a coefficient is either a parameter itself
(`base_us`, `per_copy_us`) or its inverse (`1/nvl_gbps`, `1/tflops`: time per byte or flop).
`LinearTerms` maps a component's parameters to that coefficient vector and back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LinearTerms:
    """Parameter names of one component, in design-row column order.

    Attributes:
        params: parameter names as the Profile stores them (`base_us`, `nvl_gbps`, ...).
        inverse: the parameters that enter as 1/param (bandwidths and throughputs).
    """

    params: tuple[str, ...]
    inverse: frozenset[str] = frozenset()

    @property
    def coef_names(self) -> tuple[str, ...]:
        """Column names of the design row: `inv_<name>` for inverse parameters."""
        return tuple(f"inv_{p}" if p in self.inverse else p for p in self.params)

    def coefficients(self, params: dict[str, float]) -> np.ndarray:
        """[len(params)] coefficient vector of a parameter dict."""
        return np.array([1.0 / params[p] if p in self.inverse else params[p] for p in self.params])

    def params_from(self, coefficients: np.ndarray) -> dict[str, float]:
        """Parameters of fitted coefficients; an inverse fitted to 0 or less (a column the fit
        never saw, e.g. RDMA on one node) is left out, so the datasheet default stays."""
        out = {}
        for name, value in zip(self.params, np.asarray(coefficients, dtype=np.float64).tolist()):
            if name not in self.inverse:
                out[name] = value
            elif value > 0:
                out[name] = 1.0 / value
        return out


COMM_TERMS = LinearTerms(("base_us", "overlap_us", "nvl_gbps", "rdma_gbps", "per_copy_us",
                          "slot_us_per_kb", "spill_gbps", "expert_signal_us", "rdma_signal_us",
                          "token_us", "chunk_us", "chunk_us_per_kb", "handshake_us"),
                         frozenset({"nvl_gbps", "rdma_gbps", "spill_gbps"}))
COLLECTIVE_TERMS = LinearTerms(("base_us", "overlap_us", "nvl_gbps", "rdma_gbps"),
                               frozenset({"nvl_gbps", "rdma_gbps"}))
EXPERT_TERMS = LinearTerms(("base_us", "per_expert_us", "hbm_gbps", "tflops", "wave_us"),
                           frozenset({"hbm_gbps", "tflops"}))
ATTENTION_TERMS = LinearTerms(("base_us", "wave_us", "per_split_us", "hbm_gbps", "tflops"),
                              frozenset({"hbm_gbps", "tflops"}))
BLOCK_OPS_TERMS = LinearTerms(("launch_us", "sort_block_us", "sort_device_us", "hbm_gbps", "tflops"),
                              frozenset({"hbm_gbps", "tflops"}))
# the attention block's own ops (`epsim.cost.attention_ops`) and a backend's own layout work
# around the grouped GEMM (`epsim.cost.layout`): a launch floor plus bytes at a memory rate
ATTENTION_OPS_TERMS = LinearTerms(("launch_us", "hbm_gbps"), frozenset({"hbm_gbps"}))
LAYOUT_TERMS = LinearTerms(("base_us", "hbm_gbps"), frozenset({"hbm_gbps"}))
