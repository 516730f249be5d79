"""Quantised GEMMs: weights read at their format's bytes, math at the tensor rate that format
runs at, the activation quantisation before the GEMM and the block scales' rescaling inside it
as terms of their own.

A GEMM `[m, k] x [k, n]`, `b` of them batched (MLA's absorbed BMMs run one per head), weights
in format `f` (`epsim.spec.quant`: bf16, fp8, fp8_block, nvfp4, w4a16):

    t = base_us + max(mem_us, math_us) + quant_us
    mem_us   = b (n k w_f + m k a_f + 2 m n) / (hbm_frac x HBM) * 1e-3
    math_us  = max(flops / (tensor_frac x peak_f) * 1e-6, feed_kb / sm_feed_gbps)
               + wave_us x waves + dequant_us x blocks
    quant_us = b m k q_f / (hbm_frac x HBM) * 1e-3

  w_f     bytes of one weight, its share of the scales included (`weight_bytes_per_element`:
          fp8_block 1 + 4/16384, nvfp4 0.5 + 1/16)
  a_f     bytes of one activation element the GEMM reads: the quantised copy and its scales
          (fp8 1 with one float32 per token, fp8_block 1 + 4/128: one float32 per 128-value
          token group, nvfp4 0.5 + 1/16: one FP8 scale per 16 values), 2 where the activations
          stay BF16 (bf16, and w4a16, which dequantises its weights inside the GEMM)
  q_f     bytes the activation quantisation moves per element: the BF16 value read, the
          quantised value and its scale share written (`2 + a_f`); 0 where none runs. Its
          kernel's launch is not a term of its own: every record holds one quantisation and
          one GEMM, so the two fixed costs cannot be told apart (both are in `base_us`)
  peak_f  the GPU's dense tensor peak for the format (`HardwareSpec.tensor_tflops`: FP8 for
          fp8 and fp8_block, FP4 for nvfp4, BF16 otherwise)
  flops, waves
          `2 TILE_M TILE_N k` per tile after tile quantisation, `ceil(m / TILE_M)
          ceil(n / TILE_N) b` tiles, in `ceil(tiles / num_sms)` waves of one tile per SM; the
          FLOPs are wave-quantised too (`epsim.cost.experts`) except where the kernel splits K
          over idle SMs (`epsim.cost.dense_gemm.SPLIT_K_FORMATS`: cuBLAS's BF16 GEMM, stream-K),
          which fills a wave
  feed_kb NVFP4 only (FlashInfer's CuTe-DSL FP4 GEMM, `epsim.cost.fp4_gemm`): the tile, waves
          and FLOPs are the kernel's own (its tile heuristic, 128 x 64 to 256 x 256), and the
          KB of A and B one SM streams into shared memory over its waves, at `sm_feed_gbps` per
          SM (fitted; bounded by the SM's shared-memory bandwidth, `SM_FILL_GBPS`); 0 otherwise
  blocks  waves x `ceil(k / 128)`: a 128 x 128 block-scaled format (fp8_block) rescales each
          128-deep slice of its partial sums by the block's scale in the main loop (DeepGEMM's
          promotion on Hopper); 0 for per-tensor scales (applied once, in the epilogue) and
          NVFP4 (its block scales are an operand of Blackwell's block-scaled MMA)

The efficiencies `hbm_frac` and `tensor_frac` are fractions of the GPU's datasheet (<= 1, the
fitter's bound) rather than absolute rates, so a fit on one GPU prices another from that GPU's
datasheet (`absolute`: the rates `epsim.cost.experts`' physics reads).

This module owns the formats' bytes and rates and the routed experts' grouped GEMM on them; one
dense GEMM's work, time and design rows are `epsim.cost.dense_gemm`'s.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from epsim.cost.experts import ExpertGemm, experts_rank_us, serial_kb
from epsim.cost.fallback_stream import FALLBACK_STREAM_PARAMS, fallback_stream_cols
from epsim.cost.fp4_gemm import SM_FILL_GBPS
from epsim.cost.linear import LinearTerms
from epsim.cost.roofline import HBM_EFFICIENCY, TENSOR_EFFICIENCY
from epsim.errors import SpecError
from epsim.spec.gpu import HardwareSpec
from epsim.spec.quant import WEIGHT_FORMATS, weight_bytes_per_element, weight_tensor_dtype

# bytes of one activation element a GEMM on weights of each format reads (the quantised copy
# with its scales; BF16 where the activations are not quantised)
ACTIVATION_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4.0 / 128,
                    "nvfp4": 0.5 + 1.0 / 16, "w4a16": 2.0}
BF16_BYTES = 2.0
SCALE_BLOCK_K = {"fp8_block": 128}      # K-depth of a weight-scale block rescaled in the loop
FEED_FORMATS = ("nvfp4",)
EXPERT_QUANT_TERMS = LinearTerms(("base_us", "per_expert_us", "hbm_frac", "tensor_frac",
                                  "wave_us", "dequant_us"), frozenset({"hbm_frac", "tensor_frac"}))
# FlashInfer's TRT-LLM MoE (Blackwell) adds its token tiles' weight re-reads
# (`epsim.cost.rereads`) and its per-token stages on the input's tokens whose slots lie on other
# ranks (`remote_tokens`),
# a wave's cost per row of its token tile (`wave_row_us`: the epilogue writes the tile's rows)
# and the CTAs it launches past the routed tiles, which exit (`epsim.cost.exiting_ctas`)
EXPERT_REREAD_TERMS = LinearTerms(EXPERT_QUANT_TERMS.params + ("reread_frac", "wave_row_us",
                                                              "token_us", "exit_us"),
                                  EXPERT_QUANT_TERMS.inverse)
# ... and on NVFP4 its SMs' operand feed at its own tiles (`ExpertGemm.sm_fed`), held at the
# dense NVFP4 GEMM's fit (`epsim.calibrate.build.experts_held`)
EXPERT_FEED_TERMS = LinearTerms(EXPERT_REREAD_TERMS.params + ("sm_feed_gbps",),
                                EXPERT_REREAD_TERMS.inverse | {"sm_feed_gbps"})
# ... and, on the rows of an untuned launch (AIC's tables), the launcher's default config at its
# fallback tile streaming the weights at that config's own rate (`epsim.cost.fallback_stream`)
EXPERT_FALLBACK_TERMS = LinearTerms(EXPERT_FEED_TERMS.params + FALLBACK_STREAM_PARAMS,
                                    EXPERT_FEED_TERMS.inverse)
# ... and on FP8-block (no SM feed term) the same fallback stream beside its re-reads
EXPERT_REREAD_FALLBACK_TERMS = LinearTerms(EXPERT_REREAD_TERMS.params + FALLBACK_STREAM_PARAMS,
                                           EXPERT_REREAD_TERMS.inverse)
FRACTIONS = ("hbm_frac", "tensor_frac")
# GPUs whose SGLang fused MoE on quantised weights is the Triton kernel, which runs over every
# slot of the group's tokens (`remote_slot_bytes`); Blackwell runs FlashInfer's TRT-LLM MoE,
# whose work on other ranks' slots is not this (aiconfigurator's B200 EP rows: the Triton
# bytes price its NVFP4 rows 2x long at EP 128, its FP8-block rows 14 % short)
TRITON_MOE_GPUS = ("H100", "H200", "H800", "H20")
# formats whose Triton fused MoE record rows stream the weights at the busiest SM's pace
# (`ExpertGemm.sm_stream`): block-FP8, whose default config is one tile whatever M (64 x 128 x
# 128), so an expert's weights are always `ceil(N / 128)` CTAs a GEMM: AIC's rows of that
# kernel and the simulator's `none` backend (`epsim.cost.resolve`)
SM_STREAM_FORMATS = ("fp8_block",)
# FlashInfer's TRT-LLM MoE centres its token tiles on the *balanced* share of a local expert,
# `clamp(next_pow2(T top_k / E_local), 8, cap)` (csrc/trtllm_fused_moe_kernel_launcher.cu,
# `computeSelectedTileN`, "assuming perfect expert distribution"), and offers the ladder's rungs
# {centre/2, centre, 2 centre, 4 centre} as tactics. With no tuned tactic (tactic [-1, -1]: the
# autotuner's cache missed, or no autotune pass ran) it runs the *smallest* candidate
# (`selectDefaultTileN` = `*selected.begin()`, one rung below the centre, 8 at the floor) with
# the runner's default config -- the same rule for FP8-block (`Fp8BlockScaleLauncher`) and NVFP4
# (`FP4BlockScaleLauncher`), at flashinfer v0.6.4 (f1e6fdcb) through v0.6.16. AIC's collector
# (`collector/sglang/collect_moe.py`, SGLang 0.5.14) calls SGLang's FusedMoE with no autotune
# pass: its tables ran that fallback. The ladder runs from 8 rows to 256 for NVFP4 (FP4 weights,
# FP4 activations) and 128 for FP8 (`getSupportedTileNums`; a 192 rung for NVFP4 came in v0.6.17)
TRTLLM_MIN_TILE = 8
TRTLLM_MAX_TILE = {"nvfp4": 256, "fp8": 128, "fp8_block": 128}
# The TRT-LLM MoE's weight tiles are 128 deep along the intermediate (GEMM 1's output rows, the
# down GEMM's K; the `t128xNx...` cubins, FP8-block's 128 x 128 scale blocks): a GPU's
# intermediate runs padded to a multiple of it. AIC's B200 tables show it on every shape whose
# MoE-TP share falls below or between multiples: DeepSeek's 2048 at MoE-TP 16 and 32 (128 and 64
# a GPU) time the same, 151.4 and 151.7 µs at 256 tokens (fp8_block); 2048 x 768 / 128 experts
# at 96, 48 and 24 the same (NVFP4's 6144 x 2048 at 128 and 64 too)
TRTLLM_K_STEP = 128
# formats whose TRT-LLM MoE fit prices the rows beside the roofline (`ExpertGemm.serial_rows`)
# and a wave's cost per tile row (`wave_row_us`, the rows' epilogue): FP8-block, where AIC's
# MoE-TP rows judge it (hold-out 16.6 -> 9.8 %). NVFP4's fit holds its math at the dense FP4
# GEMM's tensor rate (`epsim.calibrate.build.experts_held`), under which the two terms (tried
# with a per-K-step cost for every format) left its MoE-TP hold-out worse (15.6 -> 19.5 %)
SERIAL_ROWS_FORMATS = ("fp8", "fp8_block")
# formats whose TRT-LLM MoE puts its finalize's bytes (`finalize_bytes_per_row`) on the roofline's
# memory side: NVFP4. AIC's B200 MoE-TP rows show a per-row cost that does not shrink with the
# intermediate (16384 tokens of DeepSeek's shape: 1930 / 1373 / 1083 / 955 µs at 1024 / 512 / 256
# / 128 a GPU), hidden under the math at MoE-TP 1's long K; priced beside the roofline it
# over-priced the 2048-16384-token rows (docs/calibration.md, issue 37)
FINALIZE_FORMATS = ("nvfp4",)


def check_format(fmt: str) -> str:
    """`fmt` if it is a weight format epsim prices (`epsim.spec.quant.WEIGHT_FORMATS`).

    Raises:
        SpecError: `weight_dtype (...) must be one of [...]`.
    """
    if fmt not in WEIGHT_FORMATS:
        raise SpecError(f"weight_dtype ({fmt!r}) must be one of {list(WEIGHT_FORMATS)}")
    return fmt


def quantises_activations(fmt: str) -> bool:
    """Whether a GEMM on `fmt` weights quantises its BF16 activations first (a kernel of its
    own: fp8 per token, fp8_block per 128-value group, nvfp4 per 16-value block)."""
    return ACTIVATION_BYTES[check_format(fmt)] < BF16_BYTES


def quant_bytes_per_element(fmt: str) -> float:
    """Bytes the activation quantisation moves per element (`q_f`): BF16 in, the quantised
    value and its scale share out; 0 where the activations stay BF16."""
    return BF16_BYTES + ACTIVATION_BYTES[fmt] if quantises_activations(fmt) else 0.0


def tensor_peak(hardware: HardwareSpec, fmt: str) -> float:
    """The GPU's dense tensor peak a GEMM on `fmt` weights runs at, TFLOP/s.

    Raises:
        SpecError: the GPU has no tensor cores of that precision (NVFP4 on Hopper).
    """
    dtype = weight_tensor_dtype(check_format(fmt))
    peak = hardware.tensor_tflops(dtype)
    if peak is None:
        raise SpecError(f"weight format ({fmt!r}) must run on a GPU with {dtype.upper()} tensor "
                        f"cores: {hardware.name} has none")
    return peak


def gemm_defaults() -> dict[str, float]:
    """Datasheet parameters of a quantised GEMM or experts component: the stated efficiencies of
    `epsim.cost.roofline`, a few µs of launch, no per-wave, per-block or per-expert cost, and
    an operand feed at the SM's shared-memory bound (never binding below the MMA time)."""
    return {"base_us": 8.0, "per_expert_us": 0.0, "hbm_frac": HBM_EFFICIENCY,
            "tensor_frac": TENSOR_EFFICIENCY, "wave_us": 0.0, "dequant_us": 0.0,
            "sm_feed_gbps": SM_FILL_GBPS}


