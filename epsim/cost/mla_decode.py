"""MLA's decode kernel (`epsim.cost.mla` prices the rest of the layer): how it tiles a
sequence's heads into CTAs on each GPU, the format its MMAs run in, and Hopper's cast pass over
an FP8 cache.

The kernel is absorbed (queries and keys over the latent and its RoPE key, values the latent:
`epsim.cost.mla.absorbed_form`) and one KV head, so a sequence's heads are the rows of its CTAs.
The blocks of a sequence run side by side and read the same keys microseconds apart: the cache
is streamed from HBM once (the later blocks' reads are L2 hits), and each block does its own
math (`decode_kernel_work`). What a CTA holds is the kernel's:

  Hopper     FlashAttention-3's MLA path (aiconfigurator's collector; FlashMLA alike): 64-row
             tiles, `ceil(heads / 64)` CTAs a sequence, one CTA an SM, its keys split to fill
             the SMs. 128 heads are bound by their math: DeepSeek's FlashMLA runs 128 heads
             compute-bound on H800 at 580-660 TFLOP/s (deepseek-ai/FlashMLA: its README and
             docs/20250422-new-kernel-deep-dive.md); aiconfigurator-core's SGLang 0.5.14
             `generation_mla_perf` tables show 16 and 64 heads streaming 1-19 GB of cache at
             2.8-3.0 TB/s on h100_sxm and 4.0-4.4 on h200_sxm (their HBM: 3.35 and 4.8), 128
             heads at 530-540 TFLOP/s on both (the same SMs and clocks).
  Blackwell  TRT-LLM's MLA generation kernels (FlashInfer's `trtllm_batch_decode_with_kv_cache_
             mla`, SGLang's trtllm_mla backend) pick one of two by the heads
             (`TllmGenFmhaKernel`'s MLA selection): up to 32 heads the low-latency kernel,
             which swaps the MMA's operands (the keys its M, the heads its N) in 8- or 16-head
             tiles, `ceil(heads / 16)` CTAs a sequence, its keys split to fill the SMs; above,
             the high-throughput kernel's 64-head tiles (128 heads: two CTAs, one cluster).
             The swapped MMA's N of 16 runs far below the tensor peak: aiconfigurator-core's
             b200_sxm table (BF16 cache, 1024 x 16384 keys) takes 3.3 ms at 16 heads (memory:
             5.8 TB/s), 5.0 ms at 32 (its two 16-head CTAs' math, 0.23 PFLOP/s) and 3.9-4.1 ms
             at 64 and 128 in the other kernel (memory again, 1.1 PFLOP/s of math at 128); an
             FP8 cache 1.45, 2.23 and 1.97-2.47 ms. So the swapped kernel's tensor rate is its
             own fraction of the peak (`swapped_frac`, `MLA_SWAPPED_TERMS`), fitted where 32
             heads run it; a fit on up to 64 heads then prices 128 (the shape hold-out,
             `benchmarks/aic_holdout.py`). Counted as one tile of the heads rounded up to a
             power of two at one rate, 32 heads' slowness was read as a low tensor rate and 128
             heads priced 80-100 % high.
             More heads run the low-latency kernel too where a launch is small
             (FlashInfer's `useSwapsMmaAbMlaGenKernel`, `swapped_launch`; read in
             flashinfer-ai/flashinfer `include/flashinfer/trtllm/fmha/fmhaKernels.cuh`, where
             TensorRT-LLM's older copies choose by the sequences alone): its 16-head CTAs fit
             on the SMs and, its keys split to fill them, a split holds at most 1024 keys (128
             heads: up to 18 sequences on 148 SMs, 1 x 16384 or 16 x 1024 keys, not 4 x 16384).
             Priced as the high-throughput kernel, AIC's b200_sxm cells of 128 heads that the
             selection sends to the low-latency one ran 17-25 % over it (16 x 1024 BF16: 26.8
             µs measured, 21.2 priced) and those it keeps ran under (16 x 256: 12.5-14.8, priced
             18.1-18.5).
             The high-throughput kernel's FP8 MMAs (an FP8 cache) run a smaller share of the FP8
             peak than its BF16 MMAs of theirs: its rate is the BF16 rate x `fp8_mma_ratio`,
             held at the ratio of the same GPU's MLA prefill fits (`any/mla_prefill_fp8` over
             `any/mla_prefill_bf16` `tensor_frac`, TRT-LLM-gen's ragged kernel on the same
             SMs; B200 0.72 / 0.98; at most 1, `epsim.calibrate.build.mla_decode_held`). At
             the BF16 fraction on the FP8 peak the b200_sxm table's long 128-head FP8 cells ran
             15-21 % over their price (1024 x 16384 keys: 2471 µs, 0.42 of the FP8 peak; BF16
             4094 µs, 0.51 of its).

SGLang's `cutlass_mla` backend (`--attention-backend cutlass_mla`; GB200's launch scripts of
2025) runs CUTLASS's SM100 MLA kernel with `num_kv_splits=1` (sglang#7184, 2025-06-14: the split
heuristic off, read at sgl-project/sglang v0.5.1-v0.5.5 `cutlass_mla_backend.py`): its 128-row
tile is one CTA pair (two SMs, 64 rows each, as the high-throughput tiles above), and that pair
walks all of a sequence's keys whatever the sequence count, so a few long sequences use a few
SMs (`DeploymentSpec.mla_kv_splits` "one": `decode_grid(split_keys=False)`). Its rate is not
measured: priced at the split kernel's fitted per-SM rates (a CTA's tile at the GPU's rate over
its SMs), so each pair runs at its SMs' share of the tables' kernel -- extrapolated.

The high-throughput tiles' tensor rate (`tensor_frac`) is the same GPU's MLA prefill kernel's
(`epsim.calibrate.build.mla_decode_held`): up to 64 heads the decode is bound by its cache, so
its own records cannot tell the rate that binds 128.

A split decode's partial outputs (each split's FP32 latent output and log-sum-exp a head, written
by the kernel and read back by its combine) are bytes of their own (`partial_kb`): they grow
with the heads where `per_split_us` does not, and at a few sequences of 128 heads they pass the
cache's (a fit on <= 64 heads without them priced 128 heads' small batches 20-40 % short).

Hopper's kernel takes an FP8 cache through a pass of its own that casts it to BF16 before the
kernel streams the copy (`decode_dequantises`, `dequant_frac`); Blackwell's reads FP8 keys in
its loop and multiplies them in FP8 (`math_dtype`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from epsim.cost.flash import (COUNTS_KEPT, SPLIT_ROWS, DecodeGrid, DecodeKernel, KernelWork,
                              decode_counts, decode_work, kernel_us)
from epsim.cost.linear import LinearTerms
from epsim.cost.mla import (BF16_BYTES, MLA_PREFILL_TERMS, MLA_TERMS, MlaForm, MlaParams, absolute,
                            mla_kernel_features)
from epsim.profile import HOPPER
from epsim.spec.gpu import HardwareSpec

# Hopper's FP8-cache decode (`decode_dequantises`): the kernel's terms and the cast pass before it
MLA_DEQUANT_TERMS = LinearTerms(MLA_TERMS.params + ("dequant_frac",),
                                MLA_TERMS.inverse | {"dequant_frac"})
# ... and the absorbed prefill's on Hopper (`epsim.cost.mla_l2`): the same cast pass, then its kernel
MLA_PREFILL_DEQUANT_TERMS = LinearTerms(MLA_PREFILL_TERMS.params + ("dequant_frac",),
                                        MLA_PREFILL_TERMS.inverse | {"dequant_frac"})
# Blackwell's decode: the high-throughput kernel's terms and the swapped (low-latency) kernel's
# HBM and tensor rates, fractions of the datasheet HBM and of its format's peak (its own memory
# and math columns)
SWAPPED_RATES = {"hbm_frac": "swapped_hbm_frac", "tensor_frac": "swapped_frac"}
MLA_SWAPPED_TERMS = LinearTerms(MLA_TERMS.params + tuple(SWAPPED_RATES.values()),
                                MLA_TERMS.inverse | set(SWAPPED_RATES.values()))
# an SM's cast rate at its datasheet: 4 sub-partitions x 32 lanes, one element a lane a cycle, at
# Hopper's 1.98 GHz boost clock (H100/H200 SXM), in elements per microsecond; `dequant_frac` is
# the pass's rate over it
SM_CAST_ELEMS_PER_US = 128 * 1980.0
# Blackwell's MLA generation kernels (module docstring): the most heads the swapped kernel runs,
# its query tiles (8 heads or fewer: 8 rows, else 16), the high-throughput kernel's tile
SWAPPED_MAX_HEADS = 32
SWAPPED_ROWS = (8, 16)
# FlashInfer's `useSwapsMmaAbMlaGenKernel` (`swapped_launch`): the most keys a split of the
# low-latency kernel holds where more than `SWAPPED_MAX_HEADS` heads run it, and the keys a split
# at least (its split count's step)
SWAPPED_MAX_KEYS = 1024
SWAPPED_KEY_STEP = 256
# the held ratio of the high-throughput kernel's FP8 tensor rate to its BF16 one (module docstring)
FP8_MMA_RATIO = "fp8_mma_ratio"
BLACKWELL_TILE_ROWS = 64
# a split decode's partial outputs and log-sum-exps are FP32 (FlashAttention-3's `oaccum` /
# `lse_accum`, read back by `flash_fwd_combine`; TRT-LLM's multi-CTA KV mode alike)
PARTIAL_BYTES_PER_VALUE = 4.0


def math_dtype(gpu: str, kv_bytes: float) -> str:
    """The tensor-core format an MLA decode kernel's MMAs run in on `gpu`: FP8 where Blackwell's
    kernel reads an FP8 cache (TRT-LLM's generation kernel quantises the query and multiplies
    FP8 keys and values as they are), else BF16 (Hopper's kernel runs on the cast BF16 copy,
    `decode_dequantises`). aiconfigurator-core's b200_sxm table (SGLang 0.5.14, trtllm_mla) shows
    it: 128 heads over 16.8M FP8 keys take 2.3 ms, 4.7 x 10^12 FLOPs at 2.0 PFLOP/s, over the
    B200's 2.25 PFLOP/s BF16 peak (its BF16 cache: 4.6 ms, 1.0 PFLOP/s)."""
    return "fp8" if gpu not in HOPPER and kv_bytes < BF16_BYTES else "bf16"


