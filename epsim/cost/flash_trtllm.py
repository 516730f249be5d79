"""Kernel selection of FlashInfer's TRT-LLM-gen GQA decode kernel (SGLang's `trtllm_mha` backend,
the kernel AIC's Blackwell attention tables time).

The rule is FlashInfer's (`include/flashinfer/trtllm/fmha/fmhaKernels.cuh`,
`selectGqGenerationKernel` and `computeCtaAndClusterConfig`, v0.6.x):

- **rows**: a CTA covers all query heads of one KV head, its rows padded to `tileSizeQ`, the next
  power of two of the group from 8 to 128 (8-32: the "SwapsMmaAb" kernels, 64-128: "KeepsMmaAb").
- **CTAs**: one per (sequence, KV head), one resident per SM.
- **key splits** (`numCtasPerSeqKv`): `min(ceil(max_seq_len / 256), max(1, SMs // CTAs))`. SGLang
  passes its context limit as `max_seq_len` (not the batch's longest context), so the split count
  is set by the CTA count alone: `max(1, SMs // CTAs)`. One split selects the persistent kernel
  (no reduction); more reduce the partial outputs in the kernel: through a thread-block cluster's
  shared memory for the SwapsMmaAb kernels with at most 16 splits, else through global memory.

Its time (`epsim.cost.flash.kernel_us` with `overlap`): the persistent kernel streams the next
tile's KV while it finishes one, so a wave's fixed cost sits inside the max with the math, not
beside it (added, it over-predicted the memory-bound middle: B200 shape hold-out 12.4 -> 10.7 %
with it inside). Not modelled: at 64-128 rows and 2-148 splits, contexts of 16-256 keys run
4-6 us slower than 1024-4096 (AIC's B200 tables; the source gives no reason).
"""

from __future__ import annotations

import math

import numpy as np

TRTLLM_KEY_TILE = 128     # keys per KV tile (`tileSizeKv`)
SWAPS_MAX_ROWS = 32       # tileSizeQ of the SwapsMmaAb kernels (8-32); 64-128 keep the MMA's A/B
SWAPS_ROW_COST = 2.0      # a SwapsMmaAb row's math cost in KeepsMmaAb rows (`math_rows`)
# a CTA's key loop is a pipeline (the next tile's Q K^T MMA beside this tile's softmax and P V
# MMA): n key tiles take n + 1 tile times, the first MMA and the last P V with nothing beside
# them. AIC's B200 tables at one key tile (1024 sequences, the persistent launch): 1.6, 2.0,
# 3.1-3.2 and 4.6 us a wave at 8, 16, 32-64 and 128 rows, about a fixed 1.2 us plus twice one
# tile's math; a second key tile at 256 sequences adds almost none (16.5 us at 16 and 256 keys,
# 96 and 128 query heads on one KV head). Decode shape hold-out B200 / B300 / GB200 / GB300
# 10.7 / 11.1 / 9.9 / 10.6 -> 9.4 / 10.1 / 8.9 / 9.5 % (picked on B200's)
PIPELINE_TILES = 1


def tile_rows(heads: int, kv_heads: int) -> int:
    """`tileSizeQ`: the query rows of a decode CTA, the GQA group padded to a power of two in
    [8, 128]."""
    group = max(heads // max(kv_heads, 1), 1)
    return min(128, max(8, 1 << (group - 1).bit_length()))


def ctas_per_seq(heads: int, kv_heads: int) -> int:
    """CTAs of one sequence before any key split: its KV heads x the 128-row tiles of a group."""
    group = max(heads // max(kv_heads, 1), 1)
    return max(kv_heads, 1) * math.ceil(group / 128)


def key_splits(units: np.ndarray, num_sms: int) -> np.ndarray:
    """`numCtasPerSeqKv` for `units` ([dp] int) CTAs before splitting: `max(1, SMs // units)`
    (1 where there are none)."""
    units = np.asarray(units, dtype=np.int64)
    return np.where(units > 0, np.maximum(1, num_sms // np.maximum(units, 1)), 1)


def reduction_rows(splits: np.ndarray, rows: int) -> np.ndarray:
    """[dp] the reduction term of a launch: `rows / 64` where the keys are split (the partial
    outputs of `rows` rows reduced in the kernel), else 0. Per row and not per split: AIC's B200
    tables pay about 8 us at 128 rows, 4 at 64 and 0-2 at 8-32 whatever the split count (2 to
    148); the cluster (shared-memory) and global-memory reductions the source picks between
    priced alike (apart they predicted the shape hold-out worse: 14.1 against 13.5 %)."""
    return np.where(splits > 1, rows / 64.0, 0.0)


def math_rows(rows: int) -> float:
    """The rows a CTA's tile costs on the math side: `SWAPS_ROW_COST x rows` for the SwapsMmaAb
    kernels (8-32 rows), which put the query rows on the MMA's N side and reduce the softmax
    across threads, else `rows`. AIC's B200 tables (a persistent launch, one 128-key tile a
    CTA): about 1.6, 2.0 and 3.3 us a wave at 8, 16 and 32 rows against 3.0 and 4.5-5.7 at 64
    and 128."""
    return SWAPS_ROW_COST * rows if rows <= SWAPS_MAX_ROWS else float(rows)