def absolute(params, hardware: HardwareSpec, fmt: str) -> dict[str, float]:
    """`params` with its efficiencies as the rates they stand for on `hardware`
    (`hbm_gbps = hbm_frac x HBM`, `tflops = tensor_frac x peak_f`), the form the grouped-GEMM
    physics of `epsim.cost.experts` reads; other parameters kept."""
    out = {k: float(v) for k, v in params.items() if k not in FRACTIONS}
    out["hbm_gbps"] = float(params["hbm_frac"]) * hardware.hbm_gbps
    out["tflops"] = float(params["tensor_frac"]) * tensor_peak(hardware, fmt)
    return out


# -- the routed experts' grouped GEMM on quantised weights ---------------------------------------
def quant_expert_gemm(hidden_size: int, intermediate_size: int, fmt: str, num_sms: int,
                      top_k: int, input_quantised: bool = False, num_up: int = 2) -> ExpertGemm:
    """The `ExpertGemm` of SwiGLU experts with `fmt` weights.

    Weights at `fmt`'s bytes; the GEMMs read quantised activations (`ACTIVATION_BYTES`). A
    quantised format quantises the hidden states before the gate+up GEMM (once per token:
    `1 / top_k` of a row's `H`; none where they arrive quantised -- an FP8 DeepEP dispatch)
    and the SwiGLU output before the down GEMM (`I` per row); a block-scaled one rescales its
    partial sums per 128-deep K block.

    Args:
        input_quantised: the hidden states arrive quantised (FP8 dispatch, or DeepEP's MoE
            runner that takes them so).
        num_up: projections of the first GEMM (`ExpertGemm.num_up`: 2 SwiGLU, 1 ReLU²).
    """
    h, i = hidden_size, intermediate_size
    weight = (num_up + 1.0) * h * i * weight_bytes_per_element(check_format(fmt))
    x_share = 0.0 if input_quantised else 1.0 / max(top_k, 1)
    return ExpertGemm(h, i, weight, num_sms, ACTIVATION_BYTES[fmt],
                      quant_bytes_per_element(fmt) * (x_share * h + i), SCALE_BLOCK_K.get(fmt, 0),
                      num_up=num_up)