def decode_dequantises(gpu: str, kv_bytes: float) -> bool:
    """Whether `gpu`'s MLA decode casts an FP8 cache to BF16 in a pass of its own before the
    kernel, which then streams the BF16 copy (Hopper; Blackwell's TRT-LLM kernel reads FP8 keys
    in its loop, `epsim.profile.decode_kv_kind`). aiconfigurator-core's SGLang 0.5.14
    `generation_mla_perf` tables (FlashAttention-3) show it: an FP8 cache takes the BF16 cache's
    time plus 1.64 ns a key on h200_sxm and 1.68 on h100_sxm at 64k-16M keys, the same at 1 to
    128 heads (a pass over the keys, not the kernel's per-head-block reads) and on both GPUs
    (their SMs and clocks are the same, their HBM is 1.43x apart: the cast is bound by the SMs'
    issue, not the memory)."""
    return gpu in HOPPER and kv_bytes < BF16_BYTES


def dequant_frac(params) -> float:
    """`params`' `dequant_frac` (infinite where a fit has none: the pass costs nothing)."""
    return float(params.get("dequant_frac", float("inf")))


def dequant_sm_us(context, form: MlaForm, num_sms: int) -> np.ndarray:
    """[dp] µs of the FP8 cache's cast pass at the SMs' datasheet cast rate
    (`SM_CAST_ELEMS_PER_US`): the `context` [dp] keys' `qk_dim` elements each, spread over
    `num_sms` SMs; the pass takes this over `dequant_frac`."""
    return np.asarray(context, dtype=np.float64) * form.qk_dim / (num_sms * SM_CAST_ELEMS_PER_US)


