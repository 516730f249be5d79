"""The dense per-tensor FP8 GEMM SGLang runs on Hopper: sgl-kernel's CUTLASS `fp8_scaled_mm`
(`csrc/gemm/fp8_gemm_kernel.cu`, `sm90_fp8_dispatch_shape`), its tile choice by the token
count and the operand bytes each SM streams.

Tile choice. The kernel picks its CTA tile by `m` alone: 64 x 64 output tiles (TMA warp-
specialised, ping-pong) for a decode's few rows, 128 x 128 above. aiconfigurator-core's H100
and H200 tables (SGLang 0.5.14, `collector/sglang/collect_gemm.py`: `sgl_per_token_quant_fp8`
then `fp8_scaled_mm`) step where the tile changes, at m 128 -> 129 (H200, 16384 x 16384:
81.3 -> 160.3 µs; 64 -> 65, one more 64-row tile: 77.6 -> 103.5 µs), so `SMALL_TILE_MAX_M` is
128 (the source read, sglang 04ec0bc, switches at 256: another build; the shape hold-out
judges 128 better: H100 16.0 against 18.9 % refitted both ways). No split-K, no stream-K: every CTA owns one
output tile and walks the whole K.

Operand feed. Each CTA streams its tile's A rows and B columns, `(rows + cols) K` bytes, into
shared memory; with few tiles -- a decode's rows on a narrow weight -- only `ctas` SMs stream
the weights and the rest idle. The H200 table at one row shows it: n = 128 to 2048 (2 to 32
CTAs) at K = 16384 take 13.1-19.6 µs, nearly flat in n: one 64-column slice of the weight per
SM at 70-120 GB/s, where the whole GPU's HBM would stream the largest in 7 µs; cuBLAS's BF16
GEMM, which splits K over idle SMs, streams the same weights 2-4x faster. So the busiest SM's
compute side is its streamed bytes at `sm_feed_gbps` (fitted; `epsim.cost.fp4_gemm`'s term,
bounded by the SM's shared-memory bandwidth) beside the MMA time (`epsim.cost.quant`).

Blackwell's `sm100_fp8_dispatch_bias` runs other tiles (64 x 64 to 256 x 128, by the next power
of two of m); its tables do not show the per-SM floor (B200, 2048 x 16384: 19.2-20.9 µs at
m = 1 to 128 through a tile change), so Blackwell keeps the plain tile model.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from epsim.cost.fp4_gemm import per_row_count, sm_feed_elements

# GPUs whose per-tensor FP8 dense GEMM is this kernel with its per-SM feed (SM90)
CUTLASS_FP8_GPUS = ("H100", "H200", "H800", "H20")
SMALL_TILE = 64                 # the 64 x 64 tile's side, for m <= SMALL_TILE_MAX_M
LARGE_TILE = 128                # the 128 x 128 tile's side above
SMALL_TILE_MAX_M = 128          # where the tables step to the large tile (module docstring)


def cutlass_fp8_tile(m: int) -> int:
    """The side of the square CTA tile `fp8_scaled_mm` runs `m` rows on, Hopper."""
    return SMALL_TILE if m <= SMALL_TILE_MAX_M else LARGE_TILE


@lru_cache(maxsize=65536)
def _cutlass_fp8_work(m: int, n: int, k: int, num_sms: int, batch: int
                      ) -> tuple[float, float, float]:
    """(waves, MMA MFLOP over the waves' filled CTAs, elements one SM streams over its waves
    / k) of `batch` GEMMs `[m, k] x [k, n]` at the kernel's tile."""
    tile = cutlass_fp8_tile(m)
    m_tiles, n_tiles = -(-m // tile), -(-n // tile)
    waves = -(-batch * m_tiles * n_tiles // num_sms)
    mflops = waves * num_sms * 2.0 * tile * tile * k * 1e-6
    return float(waves), mflops, sm_feed_elements(waves, m / m_tiles, n / n_tiles)


def cutlass_fp8_work(m, n: int, k: int, num_sms: int, act_bytes: float, batch: int = 1
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(waves, MFLOP, feed KB) of `batch` GEMMs `[m, k] x [k, n]` on sgl-kernel's Hopper FP8
    GEMM, each [...] float64 like `m`: the busiest SM's rounds of CTA tiles, the FLOPs of every
    SM's tiles over those rounds (wave-quantised, the tile padded), and the operand KB the
    busiest SM streams, `waves (rows + cols) k a_f` (`act_bytes`: a_f, 1 byte of FP8, its
    per-token scale negligible). 0 rows do no work."""
    return per_row_count(_cutlass_fp8_work, m, n, k, num_sms, act_bytes, batch)
