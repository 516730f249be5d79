"""The dense NVFP4 GEMM SGLang runs on Blackwell: FlashInfer's CuTe-DSL block-scaled persistent
kernel (`mm_fp4(..., backend="cute-dsl")`, SGLang 0.5.14's `flashinfer_cutedsl` FP4 GEMM on
SM100 and SM103), its tile choice and the operand bytes each SM streams.

Tile choice. With no autotuned tactic (AIC's collector, `collector/sglang/collect_gemm.py`,
calls `mm_fp4` outside an autotune pass: the autotuner's fallback, tactic -1) the runner picks
its tile by FlashInfer's analytical heuristic (`flashinfer/gemm/kernels/utils.py`,
`_select_sm100_mm_fp4_cute_dsl_tactic`, flashinfer-python 0.6.12, the version SGLang 0.5.14
pins), computed for the M bucket `rep_m` = the largest power of two <= m (at most 4096):

  swap A and B (the weights on the kernel's M) when m is 8-aligned and 8 <= rep_m <= 16 < n
  score(tile_m, tile_n) = prob_m x ctas x n_eff x area^0.5 x balance^0.25
                          / (tile_m x waves x num_sms)  (x 0.5 / 0.8 for a tile > 128 x 128
                          at K <= 1024 / <= 2048), over `MMA_TILES`; the best one runs

A tile of 256 rows is a 2-CTA MMA: two CTAs, 128 rows each. Every CTA computes one 128 x
tile_n output tile over the whole K, and the persistent kernel runs `ceil(ctas / num_sms)`
rounds of them per SM (waves).

Operand feed. Each CTA streams its tile's A rows and B columns, `(rows + cols) K a_f` bytes
(the rows and columns that exist: the last tile along an axis is partial), from L2 into its
shared memory. On aiconfigurator-core's B200, B300, GB200 and GB300 tables (SGLang 0.5.14) the
rows of two or more waves move 100-120 GB/s per SM for every tile width, 64 to 256 columns,
while their FLOPs run at 0.4-0.55 of the FP4 peak depending on the width -- and GB300, with 1.5x
GB200's FP4 peak, moves the same bytes per SM in the same time: the kernel is fed, not
MMA-bound. So the busiest SM's compute side is its streamed bytes at `sm_feed_gbps` (per SM,
fitted), beside the MMA time at the FP4 peak (`epsim.cost.quant`: whichever is longer).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

# FlashInfer 0.6.12's `_SM100_MMA_TILER_MN_CANDIDATES`: (tile_m, tile_n); tile_m 256 is 2-CTA
MMA_TILES = ((128, 64), (256, 64), (128, 128), (256, 128), (128, 192), (256, 192),
             (128, 256), (256, 256))
CTA_ROWS = 128                     # output rows one CTA computes (a 256-row tile is two CTAs)
MAX_BUCKET_M = 4096                # the heuristic's largest M bucket (`_M_BUCKETS`)
# The SM's shared-memory bandwidth, 128 bytes per clock (32 banks of 4 bytes: CUDA C++
# Programming Guide, compute capabilities 9.x-10.x) at 2.1 GHz, above any Blackwell
# data-center boost clock: no SM fills its shared memory faster (the fitter's bound)
SM_FILL_GBPS = 128 * 2.1


def _last_pow2(x: int) -> int:
    return 1 << (max(int(x), 1).bit_length() - 1)


@lru_cache(maxsize=65536)
def cutedsl_tile(m: int, n: int, k: int, num_sms: int) -> tuple[int, int, bool]:
    """(tile_m, tile_n, swap_ab) the CuTe-DSL FP4 GEMM runs for `[m, k] x [k, n]` on a GPU of
    `num_sms` SMs with no tuned tactic (module docstring; FlashInfer 0.6.12
    `_compute_tactic_for_m` at the bucket of m)."""
    rep = min(_last_pow2(m), MAX_BUCKET_M)
    aligned = m % 8 == 0
    swap = aligned and 8 <= rep <= 16 and n > rep
    if not swap and n % 8 and aligned:
        swap = True
    prob_m, prob_n = (n, rep) if swap else (rep, n)
    penalty = 0.5 if k <= 1024 else 0.8 if k <= 2048 else 1.0
    best, best_score = (128, 128), -1.0
    for tile_m, tile_n in MMA_TILES:
        n_tiles = -(-prob_n // tile_n)
        shape = ((tile_m * tile_n) / 65536) ** 0.5 * (min(tile_m, tile_n) / max(tile_m, tile_n)) ** 0.25
        ns = prob_n / (n_tiles * tile_n) * shape * (penalty if tile_m * tile_n > 128 * 128 else 1.0)
        ctas = -(-prob_m // tile_m) * n_tiles
        waves = -(-ctas // num_sms)
        score = prob_m * ctas * ns / (tile_m * waves * num_sms)
        if score > best_score:
            best, best_score = (tile_m, tile_n), score
    return best[0], best[1], swap


@lru_cache(maxsize=65536)
def _cutedsl_work(m: int, n: int, k: int, num_sms: int, batch: int
                  ) -> tuple[float, float, float]:
    """(waves, MMA MFLOP over the waves' filled CTAs, bytes in elements one SM streams over its
    waves / k) of `batch` GEMMs at the kernel's tile."""
    tile_m, tile_n, swap = cutedsl_tile(m, n, k, num_sms)
    prob_m, prob_n = (n, m) if swap else (m, n)
    m_tiles, n_tiles = -(-prob_m // tile_m), -(-prob_n // tile_n)
    ctas = batch * m_tiles * n_tiles * (tile_m // CTA_ROWS)
    waves = -(-ctas // num_sms)
    mflops = waves * num_sms * 2.0 * CTA_ROWS * tile_n * k * 1e-6
    rows = prob_m / (m_tiles * (tile_m // CTA_ROWS))          # real rows of a CTA's tile
    cols = prob_n / n_tiles                                   # real columns
    return float(waves), mflops, sm_feed_elements(waves, rows, cols)


def sm_feed_elements(waves, rows, cols):
    """[...] operand elements per unit of K one SM streams into shared memory over `waves`
    rounds of a `rows x cols` CTA tile: `waves (rows + cols)` (times K and the bytes per
    element: KB at `sm_feed_gbps`). The dense CuTe-DSL GEMM's and the fused MoE's tiles alike."""
    return waves * (rows + cols)


def cutedsl_work(m, n: int, k: int, num_sms: int, act_bytes: float, batch: int = 1
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(waves, MFLOP, feed KB) of `batch` GEMMs `[m, k] x [k, n]` on the CuTe-DSL FP4 kernel,
    each [...] float64 like `m`: the busiest SM's rounds of CTA tiles, the FLOPs of every SM's
    tiles over those rounds (wave-quantised, the tile padded), and the operand KB the busiest
    SM streams, `waves (rows + cols) k a_f` (`act_bytes`: a_f, A's and B's bytes per element
    with their block scales). 0 rows do no work."""
    return per_row_count(_cutedsl_work, m, n, k, num_sms, act_bytes, batch)


def per_row_count(tile_work, m, n: int, k: int, num_sms: int, act_bytes: float, batch: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(waves, MFLOP, feed KB), each [...] float64 like `m`, of a kernel whose
    `tile_work(rows, n, k, num_sms, batch)` gives one row count's (waves, MFLOP, feed elements):
    evaluated once per distinct count (its tiles are whole numbers of rows), the elements times
    `k` `act_bytes`. 0 rows do no work."""
    m = np.asarray(m, dtype=np.float64)
    out = np.zeros((3,) + m.shape)
    for value in np.unique(m[m > 0]):
        waves, mflops, elements = tile_work(int(np.ceil(value)), n, k, num_sms, batch)
        out[:, m == value] = np.array([waves, mflops, elements * k * act_bytes * 1e-3])[:, None]
    return out[0], out[1], out[2]


def fed_tensor_frac(sm_feed_gbps: float, num_sms: int, peak_tflops: float, act_bytes: float
                    ) -> float:
    """The share of the FP4 peak the kernel's widest CTA tile (128 x 256) sustains when its
    operands arrive at `sm_feed_gbps` per SM: `sm_feed x num_sms x 2 128 256 / ((128 + 256)
    a_f)` FLOP/s over the peak, at most 1 (the FP4 rate of this GPU's dense FP4 kernel, which
    the fused MoE's fit holds: `epsim.calibrate.build.experts_held`)."""
    widest = max(n for _, n in MMA_TILES)
    flop_per_byte = 2.0 * CTA_ROWS * widest / ((CTA_ROWS + widest) * act_bytes)
    return min(1.0, sm_feed_gbps * num_sms * flop_per_byte * 1e-3 / peak_tflops)