def layout_kb(recv_tokens, hidden_size: int, fmt: str) -> np.ndarray:
    """[...] KB the DeepEP normal layout's own kernels move around the grouped GEMM: every
    received token's quantised row scattered into expert order (read and written at `a_f`) and
    its BF16 output gathered back (read and written), `(2 a_f + 4) H` per received token
    (DeepEP's normal dispatch hands a rank its tokens, not its (token, expert) pairs; the
    low-latency layout is already per expert and moves none)."""
    per_token = (2.0 * ACTIVATION_BYTES[check_format(fmt)] + 2.0 * BF16_BYTES) * hidden_size
    return np.asarray(recv_tokens, dtype=np.float64) * per_token * 1e-3


def remote_slot_bytes(hidden_size: int, intermediate_size: int, fmt: str, top_k: int,
                      gpu: str) -> float:
    """Bytes SGLang's fused Triton MoE kernel moves for one (token, expert) slot whose expert
    is on another rank, when every rank holds the group's tokens (no dispatch: the `none`
    backend, and AIC's `moe_perf` rows at EP > 1); 0 on a GPU whose SGLang runs another kernel
    (`TRITON_MOE_GPUS`). Its kernels run over all `T x top_k` slots: a remote
    slot's GEMM blocks write zeros (the gate+up output's `2I` and the down output's `H`, BF16),
    the SwiGLU reads the `2I` and writes `I`, the quantisation of the SwiGLU output reads and
    writes its `I` (`q_f`), the top-k sum reads the `H`, and the hidden state's quantisation
    runs for every token (`H q_f / top_k` per slot). A local slot's share of this work is in
    the fitted rates (EP 1 records, all slots local); this is the rest, at the same HBM rate."""
    h, i, q = hidden_size, intermediate_size, quant_bytes_per_element(check_format(fmt))
    if gpu not in TRITON_MOE_GPUS:
        return 0.0
    return BF16_BYTES * (2.0 * i + 2.0 * i + i + 2.0 * h) + q * (i + h / max(top_k, 1))