def dequant_us(context, form: MlaForm, num_sms: int, params) -> np.ndarray:
    """[dp] µs of the FP8 cache's cast pass (`decode_dequantises`), 0 without keys."""
    return dequant_sm_us(context, form, num_sms) / dequant_frac(params)


def kernel_form(form: MlaForm, dequantised: bool) -> MlaForm:
    """The form the decode kernel streams: `form`, or its BF16 copy after the cast pass."""
    if not dequantised:
        return form
    return replace(form, kv_bytes_per_key=form.qk_dim * BF16_BYTES)


@dataclass(frozen=True)
class DecodeLaunch:
    """One MLA decode launch as Blackwell's kernel selection sees it (`swapped_launch`).

    Attributes:
        seqs: decoding sequences on the GPU.
        keys: cached keys a sequence (the mean: every sequence of a record has the same).
        num_sms: the GPU's SMs.
    """

    seqs: float
    keys: float
    num_sms: int


def swapped_launches(heads: int, seqs, keys, num_sms: int) -> np.ndarray:
    """[...] bool, FlashInfer's `useSwapsMmaAbMlaGenKernel` for `seqs` sequences (broadcast
    against `keys`) of `keys` keys each: the low-latency kernel's `ceil(heads / 16)` CTAs a
    sequence fit on the `num_sms` SMs, and its keys, split to fill them
    (`min(ceil(keys / 256), max(1, num_sms // ctas))` splits), hold at most `SWAPPED_MAX_KEYS`
    keys a split. False without sequences."""
    seqs = np.rint(np.asarray(seqs, dtype=np.float64))
    keys = np.asarray(keys, dtype=np.float64)
    ctas = seqs * math.ceil(heads / SWAPPED_ROWS[1])
    fits = (ctas > 0) & (ctas <= num_sms)
    splits = np.minimum(np.ceil(keys / SWAPPED_KEY_STEP),
                        np.maximum(1.0, np.floor(num_sms / np.maximum(ctas, 1.0))))
    return fits & (np.ceil(keys / np.maximum(splits, 1.0)) <= SWAPPED_MAX_KEYS)


