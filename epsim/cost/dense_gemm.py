"""One dense GEMM (or `b` equal ones batched) on weights of any format: its work after tile and
wave quantisation, its time, and its design rows for the fit (`any/gemm_<format>/graph`: the
dense linears, MLA's projections).

The formula and its symbols are `epsim.cost.quant`'s (the module docstring): weights at their
format's bytes, math at the tensor rate that format runs at, the activation quantisation and
the block scales' rescaling as terms of their own; `SPLIT_K_FORMATS`' kernels split K over idle
SMs, so their FLOPs are tile-quantised but not wave-quantised. Two kernels are priced at their
own tiles with the operand bytes their busiest SM streams (`sm_fed`): the NVFP4 GEMM on
Blackwell (`epsim.cost.fp4_gemm`) and the per-tensor FP8 GEMM on Hopper
(`epsim.cost.fp8_gemm`), which split no K, so a decode's few tiles leave SMs idle. The
per-tensor FP8 GEMM on Blackwell (SM100) runs its own tiles too, its busiest SM's weight stream
added to the HBM time (`feed_adds`) and its activation quantisation at a rate of its own. The
block-FP8 GEMM on Hopper and Blackwell is DeepGEMM's (`epsim.cost.deepgemm`): its own layout's
tiles, waves and k-blocks, each tile's BF16 output through its SM in place of a per-wave cost,
and the k-blocks of Hopper's unicast 256-row tile at a cost of their own.

Every kernel pays `dram_us` (fitted, >= 0) on top of its fixed cost: its operand stream starts
in DRAM, so its first loads wait out HBM's access latency and the stream's fill before the
bytes flow at the fitted rate, a cost no larger kernel hides (a serving GEMM's weights, one
layer's of many, never sit in L2). Where the fit side's records show it: AIC's collector
(`collector/sglang/collect_gemm.py`) replays 6 copies of the op, each with its own weights, back
to back, and where those copies fit L2 together (`collector_in_l2`: Hopper's 50 MB, 8 MB of
BF16 weights a copy) a replay finds them there and the record pays no `dram_us`. Fitted on one
fixed cost, those L2-resident rows (1-8 MB at 3-6 µs on an H100) held `base_us` low and with it
the HBM rate: the weight-streaming rows of 8-537 MB run at ~0.88 of HBM after ~4 µs, not at the
0.80 that fit gave them (docs/calibration.md, "The dense GEMMs' DRAM start").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.collector_burst import CAPPED_RATIO
from epsim.cost.deepgemm import deepgemm_runs, deepgemm_work
from epsim.cost.experts import TILE_M, TILE_N
from epsim.cost.fp4_gemm import SM_FILL_GBPS, cutedsl_work
from epsim.cost.fp8_gemm import (CUTLASS_FP8_GPUS, SM100_FP8_GPUS, cutlass_fp8_work, quant_reread,
                                 sm100_fp8_work)
from epsim.cost.linear import LinearTerms
from epsim.cost.quant import (ACTIVATION_BYTES, BF16_BYTES, FEED_FORMATS, SCALE_BLOCK_K, absolute,
                              check_format, gemm_defaults, quant_bytes_per_element, tensor_peak)
from epsim.spec.gpu import HardwareSpec
from epsim.spec.quant import weight_bytes_per_element

SPLIT_K_FORMATS = ("bf16", "fp16")      # GEMMs whose kernel splits K over idle SMs (cuBLAS)
# the fitted terms: fixed µs, inverse efficiencies (time at the datasheet rate x 1/frac); each
# set ends with `dram_us`, the fixed cost of a stream that starts from DRAM (`collector_in_l2`)
_GEMM_BASE = ("base_us", "hbm_frac", "tensor_frac", "wave_us", "dequant_us")
# `cap_slowdown_ratio`, last in every set: the capped clock's extra time on the compute side of an
# AIC op-table record timed in the collector's burst (`epsim.cost.collector_burst`), fitted on
# the GPUs whose ramp was not measured; its column is 0 in the simulator's rows (boost clock)
_BURST = ("dram_us", "cap_slowdown_ratio")
GEMM_TERMS = LinearTerms(_GEMM_BASE + _BURST, frozenset({"hbm_frac", "tensor_frac"}))
# the dense NVFP4 GEMM (CuTe-DSL) and Hopper's FP8 one (CUTLASS) add their SMs' operand feed
FP4_GEMM_TERMS = LinearTerms(_GEMM_BASE + ("sm_feed_gbps",) + _BURST,
                             GEMM_TERMS.inverse | {"sm_feed_gbps"})
# SM100's per-tensor FP8 GEMM (`epsim.cost.fp8_gemm`): its SMs' weight stream adds to the HBM
# time, and the activation quantisation (its own kernel) streams at a fraction of its own
SM100_FP8_TERMS = LinearTerms(_GEMM_BASE + ("sm_feed_gbps", "quant_frac") + _BURST,
                              FP4_GEMM_TERMS.inverse | {"quant_frac"})
# DeepGEMM's block-FP8 GEMM (`epsim.cost.deepgemm`): its tiles' output through the SM in place
# of a per-wave cost, and the k-blocks of its SM90 unicast 256-row tile
DEEPGEMM_TERMS = LinearTerms(("base_us", "hbm_frac", "tensor_frac", "epilogue_gbps", "dequant_us",
                              "wide_block_us") + _BURST,
                             frozenset({"hbm_frac", "tensor_frac", "epilogue_gbps"}))
# AIC's GEMM collector (`collector/sglang/collect_gemm.py`) times 6 copies of the op, each with
# its own weights, as one call replayed back to back
COLLECTOR_COPIES = 6


def dense_gemm_defaults() -> dict[str, float]:
    """`gemm_defaults` and DeepGEMM's terms at their bounds: its epilogue at the SM's
    shared-memory rate, its wide-tile k-block at no cost of its own; SM100's FP8 quantisation at
    the HBM efficiency the other bytes stream at."""
    base = gemm_defaults()
    return {**base, "epilogue_gbps": SM_FILL_GBPS, "wide_block_us": 0.0, "quant_frac": base["hbm_frac"],
            "dram_us": 0.0, "cap_slowdown_ratio": CAPPED_RATIO - 1.0}


def sm_fed(fmt: str, gpu: str = "") -> bool:
    """Whether the dense GEMM on `fmt` weights on `gpu` is priced with its SMs' operand feed:
    NVFP4 (FlashInfer's CuTe-DSL kernel) and, on Hopper and Blackwell, per-tensor FP8
    (sgl-kernel's CUTLASS `fp8_scaled_mm`, `epsim.cost.fp8_gemm`)."""
    return fmt in FEED_FORMATS or (fmt == "fp8" and gpu in CUTLASS_FP8_GPUS + SM100_FP8_GPUS)


def gemm_terms(fmt: str, gpu: str = "") -> LinearTerms:
    """The fitted terms of a dense GEMM on `fmt` weights on `gpu`: `FP4_GEMM_TERMS` where its
    operand feed is priced (`sm_fed`), `SM100_FP8_TERMS` for SM100's per-tensor FP8 GEMM,
    `DEEPGEMM_TERMS` for DeepGEMM's kernel (`epsim.cost.deepgemm`), `GEMM_TERMS` otherwise."""
    if deepgemm_runs(fmt, gpu):
        return DEEPGEMM_TERMS
    if fmt == "fp8" and gpu in SM100_FP8_GPUS:
        return SM100_FP8_TERMS
    return FP4_GEMM_TERMS if sm_fed(fmt, gpu) else GEMM_TERMS


@dataclass(frozen=True)
class GemmWork:
    """What `b` GEMMs `[m, k] x [k, n]` do, elementwise over `[...]` float64.

    Attributes:
        mem_kb: weights, activations in and output bytes, KB.
        mflops: FLOPs after tile (and wave) quantisation, MFLOP.
        waves: tile waves (each pays a prologue and epilogue).
        blocks: waves x weight-scale blocks along K (block-scaled formats; else 0).
        quant_kb: bytes the activation quantisation moves, KB (0 for BF16 activations).
        feed_kb: KB of A and B the busiest SM streams (`sm_fed` kernels; else 0).
        sm_fed: whether the kernel's feed is priced (`sm_fed`: a 6th design column).
        feed_adds: the feed adds to the memory side (SM100's FP8 GEMM: each SM's weight loads
            in flight over a latency that grows with the bytes queued at HBM) instead of
            bounding the MMA, and the quantisation's bytes run at `quant_frac` (a 7th column).
        wide_blocks: DeepGEMM's k-blocks in an SM90 unicast 256-row tile (`epsim.cost.deepgemm`:
            a 6th design column), or None for other kernels.
        epilogue_kb: DeepGEMM's BF16 output KB the busiest SM's epilogues write (in place of
            the per-wave column), or None for other kernels.
        reread_kb, reread_set_bytes: the per-tensor FP8 GEMM's activation quantisation
            (`sgl_per_token_quant_fp8`, `epsim.cost.fp8_gemm.quant_reread`): the BF16 input its
            second pass reads again, KB, and the bytes of the rows in flight between the two
            reads; that KB joins `quant_kb` where the set overflows the GPU's L2
            (`quant_kb_of`). None for other formats.
    """

    mem_kb: np.ndarray
    mflops: np.ndarray
    waves: np.ndarray
    blocks: np.ndarray
    quant_kb: np.ndarray
    feed_kb: np.ndarray
    sm_fed: bool = False
    feed_adds: bool = False
    wide_blocks: np.ndarray | None = None
    epilogue_kb: np.ndarray | None = None
    reread_kb: np.ndarray | None = None
    reread_set_bytes: np.ndarray | None = None


def gemm_work(m, n: int, k: int, fmt: str, num_sms: int, batch: int = 1,
              gpu: str = "") -> GemmWork:
    """The work of `batch` GEMMs `[m, k] x [k, n]` on `fmt` weights on `gpu` (module
    docstring; `gpu` picks the kernel: "" for the generic tile model).

    Args:
        m: [...] rows (tokens); 0 rows do no work.
    """
    m = np.asarray(m, dtype=np.float64)
    busy = (m > 0).astype(np.float64)
    weights = batch * n * k * weight_bytes_per_element(check_format(fmt))
    mem = busy * weights + batch * m * (k * ACTIVATION_BYTES[fmt] + BF16_BYTES * n)
    quant_kb = batch * m * k * quant_bytes_per_element(fmt) * 1e-3
    # the per-tensor FP8 GEMM's quantisation reads its input twice (`quant_reread`)
    reread = quant_reread(m, k, num_sms, batch) if fmt == "fp8" else (None, None)
    if deepgemm_runs(fmt, gpu):                 # DeepGEMM's own layout (`epsim.cost.deepgemm`)
        waves, mflops, blocks, wide, epilogue = deepgemm_work(m, n, k, num_sms, gpu, batch)
        return GemmWork(mem * 1e-3, mflops, waves, blocks, quant_kb, np.zeros_like(m),
                        wide_blocks=wide, epilogue_kb=epilogue)
    if sm_fed(fmt, gpu):                        # the kernel's own tile (no scale blocks)
        adds = fmt == "fp8" and gpu in SM100_FP8_GPUS
        work = (cutedsl_work if fmt in FEED_FORMATS else sm100_fp8_work if adds
                else cutlass_fp8_work)
        waves, mflops, feed_kb = work(m, n, k, num_sms, ACTIVATION_BYTES[fmt], batch)
        return GemmWork(mem * 1e-3, mflops, waves, np.zeros_like(m), quant_kb, feed_kb, True,
                        feed_adds=adds, reread_kb=reread[0], reread_set_bytes=reread[1])
    tiles = batch * np.ceil(m / TILE_M) * -(-n // TILE_N)
    waves = np.ceil(tiles / num_sms)
    filled = tiles if fmt in SPLIT_K_FORMATS else waves * num_sms
    block = SCALE_BLOCK_K.get(fmt, 0)
    return GemmWork(mem * 1e-3, filled * 2.0 * TILE_M * TILE_N * k * 1e-6, waves,
                    waves * -(-k // block) if block else np.zeros_like(m), quant_kb,
                    np.zeros_like(m), reread_kb=reread[0], reread_set_bytes=reread[1])


def quant_kb_of(work: GemmWork, hardware: HardwareSpec) -> np.ndarray:
    """[...] KB the activation quantisation moves on `hardware`: `work.quant_kb`, and the
    per-tensor FP8 quantisation's second read of its input where the rows in flight between its
    two reads overflow the L2 (`HardwareSpec.l2_bytes`; `epsim.cost.fp8_gemm.quant_reread`):
    below `2 x 8 x num_sms` tokens (one token a CTA) at most 8 rows an SM, ~34 MB of K-16384
    rows on an H100; from there (one a warp) 64 an SM, 69 MB of K-4096 rows past its 50 MB."""
    if work.reread_kb is None:
        return work.quant_kb
    return work.quant_kb + np.where(work.reread_set_bytes > hardware.l2_bytes, work.reread_kb, 0.0)


def _fed(work: GemmWork, rate: dict[str, float]) -> np.ndarray:
    """[...] whether the SMs' operand feed, not the MMA, sets the compute side."""
    if work.feed_adds:
        return np.zeros(work.mflops.shape, dtype=bool)
    return work.feed_kb / rate["sm_feed_gbps"] > work.mflops / rate["tflops"]


def _tile_us(work: GemmWork, rate: dict[str, float]) -> np.ndarray:
    """[...] each tile's own cost over the waves: a fixed one per wave, or DeepGEMM's output
    through its SM and its wide tile's k-blocks."""
    if work.epilogue_kb is None:
        return work.waves * rate["wave_us"]
    return work.epilogue_kb / rate["epilogue_gbps"] + work.wide_blocks * rate["wide_block_us"]


def _mem_us(work: GemmWork, rate: dict[str, float]) -> np.ndarray:
    """[...] the memory side: the bytes at the HBM rate, and where the feed adds (SM100's FP8
    GEMM) the busiest SM's weight stream at its own rate before them."""
    mem = work.mem_kb / rate["hbm_gbps"]
    return mem + work.feed_kb / rate["sm_feed_gbps"] if work.feed_adds else mem


def _math_us(work: GemmWork, rate: dict[str, float]) -> np.ndarray:
    feed = 0.0 if work.feed_adds else work.feed_kb / rate["sm_feed_gbps"]
    return (np.maximum(work.mflops / rate["tflops"], feed)
            + _tile_us(work, rate) + work.blocks * rate["dequant_us"])


def _quant_us(work: GemmWork, rate: dict[str, float], hardware: HardwareSpec) -> np.ndarray:
    """[...] the activation quantisation's bytes at the HBM rate, or (SM100's FP8 GEMM) at its
    own fraction of the datasheet."""
    quant_kb = quant_kb_of(work, hardware)
    if work.feed_adds:
        return quant_kb / (rate["quant_frac"] * hardware.hbm_gbps)
    return quant_kb / rate["hbm_gbps"]


def gemm_us(work: GemmWork, params, hardware: HardwareSpec, fmt: str) -> np.ndarray:
    """[...] microseconds of the GEMMs of `work` with fraction parameters `params`
    (`GEMM_TERMS`); 0 where there is no work."""
    rate = absolute({**dense_gemm_defaults(), **params}, hardware, fmt)
    t = (rate["base_us"] + rate["dram_us"] + np.maximum(_mem_us(work, rate), _math_us(work, rate))
         + _quant_us(work, rate, hardware))
    return np.where(work.mflops > 0, t, 0.0)


def gemm_features(work: GemmWork, params, hardware: HardwareSpec, fmt: str) -> np.ndarray:
    """[..., 6] design rows in `GEMM_TERMS` order: (1, µs at the datasheet HBM rate of the
    memory side if memory-bound plus the quantisation's bytes, then if compute-bound: µs at the
    datasheet tensor peak (where the MMA, not the feed, binds), waves, scale blocks), and where
    `work.sm_fed` a 6th (`FP4_GEMM_TERMS`): the busiest SM's operand KB where the feed binds,
    for DeepGEMM (`DEEPGEMM_TERMS`) the 4th its epilogue KB, not its waves, and a 6th its wide
    k-blocks, each where compute-bound; for SM100's FP8 GEMM (`SM100_FP8_TERMS`) the 6th is the
    busiest SM's weight KB where memory-bound and a 7th the quantisation's µs at the datasheet
    HBM rate (out of the 2nd); then every kernel's `dram_us` column: 1 where there is
    work (a record of AIC's collector whose copies fit L2 zeroes it, `collector_in_l2`), and
    last `cap_slowdown_ratio`'s, 0 here (the boost clock; an AIC record's compute side under the
    collector's burst fills it, `epsim.cost.record_kernels`); times
    `gemm_terms(fmt, gpu).coefficients(params)` gives `gemm_us`."""
    rate = absolute({**dense_gemm_defaults(), **params}, hardware, fmt)
    mem_bound = _mem_us(work, rate) >= _math_us(work, rate)
    busy = (work.mflops > 0).astype(np.float64)
    quant_kb = 0.0 if work.feed_adds else quant_kb_of(work, hardware)
    hbm_us = (np.where(mem_bound, work.mem_kb, 0.0) + quant_kb) / hardware.hbm_gbps
    compute, fed = ~mem_bound, _fed(work, rate)
    per_tile = work.waves if work.epilogue_kb is None else work.epilogue_kb
    cols = [busy, hbm_us,
            np.where(compute & ~fed, work.mflops, 0.0) / tensor_peak(hardware, fmt),
            np.where(compute, per_tile, 0.0), np.where(compute, work.blocks, 0.0)]
    if work.sm_fed:
        cols.append(np.where(mem_bound if work.feed_adds else compute & fed, work.feed_kb, 0.0))
    if work.feed_adds:
        cols.append(quant_kb_of(work, hardware) / hardware.hbm_gbps)
    if work.wide_blocks is not None:
        cols.append(np.where(compute, work.wide_blocks, 0.0))
    cols.append(busy)                           # `dram_us`: a serving GEMM's stream starts in DRAM
    cols.append(np.zeros_like(busy))            # `cap_slowdown_ratio`: the simulator's boost clock
    return np.stack(cols, axis=-1)


def math_columns(work: GemmWork) -> np.ndarray:
    """[terms] bool: the columns of `gemm_features` that price the compute side (the MMA, its
    tiles' own cost, scale blocks, the operand feed where it bounds the MMA, DeepGEMM's wide
    k-blocks): nonzero only where a row is compute-bound; not the fixed cost, the HBM bytes,
    SM100 FP8's weight stream (memory-bound rows) or its quantisation."""
    cols = [False, False, True, True, True]
    if work.sm_fed:
        cols.append(not work.feed_adds)
    if work.feed_adds:
        cols.append(False)
    if work.wide_blocks is not None:
        cols.append(True)
    return np.array(cols + [False, False])     # `dram_us`, `cap_slowdown_ratio`


def collector_in_l2(m, n: int, k: int, fmt: str, l2_bytes: float, batch: int = 1) -> np.ndarray:
    """[...] bool: whether the `COLLECTOR_COPIES` copies of a GEMM `[m, k] x [k, n]` that AIC's
    collector replays back to back fit the GPU's L2 together (weights, activations in and BF16
    output of each), so a replay finds its operands where the last one left them and its
    stream starts from L2, not DRAM: the record pays no `dram_us` (`gemm_features`' last
    column zeroed)."""
    m = np.asarray(m, dtype=np.float64)
    per_copy = batch * (n * k * weight_bytes_per_element(check_format(fmt))
                        + m * (k * ACTIVATION_BYTES[fmt] + BF16_BYTES * n))
    return COLLECTOR_COPIES * per_copy <= l2_bytes