def remote_tokens(input_tokens, pairs, top_k: int) -> np.ndarray:
    """[...] token-equivalents of FlashInfer's TRT-LLM MoE input whose per-token work its local
    pairs do not carry: `input_tokens - pairs / top_k`, at least 0.

    The kernel runs its per-token stages -- routing over every expert, the hidden state's FP4
    or FP8 quantisation, the finalize that writes each token's output row -- over every token
    of its input, local slots or not (at EP > 1 AIC's collector and SGLang's `none` backend
    hand each rank the group's tokens with the full router logits and `local_num_experts =
    E / ep`: flashinfer csrc/trtllm_fused_moe_kernel_launcher.cu). An EP 1 fit holds that
    work in its per-pair terms, `1 / top_k` of a token per pair; this is the rest, priced at
    the fitted `token_us` each (aiconfigurator's GB200 NVFP4 rows at EP 2-256 and 1024-16384
    tokens: 9 ns a remote token whatever the hidden size, where the bytes of quantising and
    writing it at the datasheet rate explain neither its size nor its spread over shapes).

    Args:
        input_tokens: [...] tokens the kernel's input holds (the group's with no dispatch).
        pairs: [...] routed token-expert pairs of the rank's local experts.
    """
    pairs = np.asarray(pairs, dtype=np.float64)
    return np.maximum(np.asarray(input_tokens, dtype=np.float64) - pairs / max(top_k, 1), 0.0)


