"""FlashInfer's trtllm-gen FP8 block-scale dense GEMM, the kernel SGLang runs a block-FP8 linear
on with `--fp8-gemm-backend flashinfer_trtllm` (or `SGLANG_ENABLE_FLASHINFER_GEMM=true`, an
alias of it in SGLang 0.5.9's `environ.py`).

SGLang's `flashinfer_gemm_w8a8_block_fp8_linear_with_fallback` calls
`gemm_fp8_nt_groupwise(backend="trtllm")` with tactic -1 (no autotune), and FlashInfer's
`select_kernel_fp8` (`csrc/trtllm_gemm_runner.cu`, since 67e77fd5a, 2025-07-28) picks one of
four low-latency swap-AB kernels by the weight's `N / K` alone, whatever the token count `M`:
`t128x8x128` (N / K >= 32), `t128x32x128` (N / K <= 2, or N >= 20000), else `t128x16x128` --
`token_tile` rows of tokens by 128 weight rows a CTA, one CTA an SM (`c1x1x1`, no split-K),
each CTA running the whole K in 128-deep steps (its weight slice's DeepSeek scales applied to
the partial sums each step, `dsFp8`).

The price follows that structure (`[m, k] x [k, n]`, `ceil(n / 128) ceil(m / tile)` CTAs in
`waves = ceil(CTAs / SMs)`):

    t = launch_us + max((waves - 1) wave_us_, memory_us) + wave_us_
    wave_us_  = ceil(k / 128) step_us + wave_us        a CTA's K loop, its prologue and epilogue
    memory_us = (n k passes + m k + 2 m n) / (hbm_eff x datasheet HBM)
    passes    = 1 if the weight fits L2, else ceil(m / tile) (each token-tile row streams it)

a decode GEMM is one wave of a CTA's K-step latency (few CTAs: `n / 128` of them), a prompt's
is `m / tile` times as many waves of 8-32-row tiles -- the tile's waste -- or the weight's
stream where it spills L2, the longer, and then the last wave drains. The four constants are
fitted on published B200 kernel timings of this very call
(`benchmarks/data/trtllm_fp8_gemm_b200.csv`, op-level; refit with `python
benchmarks/trtllm_fp8_gemm_fit.py`, which holds out the large token counts and each shape, and
beside it a per-wave roofline -- each wave the longer of its K loop and its CTAs' bytes -- that
holds out worse); another Blackwell GPU keeps them with its own SMs and datasheet HBM
(extrapolated), as do K below 1024 and the 8- and 16-row tiles (the timings are 32-row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FORMAT = "fp8_block"
K_STEP = 128            # the kernels' K tile (`t128xTx128`) and the weight-scale block
N_TILE = 128            # weight rows a CTA (the swap-AB MMA's M)
# fitted by benchmarks/trtllm_fp8_gemm_fit.py on benchmarks/data/trtllm_fp8_gemm_b200.csv
# (23 B200 timings, 8-4096 tokens, three shapes; results/trtllm_fp8_gemm_fit.md)
LAUNCH_US = 1.516       # the launch and the kernel's tail, once a call
STEP_US = 0.2216        # one 128-deep K step of a CTA: the MMA and the scaled partial sums
WAVE_US = 1.494         # a wave's CTA prologue and epilogue beyond its K steps
HBM_EFF = 0.814         # share of the datasheet HBM bandwidth the weight's stream reaches
PROVENANCE = ("fitted: FlashInfer's trtllm FP8 block GEMM's tile model (token tile by N / K, "
              "waves of K-step latency, the weight's HBM stream) on public op-level B200 "
              "kernel timings of the call (8-4096 tokens); extrapolated beyond them and to "
              "other GPUs (their SMs and datasheet HBM)")


def token_tile(n: int, k: int) -> int:
    """Rows of the token tile `select_kernel_fp8` gives an `[m, k] x [k, n]` GEMM (module doc)."""
    ratio = n / k
    if ratio >= 32:
        return 8
    return 32 if ratio <= 2.0 or n >= 20000 else 16


@dataclass(frozen=True)
class TrtllmFp8Gemm:
    """The GPU the kernel runs on and the tile model's constants (module doc).

    Attributes:
        num_sms: the GPU's SMs (one CTA each per wave).
        hbm_gbps: its datasheet HBM bandwidth, GB/s.
        l2_bytes: its L2 cache, bytes (a weight that fits is streamed from HBM once).
        launch_us, step_us, wave_us, hbm_eff: the fitted constants (module constants).
    """

    num_sms: int
    hbm_gbps: float
    l2_bytes: float
    launch_us: float = LAUNCH_US
    step_us: float = STEP_US
    wave_us: float = WAVE_US
    hbm_eff: float = HBM_EFF


def gemm_us(tokens, n: int, k: int, kernel: TrtllmFp8Gemm) -> np.ndarray:
    """[...] microseconds of `[tokens, k] x [k, n]` block-FP8 GEMMs (`tokens` [...]); 0 idle."""
    m = np.asarray(tokens, dtype=np.float64)
    tile = float(token_tile(n, k))
    row_tiles = np.ceil(m / tile)                                # token-tile rows
    waves = np.maximum(np.ceil(row_tiles * -(-n // N_TILE) / kernel.num_sms), 1.0)
    wave = -(-k // K_STEP) * kernel.step_us + kernel.wave_us     # one CTA's K loop
    weight = float(n) * k                                        # FP8: a byte a parameter
    passes = 1.0 if weight <= kernel.l2_bytes else np.maximum(row_tiles, 1.0)
    memory_bytes = weight * passes + m * k + 2.0 * m * n         # BF16 out
    memory = memory_bytes / (kernel.hbm_eff * kernel.hbm_gbps * 1e3)
    # the waves before the last under the HBM stream, the last wave's K loop after it
    t = kernel.launch_us + np.maximum((waves - 1.0) * wave, memory) + wave
    return np.where(m > 0, t, 0.0)


def mlp_us(tokens, hidden_size: int, width: int, kernel: TrtllmFp8Gemm) -> np.ndarray:
    """[...] a dense SwiGLU MLP of `width` (its gate/up GEMM `n = 2 width`, its down `n =
    hidden_size`) on `tokens` [...] rows through the kernel."""
    return (gemm_us(tokens, 2 * width, hidden_size, kernel)
            + gemm_us(tokens, hidden_size, width, kernel))
