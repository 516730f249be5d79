"""The weight stream of FlashInfer's TRT-LLM MoE launched with no tuned tactic: the launcher's
fallback tile (`epsim.cost.quant.trtllm_tile`, untuned) with the batched GEMM runner's default
config (`TrtllmGenBatchedGemmRunner::getDefaultValidConfigIndex`: the first of its passing configs
sorted by tileK, 2x-unrolled MMA, tileM, tileN and scheduler, `csrc/trtllm_batched_gemm_runner.cu`).

AIC's collector times SGLang's FusedMoE with no autotune pass, so its tables ran that config
(NVFP4's and FP8-block's launchers alike, `FALLBACK_STREAM_TILES`). At
EP > 1 the launcher sizes its tile from the group's tokens over the rank's `E / ep` experts while
each local expert holds a few rows: every active expert streams its weights through one partly
filled tile, memory-bound at every tile, and the time still steps with the tile. The same
expert set at 64 rows runs 1.56-1.61x its time at 32, at 128 rows 1.13-1.21x (B200 NVFP4, EP 32:
H 2048 / I 5120 / 512 experts 55.7 / 86.7 / 62.4 µs at 32 / 64 / 128; H 8192 / I 5120 137 / 218
/ 165; H 7168 / 384 experts 70 / 112 / 79); EP 1's full tiles of the same sizes do not (within 7
%). Priced as the partial tiles' weights at the datasheet HBM rate in their tile's column,
`tile<t>_stream_ratio` (>= 0) each: the time that config spends beyond the fitted `hbm_frac`.
Which of its options (pipeline depth, scheduler, cluster) costs it is not in the source we read
(the configs live in the cubin list); a served kernel autotunes tile and config and does not
pay it (`epsim.cost.moe.trtllm_experts_us` reads no ratio).
"""

from __future__ import annotations

import numpy as np

from epsim.spec.gpu import HardwareSpec

# formats whose untuned rows price it (the EP > 1 tables fitted) and, per format, the fallback
# tiles whose default config streams slower than the fitted rate, one ratio each. NVFP4: 64 and
# 128 rows (its 32-row config streams as EP 1's full tiles). FP8-block (`Fp8BlockScaleLauncher`,
# its ladder capped at 128, so its fallback tile is at most 64): every rung above the 8-row one.
# AIC's B200 `moe_perf` rows step with the tile where the experts and their weights do not
# change: EP 32, 16 local experts of 2-3 rows (H 4096 / I 1024 / 512 experts, top-10) take 74-78
# µs at a 32-row fallback tile (64-96 group tokens) and 99-108 µs at 64 rows (128-512 tokens),
# the same 201 MB of weights (25 µs at the datasheet rate); 8 experts of H 6144 / I 2048 step
# by 21 µs at 64 -> 80 tokens (32 -> 64 rows). EP 1's 8-row tiles stream at the fitted `hbm_frac`
FALLBACK_STREAM_TILES = {"nvfp4": (64, 128), "fp8_block": (16, 32, 64)}
FALLBACK_STREAM_FORMATS = tuple(FALLBACK_STREAM_TILES)
ALL_FALLBACK_TILES = tuple(sorted({t for ts in FALLBACK_STREAM_TILES.values() for t in ts}))
FALLBACK_STREAM_PARAMS = tuple(f"tile{t}_stream_ratio" for t in ALL_FALLBACK_TILES)


def fallback_stream_cols(tile, weight_kb, hardware: HardwareSpec, fmt: str = "nvfp4"
                         ) -> np.ndarray:
    """[..., len(FALLBACK_STREAM_PARAMS)] µs of `weight_kb` [...] at the datasheet HBM rate in
    the column of `tile` [...] where it is one of `fmt`'s `FALLBACK_STREAM_TILES` (0 elsewhere,
    and in the other formats' tiles' columns): times the `tile<t>_stream_ratio` coefficients
    (>= 0), the time the untuned launch's default config at that tile spends streaming the
    weights beyond the fitted `hbm_frac`."""
    tile = np.asarray(tile, dtype=np.float64)
    us = np.asarray(weight_kb, dtype=np.float64) / hardware.hbm_gbps
    own = FALLBACK_STREAM_TILES.get(fmt, ())
    return np.stack([np.where((tile == t) & (t in own), us, 0.0) for t in ALL_FALLBACK_TILES],
                    axis=-1)


def partial_tile_kb(rows_per_expert, tile, weight_bytes: float) -> np.ndarray:
    """[...] KB of weights of the experts whose rows fill less than one token tile (`0 < n_e <
    tile`), each streamed once by its one partial tile.

    Args:
        rows_per_expert: [..., experts] rows (token-expert pairs) of each local expert.
        tile: [...] rows per tile.
    """
    rows = np.asarray(rows_per_expert, dtype=np.float64)
    tile = np.asarray(tile, dtype=np.float64)[..., None]
    return ((rows > 0) & (rows < tile)).sum(axis=-1) * weight_bytes * 1e-3
