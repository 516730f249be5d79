"""Blackwell's per-head MLA prefill kernel: FlashInfer's TRT-LLM-gen ragged attention
(`trtllm_ragged_attention_deepseek`, what SGLang's `trtllm_mla` backend runs for a prefill and
AIC's B200/B300/GB200/GB300 `context_mla_perf` tables time): its tiles, what a tile costs, and
the bytes it streams beside them.

The kernel's grid is TRT-LLM-gen's context kernel (`epsim.cost.flash.TRTLLM_PREFILL`): CTAs of
two 128-row tiles of one (chunk, head) over one 128-key loop, one CTA an SM, the causal
diagonal's masked tiles computed. A 128 x 128 tile of (query rows, keys) is QK^T over 192 dims
(nope 128 + rope 64), the softmax's 16384 exponentials and PV over 128, costed at the datasheet:

- MMAs `2 x 128 x 128 x (192 + 128)` FLOPs at the tensor peak of the format they run in: BF16,
  or FP8 for an FP8 cache, whose prefill casts Q, K and V to FP8 first (SGLang's
  `_quantize_fp8_qkv`) and multiplies them in FP8;
- exponentials on the SMs' MUFU: 16 a clock an SM on Blackwell, 32 on Blackwell Ultra (B300,
  GB300: its doubled SFU throughput for attention), against Blackwell's 8192 dense BF16 tensor
  FLOPs a clock an SM: a tile's 16384 exponentials are 1024 clocks (512 on Ultra) beside its
  MMAs' 1280 (BF16) or 640 (FP8).

A tile's PV waits for its softmax, so not every exponential hides under the tensor core:
`EXP_SERIAL_FRAC` of them add to the MMAs. AIC's B200 tables show the whole of them added
(long chunks: 2244-2300 clocks a tile BF16, 1745 FP8, per SM at its 1.965 GHz boost, against
1280 + 1024 and 640 + 1024; B300 1.09-1.14x B200 in BF16, 1.26-1.29x in FP8, on the same
datasheet tensor peak: the MUFU doubling, which a tensor-only model cannot see). Counted whole
(1.0) at the datasheet's clock (2250 TFLOP/s over 148 SMs: 1.86 GHz) the B200 fit would need
1.35x the tensor peak; 0.4 is the largest share B200's BF16 fit holds within it (0.99 of it).

Beside the tiles, not under them (AIC's tables: a time linear in tokens x heads at ~7 TB/s on
every Blackwell): the kernel's Q, K, V and O bytes, and an FP8 cache's cast pass (read BF16,
write FP8: 3 bytes a value); and a fixed cost for each 128-row tile of the busiest SM (its Q
load, the key loop's fill and drain, its O store: the `waves` column, `wave_us`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.flash import KEY_BLOCK, PREFILL_ROWS, TRTLLM_PREFILL, prefill_work
from epsim.cost.mla_l2 import BF16_BYTES, PrefillWork

# Blackwell's dense BF16 tensor FLOPs a clock an SM, and its MUFU exponentials a clock an SM
BF16_FLOPS_PER_CLK = 8192.0
MUFU_EXP_PER_CLK = {"B200": 16.0, "GB200": 16.0, "B300": 32.0, "GB300": 32.0}
RAGGED_GPUS = tuple(MUFU_EXP_PER_CLK)
# the share of a tile's exponentials that adds to its MMAs (module docstring)
EXP_SERIAL_FRAC = 0.4
FP8_BYTES = 1.0
# bytes an FP8 cache's cast pass moves a value: read BF16, write FP8
CAST_BYTES_PER_VALUE = BF16_BYTES + FP8_BYTES


@dataclass(frozen=True)
class RaggedWork(PrefillWork):
    """The ragged kernel's work: `waves` the busiest SM's 128-row tiles, `mflops` its tiles at
    BF16-equivalent MFLOPs (MMAs at their format's peak and the serial exponentials, over the
    BF16 peak: `tile_scale`), `mem_kb` the bytes streamed beside them; time is
    `base + waves x wave_us + mem / hbm + math / tensor` (`ragged_us`)."""


def ragged(gpu: str) -> bool:
    """Whether `gpu`'s per-head MLA prefill runs the TRT-LLM-gen ragged kernel (Blackwell)."""
    return gpu in RAGGED_GPUS