def swapped_launch(heads: int, launch: DecodeLaunch) -> bool:
    """`swapped_launches` of one launch."""
    return bool(swapped_launches(heads, launch.seqs, launch.keys, launch.num_sms))


def swapped(gpu: str, heads: int, launch: DecodeLaunch | None = None) -> bool:
    """Whether `gpu`'s MLA decode of `heads` heads a GPU runs TRT-LLM's low-latency kernel, its
    MMA's operands swapped (Blackwell up to `SWAPPED_MAX_HEADS`, module docstring); given the
    `launch`, also more heads where FlashInfer's selection takes it (`swapped_launch`)."""
    if gpu in HOPPER:
        return False
    return heads <= SWAPPED_MAX_HEADS or (launch is not None and swapped_launch(heads, launch))


def swapped_rows(heads: int) -> int:
    """Query rows of a low-latency (swapped) CTA: 8 for 8 heads or fewer, else 16."""
    return SWAPPED_ROWS[0] if heads <= SWAPPED_ROWS[0] else SWAPPED_ROWS[1]


def decode_block_heads(gpu: str, heads: int, launch: DecodeLaunch | None = None) -> int:
    """Query rows of one MLA decode CTA on `gpu` (zoo name) for `heads` heads a GPU (module
    docstring): 64 on Hopper (FlashAttention-3's tile, fewer heads padded to it); on Blackwell
    the swapped kernel's 8 (8 heads or fewer) or 16 (`swapped`, given the `launch`), the
    high-throughput kernel's 64."""
    if gpu in HOPPER:
        return SPLIT_ROWS
    if swapped(gpu, heads, launch):
        return swapped_rows(heads)
    return BLACKWELL_TILE_ROWS


def decode_grid(block_heads: int = SPLIT_ROWS, split_keys: bool = True) -> DecodeGrid:
    """The MLA decode kernel's CTAs: `block_heads` query rows each, split or not, over 64-key
    blocks, one CTA per SM. A CTA's `rows x kv_lora` FP32 output (64 x 512: 128 KB, half the
    register file) and its latent K/V stages fill an SM: FlashAttention-3's MLA path tiles
    64 x 64 (`tile_size_fwd_sm90`, headdim 64 with headdim_v 512) and runs its
    `num_splits_heuristic` over `num_sm` CTAs, one each; FlashMLA launches one CTA per SM. So
    the CTAs beyond a whole wave of `num_sms` cost what they compute: 128 sequences of 128
    heads on 132 SMs are 256 CTAs, two waves; 256 sequences four (aiconfigurator-core's H100
    SGLang FA3 table, 2047 keys: 153 and 296 µs). Counted as the GQA kernel's 128-row CTAs two
    per SM, both were one wave. `split_keys` False: never split (cutlass_mla, module
    docstring)."""
    return DecodeGrid(plain_rows=block_heads, split_rows=block_heads, key_block=64,
                      ctas_per_sm=1, split_keys=split_keys)


