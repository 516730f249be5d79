"""MLA's absorbed BMMs as SGLang runs them: one `[T, k] x [k, n]` GEMM per head, `h` heads
batched (`W_UK`: k = qk_nope 128, n = kv_lora 512; `W_UV`: k = 512, n = v 128).

  bf16  `torch.bmm` (cuBLAS's batched GEMM) on the strided `[h, T, k]` view of the activations:
        a roofline, memory or math, with no tile waves of its own (AIC's tables time `W_UK` and
        `W_UV` alike at equal `h T`, though `W_UK` has 4x the output tiles)
  fp8   `per_tensor_quant_mla_fp8` then `bmm_fp8` (cuBLASLt): the quantisation is two Triton
        launches over a `(T, h)` grid, one program per (token, head) row of `k` values -- stage 1
        takes the row's absmax and `atomic_max`es it into the tensor's single scale, stage 2
        reads the row again and writes it in FP8 (sglang `fp8_kernel.py`). Stage 1 follows its
        rows, not their bytes (its reads hide under the atomics on one address): AIC's tables
        time `W_UK` (128-value rows) and `W_UV` (512-value rows) at about the same ~1.4 ns
        (Blackwell) to ~1.9 ns (Hopper) per row, 4-7x the rows' bytes at HBM rate; stage 2 moves
        its bytes (a fit that charged stage 1's reads too priced `W_UV` 10-20 % over `W_UK`
        where the tables time them within a few per cent)

    t = base_us + max(mem_us, math_us) + quant_us
    mem_us   = (h n k w_f + h T (k a_f + 2 n)) / rate * 1e-3
    math_us  = 2 h T n k / (tensor_frac x peak_f) * 1e-6
    quant_us = h T k QUANT_PASS_BYTES / rate * 1e-3 + h T quant_row_us   (fp8 only)
    rate     = l2_hbm_ratio x HBM where the bytes (mem and quant) fit the GPU's L2 (a ratio, not
               a fraction: L2 beats HBM), else hbm_frac x HBM

The L2 regime is the tables': a collector replays the same BMM, so a working set within L2 stays
there. AIC's BF16 rows run at ~7 TB/s up to 32 MB on Hopper (L2 50 MB) and ~9.5 TB/s up to 100
MB on Blackwell, then at 75-80 % of HBM from 64 MB (Hopper) and 150 MB (Blackwell) on; a fit
with one HBM rate took the L2 rows' speed for HBM's and priced Blackwell's larger batches 12-15 %
short. A served BMM is priced with the same split: its activations come warm from the kernel
before; its weights, cold in serving, are the smaller part (16.8 MB at 128 heads in BF16, 2 MB at
TP 8's 16 heads).

`quant_row_us` is the quantisation's time per row past its bytes (the programs' launch and the
scale's same-address atomics), an absolute µs like a GEMM's `wave_us`: it transfers between
GPUs of one architecture (fitted 1.3-1.4 ns on H100/H200, 1.1-1.2 ns on the four Blackwells),
not across.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.linear import LinearTerms
from epsim.cost.quant import ACTIVATION_BYTES, BF16_BYTES, absolute, gemm_defaults, tensor_peak
from epsim.cost.roofline import HBM_EFFICIENCY
from epsim.spec.gpu import HardwareSpec
from epsim.spec.quant import weight_bytes_per_element

BMM_TERMS = LinearTerms(
    ("base_us", "hbm_frac", "tensor_frac", "quant_row_us", "l2_hbm_ratio"),
    frozenset({"hbm_frac", "tensor_frac", "l2_hbm_ratio"}))
# formats whose BMM quantises its activations per tensor first (`per_tensor_quant_mla_fp8`)
PER_TENSOR_QUANT = ("fp8",)
# bytes per element the quantisation moves past its rows' cost: stage 2 reads BF16 and writes FP8
# (stage 1's BF16 reads hide under its atomics, `quant_row_us`)
QUANT_PASS_BYTES = BF16_BYTES + 1.0


@dataclass(frozen=True)
class BmmWork:
    """What `h` per-head GEMMs `[T, k] x [k, n]` do, elementwise over `[...]` float64.

    Attributes:
        mem_kb: weights, activations in and BF16 output, KB.
        mflops: MFLOP.
        quant_kb: bytes the per-tensor quantisation moves, KB (0 for BF16).
        rows: (token, head) rows the quantisation's programs run over (0 for BF16).
    """

    mem_kb: np.ndarray
    mflops: np.ndarray
    quant_kb: np.ndarray
    rows: np.ndarray


def bmm_defaults() -> dict[str, float]:
    """Datasheet parameters: a GEMM's (`epsim.cost.quant.gemm_defaults`), no per-row cost and
    L2-resident bytes at the HBM rate (no L2 speed-up claimed without a fit)."""
    return {**gemm_defaults(), "quant_row_us": 0.0, "l2_hbm_ratio": HBM_EFFICIENCY}


def bmm_work(tokens, n: int, k: int, heads: int, fmt: str) -> BmmWork:
    """The work of `heads` BMMs `[tokens, k] x [k, n]` on `fmt` weights (module docstring).

    Args:
        tokens: [...] tokens; 0 tokens do no work.
    """
    t = np.asarray(tokens, dtype=np.float64)
    busy = (t > 0).astype(np.float64)
    rows = heads * t
    mem = busy * heads * n * k * weight_bytes_per_element(fmt) + rows * (
        k * ACTIVATION_BYTES[fmt] + BF16_BYTES * n)
    quant = fmt in PER_TENSOR_QUANT
    return BmmWork(mem * 1e-3, 2.0 * rows * n * k * 1e-6,
                   rows * k * QUANT_PASS_BYTES * 1e-3 if quant else np.zeros_like(t),
                   rows if quant else np.zeros_like(t))


def bmm_us(work: BmmWork, params, hardware: HardwareSpec, fmt: str) -> np.ndarray:
    """[...] microseconds of `work` with parameters `params` (`BMM_TERMS`); 0 where none."""
    rate = absolute({**bmm_defaults(), **params}, hardware, fmt)
    gbps = np.where(_in_l2(work, hardware), rate["l2_hbm_ratio"] * hardware.hbm_gbps,
                    rate["hbm_gbps"])
    t = (rate["base_us"] + np.maximum(work.mem_kb / gbps, work.mflops / rate["tflops"])
         + work.quant_kb / gbps + work.rows * rate["quant_row_us"])
    return np.where(work.mflops > 0, t, 0.0)


def _in_l2(work: BmmWork, hardware: HardwareSpec) -> np.ndarray:
    """[...] whether the BMM's bytes (its quantisation's too) fit the GPU's L2
    (`HardwareSpec.l2_bytes`: Hopper's 50 MB; Blackwell's two dies hold ~126 MB, and AIC's BF16
    BMM rows leave the L2 rate between 100 and 150 MB of working set)."""
    return (work.mem_kb + work.quant_kb) * 1e3 <= hardware.l2_bytes


def bmm_features(work: BmmWork, params, hardware: HardwareSpec, fmt: str) -> np.ndarray:
    """[..., 5] design rows in `BMM_TERMS` order: (1, µs at the datasheet HBM rate of the memory
    side if memory-bound plus the quantisation's bytes -- beyond L2, µs at the datasheet tensor
    peak if compute-bound, quantised rows, the same bytes' µs within L2); times
    `BMM_TERMS.coefficients(params)` gives `bmm_us`."""
    rate = absolute({**bmm_defaults(), **params}, hardware, fmt)
    l2 = _in_l2(work, hardware)
    gbps = np.where(l2, rate["l2_hbm_ratio"] * hardware.hbm_gbps, rate["hbm_gbps"])
    mem_bound = work.mem_kb / gbps >= work.mflops / rate["tflops"]
    bytes_us = (np.where(mem_bound, work.mem_kb, 0.0) + work.quant_kb) / hardware.hbm_gbps
    return np.stack([(work.mflops > 0).astype(np.float64), np.where(l2, 0.0, bytes_us),
                     np.where(mem_bound, 0.0, work.mflops) / tensor_peak(hardware, fmt),
                     work.rows, np.where(l2, bytes_us, 0.0)], axis=-1)