# formats whose remote tokens are priced by the CTAs FlashInfer's standalone activation kernel
# gives each token (`remote_token_weight`), not one a token: FP8-block. Its TRT-LLM MoE runs the
# SwiGLU and the FP8 requantisation as a kernel of its own ("we do not fuse activation with FC1
# for DeepSeek FP8", csrc/trtllm_fused_moe_runner.cu), over *every* (token, expert) slot of its
# input: `activationDeepSeekKernel` (flashinfer-python 0.6.12, the version SGLang 0.5.14 pins:
# csrc/fused_moe/trtllm_backend/trtllm_fused_moe_dev_kernel.cu, `activation::run`) launches
# `grid(ceil(I / 128), ceil(T / n) (at most 8192), top_k)` CTAs of 128 threads, `n` tokens a
# CTA by its launch heuristic on the `ceil(I / 128) T top_k` one-token CTAs: 4 above 32 a SM,
# 2 above 4 a SM, else 1. Each CTA runs its block max-reduction and barrier whatever its tokens;
# a slot whose permuted index is -1 (an expert on another rank) only skips its loads, so a
# remote token costs `top_k ceil(I / 128) / n` CTAs whatever H: 4x as many at a few tokens as
# at thousands. AIC's B200 balanced EP 128 rows (the local pairs under 1 %, n = 4) agree: their
# time per token of the group at 2048-16384 tokens over these CTAs is about one price on all
# eight balanced shapes, top-1 (H 5120 / I 8192) included, where per `H / 4096` it spread
# 22-46 ns. NVFP4 fuses the activation into its GEMM and keeps one price a token
ACTIVATION_GRID_FORMATS = ("fp8_block",)
ACTIVATION_CTA_COLS = 128               # output columns of one activation CTA (its 128 threads)
ACTIVATION_TOKENS_PER_CTA = ((32, 4), (4, 2))   # (one-token CTAs a SM above which, tokens a CTA)
ACTIVATION_CTA_REF = 32                 # CTAs of DeepSeek-V3's token at 4 a CTA (8 x 2048 / 128 / 4)


