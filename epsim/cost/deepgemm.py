"""The dense block-scaled FP8 GEMM SGLang runs on Hopper and Blackwell: DeepGEMM's `fp8_gemm_nt`
(activations scaled per 1 x 128, weights per 128 x 128 block, BF16 out), its layout choice, its
K loop and its epilogue.

Which kernel. aiconfigurator-core's `gemm_perf` tables (SGLang 0.5.14) name it on every system:
`kernel_source` `sglang_deepgemm_gemm_nt_f8f8bf16` for all 29526 fp8_block rows of H100, H200,
B200, B300, GB200 and GB300 (the collector quantises the activations per token group, then calls
DeepGEMM; the B200 and B300 metadata say so: "the timed op is act-quant + gemm only").

Layout choice (`csrc/jit_kernels/heuristics/sm90.hpp`, `sm100.hpp`, deepseek-ai/DeepGEMM
7f2a703, 2026-04-17, unchanged at 54e2261). Every CTA owns one output tile over the whole K (no
split-K, no stream-K), `waves = ceil(blocks / SMs)` rounds of them per SM; clusters of 2 CTAs
share an operand by TMA multicast.
  SM90 (the 1D2D kernel): block_m 64, 128, 256 (16, 32 for m <= 16, 32), block_n 16 to 192 by
      16 that the kernel unrolls, no tile over 128 on both sides, at least 3 pipeline stages in
      232448 bytes of shared memory (4 below 128 x 192); each candidate is scored by its modelled
      L1 and L2 cycles over the wave efficiency `blocks / (waves SMs)`, multicast barred for one
      wave; the fewest cycles win.
  SM100 (the 1D1D kernel, scales applied by `tcgen05` in hardware): block_m 32, 64 or 128 by m,
      block_n 16 and 32 to 256 by 32 (128 at K <= 256), or swapped A/B: 16 to 256 token rows by
      128 weight rows; the tensor memory holds two accumulators and the scales (`2 umma_n +
      scale columns <= 512`); one wave beats several, then multicast, fewer waves, a fuller last
      wave, the smaller tile.

The price (`epsim.cost.dense_gemm`'s terms, at this layout): the MMA FLOPs of the padded tiles of
every SM over the waves at `tensor_frac`; a fixed cost per 128-deep k-block and wave
(`dequant_us`: SM90 waits on each WGMMA and rescales the partial sums on its CUDA cores); and,
per tile, its BF16 output through the SM (`waves x block_m x block_n x 2` bytes at
`epilogue_gbps`, per SM, fitted): a short K loop leaves the epilogue exposed (k 512 at 4096-16384
rows ran 20 % over a per-wave cost fitted at <= 1024 rows on every system, tiles from 16 x 16 to
256 x 128 pay it in proportion to their bytes).
On SM90 the math warpgroups run the epilogue themselves (the FP32 accumulators they hold,
scaled, cast and written out through shared memory), one warpgroup in a CTA of up to 64 token
rows and two above (TensorRT-LLM's copy of the kernel, `deep_gemm/fp8_gemm_impl.cuh`,
`get_num_threads_per_sm`: `(block_m == 64 ? 1 : 2) x 128` math threads), each writing its half
of the tile: `epilogue_gbps` is one warpgroup's rate, a two-warpgroup tile's bytes halved. A
per-SM rate fitted on <= 1024 rows -- most of them 64-row tiles of one warpgroup -- priced the
256 x 128 tiles of 4096-16384 rows at the 64-row tiles' rate: the short-K rows ran 20-36 % under
it (H200, n 16384, k 512, 63 waves: 4.8 µs a wave measured, 5.9 priced) and the tokens hold-out
of `any/gemm_fp8_block/graph` read 11.8 % (H200) and 10.3 % (H100); at the warpgroups' rate 9.3
and 7.3. SM100 runs its epilogue in warps of their own (the tensor memory's accumulators read
out by a fixed epilogue warp group, whatever the tile): no such count.

SM90 shows one more regime, and the layout names it: a 256-row tile without multicast -- what
the cycle model picks when one wave of 256 x 128 tiles covers the output (m 193-256 of a
16384-wide weight, m 1024 of a 4096-wide one) -- runs its k-blocks 2.5-3x slower than the same
tile multicast over two or more waves (H100, n 16384, k 16384: m 192, `64 x 192` tiles in
clusters, 176 µs; m 256, one wave of `256 x 128`, 356 µs; m 512, two waves of it multicast,
204 µs). Its k-blocks pay `wide_block_us` each (fitted): the cost is measured, its cause is not
(the tile's 3 stages of 48 KB leave the loads exposed, and multicast halves the A tile each CTA
fetches -- a reading, not a measurement).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from epsim.cost.fp8_gemm import CUTLASS_FP8_GPUS

FORMAT = "fp8_block"
SM90_GPUS = CUTLASS_FP8_GPUS        # DeepGEMM's Hopper kernel (H100, H200, H800, H20)
SM100_GPUS = ("B200", "B300", "GB200", "GB300")     # its Blackwell kernel (SM100, SM103)
BLOCK_K = 128                       # the K tile and the scale block: one promotion per k-block
WIDE_BLOCK_M = 256                  # a tile of two 128-row WGMMA waves per math warpgroup
SMEM_BYTES = 232448                 # SM90's shared memory per block (`smem_capacity`)
MAX_STAGES = 16
WGMMA_M = 64
OUT_BYTES = 2                       # BF16 output


def deepgemm_runs(fmt: str, gpu: str) -> bool:
    """Whether the dense GEMM on `fmt` weights on `gpu` is DeepGEMM's (SM90 or SM100)."""
    return fmt == FORMAT and gpu in SM90_GPUS + SM100_GPUS


