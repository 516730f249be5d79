"""The dense per-tensor FP8 GEMM SGLang runs on Hopper and Blackwell: sgl-kernel's CUTLASS
`fp8_scaled_mm` (`csrc/gemm/fp8_gemm_kernel.cu`, `sm90_fp8_dispatch_shape`,
`sm100_fp8_dispatch_bias`), its tile choice by the token count and the operand bytes each SM
streams.

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

Blackwell (SM100, SM103: B200, B300, GB200, GB300). `sm100_fp8_dispatch_bias` (sglang 350439a,
the same at 04ec0bc) picks the MMA tile and cluster by the next power of two of m (at least 16):
64 x 64 in clusters of 1 x 4 (m <= 16), 64 x 64 alone (<= 64), 128 x 128 on a pair of SMs
(cluster 2 x 1, <= 256: CUTLASS's automatic schedule takes the 2-SM MMA for an even cluster M,
so each SM holds 64 x 128 and loads half of the weight tile), 256 x 128 on a pair (cluster 2 x 2,
above: 128 x 128 a CTA); a persistent scheduler, no split-K. Its rows stream the weights
differently from Hopper's: at 1-16 rows of a K-16384 weight, 8 to 112 CTAs (n 512 to 7168), each
streaming 1 MB, take 11 to 30 µs over the launch, each SM at 93, 75, 73, 54, 35 GB/s as 8, 24, 32,
64, 112 of them stream together (B200), and 256 CTAs (n 16384, two rounds) 49 µs: neither an SM's
rate alone (Hopper's max: flat in n) nor HBM alone (the few-CTA rows far below it), but their sum,
`1 / rate = 1 / r0 + s / R` -- each SM's loads in flight over a latency that grows with the
bytes queued at HBM. So on SM100 the busiest SM's weight KB at `sm_feed_gbps` (r0, fitted ~100
GB/s) add to the bytes at the HBM rate (R) on the memory side, and the activation quantisation,
a kernel of its own whose BF16 read and FP8 write run at ~0.6 of HBM where the GEMM's weight
stream runs near its datasheet, has its own fraction (`quant_frac`, fitted, <= 1). The MMA side
is the kernel's tiles, padded and wave-quantised over the clusters that fit the GPU's SMs.
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


# -- Blackwell (SM100, SM103): `sm100_fp8_dispatch_bias` -------------------------------------------
SM100_FP8_GPUS = ("B200", "B300", "GB200", "GB300")
# (largest next_pow_2(m), CTA tile rows, CTA tile columns, cluster rows, cluster columns) of
# `sm100_fp8_dispatch_bias`: MMA tiles 64 x 64 (cluster 1 x 4, then 1 x 1), 128 x 128 on two SMs
# (cluster 2 x 1: CUTLASS's automatic schedule takes the 2-SM MMA for an even cluster M, each SM
# holding 64 of its rows), 256 x 128 on two SMs (cluster 2 x 2: 128 x 128 a CTA)
SM100_TILES = ((16, 64, 64, 1, 4), (64, 64, 64, 1, 1), (256, 64, 128, 2, 1),
               (1 << 62, 128, 128, 2, 2))


def sm100_fp8_tile(m: int) -> tuple[int, int, int, int]:
    """(CTA rows, CTA columns, cluster rows, cluster columns) of `fp8_scaled_mm` on SM100 for
    `m` rows (next power of two, at least 16)."""
    mp2 = max(16, 1 << max(0, m - 1).bit_length())
    for top, rows, cols, cm, cn in SM100_TILES:
        if mp2 <= top:
            return rows, cols, cm, cn
    raise AssertionError("unreachable")


@lru_cache(maxsize=65536)
def _sm100_fp8_work(m: int, n: int, k: int, num_sms: int, batch: int
                    ) -> tuple[float, float, float]:
    """(waves, MMA MFLOP over the waves' filled CTAs, weight elements one SM streams over its
    waves / k) of `batch` GEMMs `[m, k] x [k, n]` on SM100's kernel: clusters in rounds of the
    `num_sms // cluster size` that fit at once."""
    rows, cols, cm, cn = sm100_fp8_tile(m)
    clusters = batch * -(-m // (rows * cm)) * -(-n // (cols * cn))
    size = cm * cn
    waves = -(-clusters // (num_sms // size))
    mflops = waves * (num_sms // size) * size * 2.0 * rows * cols * k * 1e-6
    # the weight columns one SM loads a round: a 2-SM MMA splits its B tile between the pair
    return float(waves), mflops, float(waves * cols / (2 if cm == 2 else 1))


def sm100_fp8_work(m, n: int, k: int, num_sms: int, act_bytes: float, batch: int = 1
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(waves, MFLOP, feed KB) of `batch` GEMMs `[m, k] x [k, n]` on sgl-kernel's SM100 FP8
    GEMM, each [...] float64 like `m`: the rounds of clusters, the MMA FLOPs of every SM over
    those rounds, and the weight KB the busiest SM streams, `waves cols_SM k w_f` (`act_bytes`
    1: FP8). 0 rows do no work."""
    return per_row_count(_sm100_fp8_work, m, n, k, num_sms, act_bytes, batch)


# -- the activation quantisation: `sgl_per_token_quant_fp8` ----------------------------------------
# sgl-kernel's `csrc/gemm/per_token_quant_fp8.cu` (sglang 436c48d; at 0490047 the same in effect:
# its shared-memory copy is off, `dynamicSmemSz` in bytes compared with a threshold of 48 meant
# as KB) reads each token's BF16 row twice, pass 1 for its max, pass 2 again from global memory to
# quantise it. Two kernels by the token count: one token a 256-thread CTA below
# `sm_count * 2 * TOKENS_PER_CTA` tokens, one a warp (8 a CTA) from there.
QUANT_TOKENS_PER_CTA = 8        # the warp kernel's tokens (one a warp) per 256-thread CTA
QUANT_CTA_THREADS = 256         # both kernels' CTA
SM_MAX_THREADS = 2048           # resident threads an SM holds (Hopper and Blackwell, CC 9.0-10.3)


def quant_rows_in_flight(m, num_sms: int) -> np.ndarray:
    """[...] token rows `sgl_per_token_quant_fp8` holds between its two reads of them at once,
    for `m` [...] tokens: `SM_MAX_THREADS // QUANT_CTA_THREADS` (8) resident CTAs an SM, each one
    token (baseline kernel) or `QUANT_TOKENS_PER_CTA` (the warp kernel, from `2 x 8 x num_sms`
    tokens), at most `m`."""
    m = np.asarray(m, dtype=np.float64)
    ctas = SM_MAX_THREADS // QUANT_CTA_THREADS
    warp_kernel = m >= num_sms * 2 * QUANT_TOKENS_PER_CTA
    per_sm = np.where(warp_kernel, ctas * QUANT_TOKENS_PER_CTA, ctas)
    return np.minimum(m, per_sm * num_sms)


def quant_reread(m, k: int, num_sms: int, batch: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(reread KB, working-set bytes), each [...] float64 like `m`: the BF16 input
    `sgl_per_token_quant_fp8`'s second pass reads again, `batch m k 2` bytes, and the bytes of
    the rows in flight between a row's two reads (`quant_rows_in_flight` x `k` x 2). Every other
    row's first read falls between a row's two reads, so the second one hits L2 (LRU) only
    where that working set fits it; else it streams from HBM again (`epsim.cost.dense_gemm`)."""
    m = np.asarray(m, dtype=np.float64)
    bf16 = 2.0
    return batch * m * k * bf16 * 1e-3, quant_rows_in_flight(batch * m, num_sms) * k * bf16