def decode_kernel_work(seqs, context, heads: int, form: MlaForm, num_sms: int,
                       block_heads: int = SPLIT_ROWS) -> KernelWork:
    """The MLA decode kernel: `seqs` [dp] single-token queries of `heads` heads each against
    `context` [dp] cached tokens in all (`epsim.cost.flash.decode_work` at MLA's sizes). Each
    `block_heads` block of a sequence's heads (`decode_block_heads`) is its own CTA and does its
    own math; the cache is streamed once (module docstring)."""
    seqs = np.asarray(seqs, dtype=np.float64)
    head_dim = form.flash_head_dim
    grid = decode_grid(block_heads)
    counts = decode_counts(seqs, heads, 1, head_dim, num_sms, grid)
    work = decode_work(seqs, context, heads, 1, head_dim, num_sms, counts, form.flash_kv_ratio,
                       grid)
    return with_partials(work, seqs, heads, form)


def partial_kb(splits, seqs, heads: int, form: MlaForm) -> np.ndarray:
    """[dp] KB of a split decode's partial outputs, written by the kernel and read back by its
    combine: each of the `splits` [dp] key splits of each of the `seqs` [dp] sequences keeps
    every head's FP32 `v_dim` output and its log-sum-exp (`PARTIAL_BYTES_PER_VALUE`), twice
    (0 where the keys are not split)."""
    per_row = form.v_dim * PARTIAL_BYTES_PER_VALUE + PARTIAL_BYTES_PER_VALUE
    return 2.0 * np.asarray(splits) * np.asarray(seqs) * heads * per_row * 1e-3


def with_partials(work: KernelWork, seqs, heads: int, form: MlaForm) -> KernelWork:
    """`work` with its split partial outputs' bytes (`partial_kb`) in its memory: MLA's
    latent output (512 FP32 values a head) is as large as the cache's keys for a split of 64,
    so at 128 heads and a few sequences they, not the cache, are most of the bytes."""
    if not np.any(work.splits):
        return work
    # the constructor, not `dataclasses.replace` (its field walk cost more than the sum)
    return KernelWork(work.waves, work.splits, work.mflops,
                      work.mem_kb + partial_kb(work.splits, seqs, heads, form), work.overlap)


def kernel_params(params, gpu: str, heads: int,
                  launch: DecodeLaunch | None = None) -> dict[str, float]:
    """`params` with the rates of the kernel `gpu` runs for `heads` heads (given the `launch`,
    `swapped`): `swapped_rates`."""
    return swapped_rates(params, swapped(gpu, heads, launch))


def swapped_rates(params, swap: bool) -> dict[str, float]:
    """`params` with the swapped kernel's rates (`SWAPPED_RATES`) in `hbm_frac`'s and
    `tensor_frac`'s place where `swap` (the others' where a fit has none; its FP8 rate its own
    fraction of the FP8 peak: no `fp8_mma_ratio`), else the high-throughput kernel's."""
    out = {k: float(v) for k, v in params.items() if k not in SWAPPED_RATES.values()}
    if swap:
        out.update({k: float(params.get(v, out[k])) for k, v in SWAPPED_RATES.items()})
        out.pop(FP8_MMA_RATIO, None)
    return out


def decode_features(work: KernelWork, params, hardware: HardwareSpec, heads: int,
                    math: str = "bf16", launch: DecodeLaunch | None = None
                    ) -> tuple[LinearTerms, np.ndarray]:
    """(terms, [dp, n] design rows) of a decode kernel: `epsim.cost.mla.mla_kernel_features`;
    on Blackwell (`MLA_SWAPPED_TERMS`) the memory and math columns are the swapped kernel's
    own where it runs (`swapped`, given the `launch`), the other kernel's left 0 (and the
    reverse); the high-throughput kernel's FP8 math column at its `fp8_mma_ratio` of the peak
    (so its coefficient stays `1 / tensor_frac`)."""
    rates = kernel_params(params, hardware.name, heads, launch)
    rows = mla_kernel_features(work, rates, hardware, math)
    if hardware.name in HOPPER:
        return MLA_TERMS, rows
    if math == "fp8":
        rows[..., 4] /= float(rates.get(FP8_MMA_RATIO, 1.0))
    extra = np.zeros(rows.shape[:-1] + (2,))
    if swapped(hardware.name, heads, launch):
        rows, extra = rows.copy(), rows[..., 3:5].copy()
        rows[..., 3:5] = 0.0
    return MLA_SWAPPED_TERMS, np.concatenate([rows, extra], axis=-1)


