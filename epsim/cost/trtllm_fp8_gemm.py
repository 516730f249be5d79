"""FlashInfer's trtllm-gen FP8 block-scale dense GEMM, the kernel SGLang runs a block-FP8 linear
on with `--fp8-gemm-backend flashinfer_trtllm` (or `SGLANG_ENABLE_FLASHINFER_GEMM=true`, an
alias of it in SGLang 0.5.9's `environ.py`).

SGLang's `flashinfer_gemm_w8a8_block_fp8_linear_with_fallback` calls
`gemm_fp8_nt_groupwise(backend="trtllm")` with tactic -1 (no autotune), and FlashInfer's
`select_kernel_fp8` (`csrc/trtllm_gemm_runner.cu`, 0.6.3 to 0.6.12 alike) picks one of four
low-latency swap-AB kernels by the weight's `N / K` alone, whatever the token count `M`:
`t128x8x128` (N / K >= 32), `t128x32x128` (N / K <= 2, or N >= 20000), else `t128x16x128` --
the token dimension runs in tiles of 8, 32 or 16 rows (`token_tile`), each tile streaming the
weight's 128-column slices again.

No op table times this kernel (AIC's B200 FP8-block GEMM rows are DeepGEMM's). It is priced
with the fitted TRT-LLM FP8-block MoE kernel of the profile (the same trtllm-gen batched-GEMM
family: waves of tiles, each tile's weight re-read, its rows' epilogue) as one expert of
`H = k`, `I = n / 3` (weights `n k`, `2 n k` FLOPs a row) whose rows all run in the dense
kernel's token tiles, less the MoE kernel's fixed terms (`base_us`, `per_expert_us`: its
routing and finalize). Extrapolated: the fit's experts hold a few tiles of rows, a prompt's
dense GEMM hundreds (benchmarks/results/b200_fp8_prefill_stages.md, table 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from epsim.cost.experts import even_row_tiles, experts_rank_us
from epsim.cost.quant import quant_expert_gemm, reread_kb, trtllm_gemm

FORMAT = "fp8_block"
PROVENANCE = ("extrapolated: no table times FlashInfer's trtllm FP8 block GEMM; priced with the "
              "fused TRT-LLM FP8-block MoE kernel's fit, same trtllm-gen kernel family")


def token_tile(n: int, k: int) -> int:
    """Rows of the token tile `select_kernel_fp8` gives an `[m, k] x [k, n]` GEMM (module doc)."""
    ratio = n / k
    if ratio >= 32:
        return 8
    return 32 if ratio <= 2.0 or n >= 20000 else 16


@dataclass(frozen=True)
class TrtllmFp8Gemm:
    """The fitted TRT-LLM FP8-block MoE kernel's terms the dense kernel is priced with.

    Attributes:
        params: the experts' fitted coefficients (`StageParams.params` of the graph step).
        reread_gbps: the rate a token tile's weight re-read runs at (`StageParams.reread_gbps`).
        num_sms: the GPU's SMs.
    """

    params: Mapping[str, float]
    reread_gbps: float
    num_sms: int


def gemm_us(tokens, n: int, k: int, kernel: TrtllmFp8Gemm) -> np.ndarray:
    """[...] microseconds of `[tokens, k] x [k, n]` block-FP8 GEMMs (`tokens` [...]); 0 idle."""
    m = np.asarray(tokens, dtype=np.float64)
    tile = float(token_tile(n, k))
    gemm = trtllm_gemm(quant_expert_gemm(k, max(n // 3, 1), FORMAT, kernel.num_sms, 1),
                       np.array(tile), FORMAT)
    rows = m[..., None]                                   # [..., 1]: one "expert" on one rank
    busy = (rows > 0).astype(np.float64)
    reread = reread_kb(rows, tile, gemm.weight_bytes)[..., None] / kernel.reread_gbps
    params = dict(kernel.params)
    t = experts_rank_us(rows, busy, even_row_tiles(rows, busy, tile), gemm, params, reread)[..., 0]
    fixed = params["base_us"] + params.get("per_expert_us", 0.0)
    return np.where(m > 0, np.maximum(t - fixed, 0.0), 0.0)


def mlp_us(tokens, hidden_size: int, width: int, kernel: TrtllmFp8Gemm) -> np.ndarray:
    """[...] a dense SwiGLU MLP of `width` (its gate/up GEMM `n = 2 width`, its down `n =
    hidden_size`) on `tokens` [...] rows through the kernel."""
    return (gemm_us(tokens, 2 * width, hidden_size, kernel)
            + gemm_us(tokens, hidden_size, width, kernel))
