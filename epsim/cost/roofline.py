"""Roofline time of a kernel: the larger of its memory time and its math time.

    t = max(bytes / hbm_gbps * 1e-3, flops / tflops * 1e-6)    (microseconds)

bytes / (GB/s) is nanoseconds; flops / (TFLOP/s) is picoseconds, hence the scale factors.
Linear in (1/hbm_gbps, 1/tflops) once the bound side is known, which `roofline_features`
reports as a design row for a least-squares fitter.
"""

from __future__ import annotations

import numpy as np

HBM_EFFICIENCY = 0.8        # achieved / datasheet HBM bandwidth of a streaming kernel
TENSOR_EFFICIENCY = 0.6     # achieved / datasheet dense tensor-core peak of a mid-size GEMM


def roofline_features(num_bytes: np.ndarray, flops: np.ndarray, hbm_gbps: float,
                      tflops: float) -> np.ndarray:
    """[..., 2] design columns (bytes*1e-3 if memory-bound else 0, flops*1e-6 if compute-bound
    else 0); times (1/hbm_gbps, 1/tflops) gives `roofline_us`."""
    mem = np.asarray(num_bytes, dtype=np.float64) * 1e-3
    math = np.asarray(flops, dtype=np.float64) * 1e-6
    mem_bound = mem / hbm_gbps >= math / tflops
    return np.stack([np.where(mem_bound, mem, 0.0), np.where(mem_bound, 0.0, math)], axis=-1)


def roofline_us(num_bytes: np.ndarray, flops: np.ndarray, hbm_gbps: float, tflops: float) -> np.ndarray:
    """Microseconds, elementwise: max(bytes/hbm_gbps*1e-3, flops/tflops*1e-6)."""
    return np.maximum(np.multiply(num_bytes, 1e-3 / hbm_gbps, dtype=np.float64),
                      np.multiply(flops, 1e-6 / tflops, dtype=np.float64))