def activation_tokens_per_cta(intermediate_size: int, top_k: int, num_tokens,
                              num_sms: int) -> np.ndarray:
    """[...] tokens one CTA of FlashInfer's `activationDeepSeekKernel` takes for an input of
    `num_tokens` [...] tokens: 4 where its one-token grid, `ceil(I / 128) T top_k` CTAs, exceeds
    32 a SM, 2 where it exceeds 4 a SM, else 1 (`ACTIVATION_TOKENS_PER_CTA`)."""
    ctas = (np.ceil(intermediate_size / ACTIVATION_CTA_COLS) * top_k
            * np.asarray(num_tokens, dtype=np.float64))
    out = np.ones_like(ctas)
    for per_sm, tokens in reversed(ACTIVATION_TOKENS_PER_CTA):
        out = np.where(ctas > per_sm * num_sms, float(tokens), out)
    return out


def remote_token_weight(fmt: str, intermediate_size: int, top_k: int, num_tokens=None,
                        num_sms: int = 0):
    """Token-equivalents one remote token counts for in `remote_tokens`' price (`token_us`):
    for `ACTIVATION_GRID_FORMATS` the standalone activation kernel's CTAs a token launches,
    `top_k ceil(I / 128) / n` (`activation_tokens_per_cta` of the kernel's `num_tokens` [...]
    input tokens on `num_sms` SMs; `n` = 4, its large-input value, where `num_tokens` is not
    given), over `ACTIVATION_CTA_REF` (a DeepSeek-V3 token counts 1 at 4 a CTA), else 1.

    Args:
        intermediate_size: the expert's intermediate on the GPU (after MoE-TP; the kernel's).
        num_tokens: [...] tokens of the kernel's input (the group's with no dispatch).
        num_sms: the GPU's SMs (the launch heuristic's unit).
    """
    if check_format(fmt) in ACTIVATION_GRID_FORMATS:
        ctas = top_k * np.ceil(intermediate_size / ACTIVATION_CTA_COLS)
        per_cta = (4.0 if num_tokens is None else
                   activation_tokens_per_cta(intermediate_size, top_k, num_tokens, num_sms))
        return ctas / per_cta / ACTIVATION_CTA_REF
    return 1.0


def trtllm_tile(share, fmt: str, tuned: bool = False) -> np.ndarray:
    """[...] rows per token tile FlashInfer's TRT-LLM MoE runs for `fmt` weights at `share`
    [...], the balanced rows of one local expert (`tokens x top_k / local experts`). The centre
    is the share's next power of two within [`TRTLLM_MIN_TILE`, the format's `TRTLLM_MAX_TILE`];
    untuned (`tuned` False, the fallback tactic) the kernel runs one rung below it, floored at
    `TRTLLM_MIN_TILE`; `tuned` gives the centre (the autotuner's pick among its neighbours is a
    measurement, not a rule)."""
    share = np.maximum(np.asarray(share, dtype=np.float64), 1.0)
    cap = TRTLLM_MAX_TILE.get(check_format(fmt), 128)
    centre = np.clip(2.0 ** np.ceil(np.log2(share) - 1e-9), TRTLLM_MIN_TILE, cap)
    return centre if tuned else np.maximum(centre / 2.0, TRTLLM_MIN_TILE)