def tile_scale(gpu: str, qk_dim: int, v_dim: int, fp8: bool) -> float:
    """A tile's cost over its MMAs' BF16 FLOPs at the BF16 peak: `1` (BF16) or `1/2` (FP8, twice
    the rate) plus `EXP_SERIAL_FRAC` of its exponentials at the MUFU's rate, as BF16 FLOPs
    (`BF16_FLOPS_PER_CLK / MUFU_EXP_PER_CLK` a exponential): B200 1.32 BF16, 0.82 FP8."""
    mma_flops = 2.0 * PREFILL_ROWS * KEY_BLOCK * (qk_dim + v_dim)
    exp_flops = PREFILL_ROWS * KEY_BLOCK * BF16_FLOPS_PER_CLK / MUFU_EXP_PER_CLK[gpu]
    return (0.5 if fp8 else 1.0) + EXP_SERIAL_FRAC * exp_flops / mma_flops


def ragged_work(tokens, context, seqs, heads: int, qk_dim: int, v_dim: int, kv_bytes: float,
                num_sms: int, gpu: str) -> RaggedWork:
    """The ragged kernel of `seqs` [dp] causal chunks of `tokens` [dp] new tokens (`context`
    [dp] keys in all), `heads` heads of `qk_dim`/`v_dim`, an FP8 cache where `kv_bytes` < 2.

    Returns:
        `RaggedWork` [dp]: the busiest SM's row tiles (`waves`) and tiles
        (`epsim.cost.flash.prefill_work` on `TRTLLM_PREFILL`, scaled by `tile_scale`), the Q, K,
        V, O bytes at the kernel's dtype and the cast pass's (`mem_kb`).
    """
    tokens = np.asarray(tokens, dtype=np.float64)
    seqs = np.maximum(np.asarray(seqs, dtype=np.float64), (tokens > 0).astype(np.float64))
    busy = tokens > 0
    fp8 = kv_bytes < BF16_BYTES
    work = prefill_work(tokens, context, seqs, heads, 1, (qk_dim + v_dim) / 2.0, num_sms,
                        kv_bytes / BF16_BYTES, grid=TRTLLM_PREFILL)
    # the busiest SM's 128-row tiles: a lone CTA's (up to `row_tiles`), else the SMs' share
    chunk = np.divide(tokens, seqs, out=np.zeros_like(tokens), where=busy)
    row_blocks = np.ceil(chunk / PREFILL_ROWS)
    per_cta = np.minimum(row_blocks, TRTLLM_PREFILL.row_tiles)
    ctas = heads * seqs * np.ceil(row_blocks / TRTLLM_PREFILL.row_tiles)
    rows = np.where(ctas <= num_sms, per_cta,
                    np.maximum(per_cta, heads * seqs * row_blocks / num_sms))
    # a query's Q (qk_dim) and a key's K and V (qk_dim, v_dim) read at the kernel's dtype, a
    # query's O (v_dim) written BF16; an FP8 cache's cast pass reads Q, K, V at BF16 and
    # writes them FP8
    values = tokens * qk_dim + np.asarray(context, dtype=np.float64) * (qk_dim + v_dim)
    value_bytes = kv_bytes + (CAST_BYTES_PER_VALUE if fp8 else 0.0)
    mem_kb = heads * (values * value_bytes + tokens * v_dim * BF16_BYTES) * 1e-3
    scale = tile_scale(gpu, qk_dim, v_dim, fp8)
    return RaggedWork(np.where(busy, rows, 0.0), np.zeros_like(tokens), work.mflops * scale,
                      np.where(busy, mem_kb, 0.0))


def ragged_us(work: RaggedWork, params) -> np.ndarray:
    """[dp] µs of the ragged kernel at absolute `params` (`hbm_gbps`, `tflops`, `base_us`,
    `wave_us`): its tiles, row tiles and bytes one after another; 0 without work."""
    t = (params["base_us"] + work.waves * params["wave_us"] + work.mem_kb / params["hbm_gbps"]
         + work.mflops / params["tflops"])
    return np.where(work.mflops > 0, t, 0.0)


def ragged_features(work: RaggedWork) -> np.ndarray:
    """[dp, 5] design rows in `epsim.cost.mla.MLA_TERMS` order: busy, row tiles, 0 splits, KB,
    MFLOPs (both sides, the bytes beside the tiles)."""
    busy = (work.mflops > 0).astype(np.float64)
    return np.stack([busy, work.waves, work.splits, work.mem_kb * busy, work.mflops], axis=-1)