class MlaDecodeKernel(DecodeKernel):
    """`epsim.cost.flash.DecodeKernel` over MLA's cache with its split partial outputs' bytes
    (`with_partials`, `form` the kernel's), after the FP8 cache's cast pass where the GPU runs
    one (`decode_dequantises`; `dequant` the pass's fit, None for none). `low_latency`: the
    swapped kernel Blackwell runs instead where a launch is small (`swapped_launches`), None
    where the selection never takes it."""

    def __init__(self, *args, form: MlaForm, dequant: tuple[MlaForm, dict] | None = None,
                 low_latency: MlaDecodeKernel | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.form, self.dequant, self.low_latency = form, dequant, low_latency
        self._fit: dict[bytes, bool] = {}

    def _may_swap(self, counts) -> bool:
        """Whether any busy rank's low-latency CTAs fit on the SMs (the selection's first test,
        on the sequence counts alone: most steps' do not), remembered as `counts` are."""
        key = counts.seqs.tobytes()
        found = self._fit.get(key)
        if found is None:
            if len(self._fit) >= COUNTS_KEPT:
                self._fit.clear()
            ctas = counts.seqs * math.ceil(self.heads / SWAPPED_ROWS[1])
            found = self._fit[key] = bool(((ctas > 0) & (ctas <= self.num_sms)).any())
        return found

    def us(self, seqs: np.ndarray, context: np.ndarray) -> np.ndarray:
        counts = self.counts(seqs)
        low = None
        if self.low_latency is not None and self._may_swap(counts):
            keys = np.divide(context, counts.seqs, out=np.zeros(np.shape(context)),
                             where=counts.busy)
            low = swapped_launches(self.heads, counts.seqs, keys, self.num_sms)
        if low is not None and (low | ~counts.busy).all():
            t = self.low_latency.us(seqs, context)      # every busy rank's launch is small
        else:
            work = decode_work(counts.seqs, context, self.heads, self.kv_heads, self.head_dim,
                               self.num_sms, counts, self.kv_ratio, self.grid)
            t = kernel_us(with_partials(work, counts.seqs, self.heads, self.form), self.params)
            if low is not None and low.any():
                t = np.where(low, self.low_latency.us(seqs, context), t)
        if self.dequant is None:
            return t
        form, params = self.dequant
        return t + np.where(t > 0, dequant_us(context, form, self.num_sms, params), 0.0)


def mla_decode_kernel(mla: MlaParams) -> MlaDecodeKernel:
    """The decode kernel of `decode_kernel_work` as an `epsim.cost.flash.DecodeKernel` (its
    sequence counts' terms remembered across steps: the engine's decode path and its leaps),
    with the FP8 cache's cast pass where the GPU runs one."""
    gpu = mla.hardware.name
    cast = decode_dequantises(gpu, mla.kv_bytes)
    form = kernel_form(mla.decode_form, cast)
    math_format = math_dtype(gpu, mla.kv_bytes)
    params = absolute(kernel_params(mla.decode, gpu, mla.heads), mla.hardware, math_format)
    low_latency = None
    # FlashInfer's selection (`swapped_launches`) may take the swapped kernel for more heads;
    # cutlass_mla (`one_kv_split`) is another kernel
    if gpu not in HOPPER and not swapped(gpu, mla.heads) and not mla.one_kv_split:
        low_latency = MlaDecodeKernel(
            mla.heads, 1, form.flash_head_dim, mla.num_sms,
            absolute(swapped_rates(mla.decode, True), mla.hardware, math_format),
            form.flash_kv_ratio, decode_grid(swapped_rows(mla.heads)), form=form)
    return MlaDecodeKernel(mla.heads, 1, form.flash_head_dim, mla.num_sms, params,
                           form.flash_kv_ratio,
                           decode_grid(decode_block_heads(gpu, mla.heads), not mla.one_kv_split),
                           form=form, dequant=(mla.decode_form, dict(mla.decode)) if cast else None,
                           low_latency=low_latency)