@dataclass(frozen=True)
class Layout:
    """One layout of `fp8_gemm_nt`: the CTA tile (token rows x weight rows), its cluster (2: TMA
    multicast), the rounds of tiles per SM and (SM90) the pipeline's stages."""

    block_m: int
    block_n: int
    cluster: int
    waves: int
    stages: int


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _align(a: int, b: int) -> int:
    return _cdiv(a, b) * b


def _stages(block_m: int, block_n: int, k: int) -> int:
    """Pipeline stages that fit shared memory beside the BF16 output tile, the barriers and
    the weights' scales for the whole K (`get_pipeline_config`)."""
    out = _align(block_m * block_n * OUT_BYTES, 1024)
    uniform = 1 if BLOCK_K % block_n == 0 else 2
    scales_b = _align(_cdiv(k, BLOCK_K) * 4 * uniform, 8)
    per_stage = (block_m + block_n) * BLOCK_K + _align(block_m * 4, 128)
    return min((SMEM_BYTES - out - MAX_STAGES * 16 - scales_b) // per_stage, MAX_STAGES)


def _cycles(m: int, n: int, k: int, num_sms: int, batch: int, block_m: int, block_n: int,
            cluster_m: int, cluster_n: int) -> tuple[float, int]:
    """(modelled cycles, waves) of a layout (`get_layout_info`): L1 and L2 bytes of every block
    at 128 B and min(64 B x SMs, 6153 B) a cycle, over the wave efficiency."""
    blocks = _cdiv(m, block_m) * _cdiv(n, block_n) * batch
    waves = _cdiv(blocks, num_sms)
    out = block_m * block_n * OUT_BYTES
    l2_ab = k * (block_m // cluster_n + block_n // cluster_m)
    l1 = k * (block_m + block_n) + k * (max(WGMMA_M, block_m) + block_n) + out + out
    l2_cycles = (l2_ab + out) * blocks // int(min(64.0 * num_sms, 8e6 / 1.3e3))
    l1_cycles = l1 * blocks // (128 * num_sms)
    cycles = max(l1_cycles, l2_cycles) / (blocks / (waves * num_sms))
    if cluster_m * cluster_n > 1 and waves <= 1:
        cycles = float("inf")                   # multicast is barred for one wave
    return cycles, waves


@lru_cache(maxsize=65536)
def sm90_layout(m: int, n: int, k: int, num_sms: int, batch: int = 1) -> Layout:
    """The layout `fp8_gemm_nt` runs `batch` GEMMs `[m, k] x [k, n]` on with `num_sms` SMs
    (module docstring; `batch` > 1 is DeepGEMM's batched GEMM, which multicasts nothing)."""
    block_ms = [64, 128] + ([16] if m <= 16 else []) + ([32] if m <= 32 else []) + [WIDE_BLOCK_M]
    block_ns = [b for b in range(16, 193, 16)
                if b <= BLOCK_K or BLOCK_K % (b - BLOCK_K) == 0 or b % (b - BLOCK_K) == 0]
    clusters = ((1, 1),) if batch > 1 else ((1, 1), (1, 2), (2, 1))
    best, best_cycles = None, float("inf")
    for cluster_m, cluster_n in clusters:
        if num_sms % (cluster_m * cluster_n):
            continue
        for block_m in block_ms:
            for block_n in block_ns:
                if block_m > 128 and block_n > 128:
                    continue                        # registers: one side at most 128
                stages = _stages(block_m, block_n, k)
                if stages < 3 or (block_m * block_n < 128 * 192 and stages < 4):
                    continue
                cycles, waves = _cycles(m, n, k, num_sms, batch, block_m, block_n,
                                        cluster_m, cluster_n)
                if best is None or cycles < best_cycles:
                    best = Layout(block_m, block_n, cluster_m * cluster_n, waves, stages)
                    best_cycles = cycles
    return best


# SM100: the tensor memory's columns (two accumulators of `umma_n` and the scales' columns)
TMEM_COLUMNS = 512
SWAPPED_BLOCK_N = 128               # swapped A/B: the weights on the MMA's 128-row side


def _sm100_candidates(m: int, n: int, k: int, num_sms: int, batch: int):
    """(waves, last-wave blocks, cluster, block_m, block_n) of every SM100 layout
    (`SM100ArchSpec.get_layout_candidates`)."""
    for swap in (False, True):
        if swap:
            block_ms, block_ns = range(16, 257, 16), (SWAPPED_BLOCK_N,)
        else:
            block_ms = (32,) if m <= 32 else (64,) if m <= 64 else (128,)
            block_ns = (16,) + tuple(range(32, (128 if k <= 256 else 256) + 1, 32))
        for cluster_m, cluster_n in ((1, 1), (1, 2)) if swap else ((1, 1), (2, 1)):
            if num_sms % (cluster_m * cluster_n):
                continue
            for block_m in block_ms:
                if (block_m // cluster_n) % 8 or _cdiv(m, block_m) % cluster_m:
                    continue
                for block_n in block_ns:
                    if (block_n // cluster_m) % 8 or _cdiv(n, block_n) % cluster_n:
                        continue
                    scale_cols = _align(block_m, 128) // 32 + _align(block_n, 128) // 32
                    if 2 * (block_m if swap else block_n) + scale_cols > TMEM_COLUMNS:
                        continue
                    blocks = _cdiv(m, block_m) * _cdiv(n, block_n) * batch
                    waves, last = _cdiv(blocks, num_sms), blocks % num_sms or num_sms
                    yield waves, last, cluster_m * cluster_n, block_m, block_n


def _sm100_key(c) -> tuple:
    """Sort key of an SM100 candidate (`SM100ArchSpec.compare`): one wave first, then multicast,
    fewer waves, a fuller last wave, a smaller tile (sum, then area)."""
    waves, last, cluster, block_m, block_n = c
    return (waves != 1, -cluster, waves, -last, block_m + block_n, block_m * block_n)


@lru_cache(maxsize=65536)
def sm100_layout(m: int, n: int, k: int, num_sms: int, batch: int = 1) -> Layout:
    """The layout `fp8_gemm_nt` runs `batch` GEMMs `[m, k] x [k, n]` on with `num_sms` SMs,
    SM100 (module docstring; the first of equals, as the source's strict comparison keeps)."""
    best = min(_sm100_candidates(m, n, k, num_sms, batch), key=_sm100_key)
    waves, _, cluster, block_m, block_n = best
    return Layout(block_m, block_n, cluster, waves, 0)


def math_warpgroups(layout: Layout) -> int:
    """SM90's math warpgroups in a CTA of `layout`: one up to 64 token rows (one WGMMA's M),
    two above (`get_num_threads_per_sm`: `(block_m == 64 ? 1 : 2) x 128` math threads)."""
    return 1 if layout.block_m <= WGMMA_M else 2


@lru_cache(maxsize=65536)
def _row_work(m: int, n: int, k: int, num_sms: int, batch: int, sm90: bool
              ) -> tuple[float, float, float, float, float]:
    layout = (sm90_layout if sm90 else sm100_layout)(m, n, k, num_sms, batch)
    tile = layout.block_m * layout.block_n
    k_blocks = layout.waves * _cdiv(k, BLOCK_K)
    wide = sm90 and layout.block_m == WIDE_BLOCK_M and layout.cluster == 1
    epilogue_kb = layout.waves * tile * OUT_BYTES * 1e-3 / (math_warpgroups(layout) if sm90 else 1)
    return (float(layout.waves), layout.waves * num_sms * 2.0 * tile * k * 1e-6, float(k_blocks),
            float(k_blocks) if wide else 0.0, epilogue_kb)


def deepgemm_work(m, n: int, k: int, num_sms: int, gpu: str, batch: int = 1
                  ) -> tuple[np.ndarray, ...]:
    """(waves, MFLOP, k-blocks, wide k-blocks, epilogue KB) of `batch` GEMMs `[m, k] x [k, n]`
    on DeepGEMM's kernel on `gpu`, each [...] float64 like `m`: the busiest SM's rounds of
    tiles, the FLOPs of every SM's tiles over those rounds (wave-quantised, the tile padded), its
    k-blocks over those rounds, those of them in an SM90 unicast 256-row tile, and the BF16
    output KB its epilogues write, on SM90 per math warpgroup (module docstring). 0 rows do no
    work."""
    m = np.asarray(m, dtype=np.float64)
    out = np.zeros((5,) + m.shape)
    for value in np.unique(m[m > 0]):
        out[:, m == value] = np.array(_row_work(int(np.ceil(value)), n, k, num_sms, batch,
                                                gpu in SM90_GPUS))[:, None]
    return tuple(out)