def trtllm_ladder(tile, fmt: str) -> np.ndarray:
    """[...] `tile` [...] rows held to the format's ladder [`TRTLLM_MIN_TILE`,
    `TRTLLM_MAX_TILE`] (the launcher's candidates beyond its ends are dropped, so the ends
    stand for them)."""
    return np.clip(np.asarray(tile, dtype=np.float64), TRTLLM_MIN_TILE,
                   TRTLLM_MAX_TILE.get(check_format(fmt), 128))


def finalize_bytes_per_row(hidden_size: int, top_k: int) -> float:
    """Bytes per row (token-expert pair) the finalize moves, `(2 + 2 / top_k) H`: the down GEMM's
    BF16 row read back, the token's BF16 sum written once per `top_k` rows."""
    return BF16_BYTES * (1.0 + 1.0 / max(top_k, 1)) * hidden_size


def trtllm_gemm(gemm: ExpertGemm, tile, fmt: str, top_k: int) -> ExpertGemm:
    """`gemm` as FlashInfer's TRT-LLM MoE runs it on `fmt` weights with token tiles of `tile`
    [...] rows and `top_k` experts a token: the intermediate (and the weights) padded to whole
    `TRTLLM_K_STEP`s, for `SERIAL_ROWS_FORMATS` the rows' activations beside the roofline
    (`ExpertGemm.serial_rows`), for `FINALIZE_FORMATS` the finalize's bytes under it
    (`finalize_bytes_per_row`)."""
    inter = gemm.intermediate_size
    padded = -(-inter // TRTLLM_K_STEP) * TRTLLM_K_STEP
    fmt = check_format(fmt)
    final = finalize_bytes_per_row(gemm.hidden_size, top_k) if fmt in FINALIZE_FORMATS else 0.0
    return dataclasses.replace(gemm, tile_rows=tile, intermediate_size=padded,
                               weight_bytes=gemm.weight_bytes * padded / inter,
                               serial_rows=fmt in SERIAL_ROWS_FORMATS,
                               sm_fed=fmt in FEED_FORMATS, finalize_bytes_per_row=final)


def experts_quant_features(pairs, active, tiles, gemm: ExpertGemm, params,
                           hardware: HardwareSpec, fmt: str, layout=0.0,
                           reread=None, remote=0.0, exiting=0.0,
                           fallback_kb=None, own_layout=None) -> np.ndarray:
    """[..., 6] design rows in `EXPERT_QUANT_TERMS` order at the slowest rank (`pairs`,
    `active`, `tiles`: [..., ranks] as `epsim.cost.experts.experts_rank_us` takes them): 1,
    active experts, µs at the datasheet HBM rate of the memory side if memory-bound plus the
    quantisation's bytes (and the rows' bytes beside the roofline where `gemm.serial_rows`),
    then if compute-bound: µs at the format's datasheet peak, waves,
    scale blocks; times `EXPERT_QUANT_TERMS.coefficients(params)` gives the slowest rank's
    `experts_rank_us` at `absolute(params)`, plus `layout` [...] KB at HBM: the backend's own
    kernels around the GEMM (DeepEP normal's layout, `layout_kb`; the fused kernel's remote
    slots, `remote_slot_bytes`). With `reread` [...] KB (`epsim.cost.rereads.reread_kb`,
    FlashInfer's TRT-LLM MoE) a 7th to 10th column, `EXPERT_REREAD_TERMS`: those re-reads at the datasheet HBM
    rate, outside the roofline (`reread_frac`: the share that costs an HBM read, L2 hits the
    rest), if compute-bound the waves times their tiles' rows (`wave_row_us`), and `remote`
    [...] token-equivalents of the slowest rank's input whose slots lie elsewhere
    (`remote_tokens`; `token_us` each, beside the roofline: their own kernels), and `exiting`
    [...] CTAs per SM that start and exit (`epsim.cost.exiting_ctas`; `exit_us` each, beside
    the roofline: they hold their SM's slot and stream nothing). Where `gemm.sm_fed` (NVFP4)
    an 11th, `EXPERT_FEED_TERMS`: if compute-bound and the SMs' operand
    feed outlasts the MMA, the KB the busiest SM streams (`ExpertGemm.feed_kb`; the tensor
    column then 0). With `fallback` (`epsim.cost.fallback_stream.partial_tile_kb` of an untuned launch)
    two more, `EXPERT_FALLBACK_TERMS`: if memory-bound, the active experts' weights at the
    datasheet HBM rate in the column of the fallback tile (`fallback_stream_cols`). With
    `own_layout` [...] KB (DeepEP normal's runner, `layout_kb`) a 7th and 8th,
    `epsim.cost.normal_runner.EXPERT_LAYOUT_TERMS`: those bytes at the datasheet HBM rate (`layout_ratio` their
    coefficient, beside the roofline) and the host floor's column, 0 here (`eager_floor`)."""
    rate = absolute({**gemm_defaults(), **params}, hardware, fmt)
    pairs, active, tiles = (np.asarray(a, dtype=np.float64) for a in (pairs, active, tiles))
    slowest = experts_rank_us(pairs, active, tiles, gemm, rate).argmax(axis=-1)[..., None]
    p, a, n = (np.take_along_axis(x, slowest, axis=-1)[..., 0] for x in (pairs, active, tiles))
    rows_kb = serial_kb(p, gemm)                # the rows beside the roofline (serial_rows)
    mem_kb = (gemm.stream_kb(a) + p * gemm.roofline_row_bytes * 1e-3 if gemm.sm_stream
              else (a * gemm.weight_bytes + p * gemm.roofline_row_bytes) * 1e-3) - rows_kb
    mflops, waves = gemm.quantized_mflops(n), gemm.waves(n)
    blocks, feed_kb = gemm.scale_blocks(n), gemm.feed_kb(n)
    fed = feed_kb / rate["sm_feed_gbps"] > mflops / rate["tflops"]
    math = (np.maximum(mflops / rate["tflops"], feed_kb / rate["sm_feed_gbps"])
            + waves * rate["wave_us"] + blocks * rate["dequant_us"]
            + waves * gemm.tile_rows * rate.get("wave_row_us", 0.0) * gemm.serial_rows)
    reread_us = (0.0 if reread is None else
                 rate.get("reread_frac", 0.0) * np.asarray(reread, dtype=np.float64) / hardware.hbm_gbps)
    stream = (None if fallback_kb is None else    # [..., tiles] the fallback config's stream
              fallback_stream_cols(gemm.tile_rows, fallback_kb, hardware, fmt))
    stream_us = (0.0 if stream is None else
                 stream @ np.array([rate.get(n, 0.0) for n in FALLBACK_STREAM_PARAMS]))
    compute = mem_kb / rate["hbm_gbps"] + reread_us + stream_us < math
    quant_kb = p * gemm.quant_bytes_per_row * 1e-3
    cols = [np.ones_like(p), a,
            (np.where(compute, 0.0, mem_kb) + rows_kb + quant_kb + layout) / hardware.hbm_gbps,
            np.where(compute & ~fed, mflops, 0.0) / tensor_peak(hardware, fmt),
            np.where(compute, waves, 0.0), np.where(compute, blocks, 0.0)]
    if reread is not None:
        cols.append(np.where(compute, 0.0, np.asarray(reread, dtype=np.float64) / hardware.hbm_gbps))
        cols.append(np.where(compute & gemm.serial_rows, waves * gemm.tile_rows, 0.0))
        cols.append(np.broadcast_to(np.asarray(remote, dtype=np.float64), p.shape))
        cols.append(np.broadcast_to(np.asarray(exiting, dtype=np.float64), p.shape))
    if gemm.sm_fed:
        cols.append(np.where(compute & fed, feed_kb, 0.0))
    if stream is not None:
        cols += list(np.moveaxis(np.where(compute[..., None], 0.0, stream), -1, 0))
    if own_layout is not None:
        cols.append(np.broadcast_to(np.asarray(own_layout, dtype=np.float64) / hardware.hbm_gbps,
                                    p.shape))
        cols.append(np.zeros_like(p))      # the host floor's column (`eager_floor`)
    return np.stack(cols, axis=-1)

