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

from dataclasses import replace

import numpy as np

from epsim.cost.flash import (SPLIT_ROWS, DecodeGrid, DecodeKernel, KernelWork, decode_counts,
                              decode_work, kernel_us)
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


def swapped(gpu: str, heads: int) -> bool:
    """Whether `gpu`'s MLA decode of `heads` heads a GPU runs TRT-LLM's low-latency kernel, its
    MMA's operands swapped (Blackwell up to `SWAPPED_MAX_HEADS`, module docstring)."""
    return gpu not in HOPPER and heads <= SWAPPED_MAX_HEADS


def decode_block_heads(gpu: str, heads: int) -> int:
    """Query rows of one MLA decode CTA on `gpu` (zoo name) for `heads` heads a GPU (module
    docstring): 64 on Hopper (FlashAttention-3's tile, fewer heads padded to it); on Blackwell
    the swapped kernel's 8 (8 heads or fewer) or 16, the high-throughput kernel's 64."""
    if gpu in HOPPER:
        return SPLIT_ROWS
    if swapped(gpu, heads):
        return SWAPPED_ROWS[0] if heads <= SWAPPED_ROWS[0] else SWAPPED_ROWS[1]
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


def kernel_params(params, gpu: str, heads: int) -> dict[str, float]:
    """`params` with the rates of the kernel `gpu` runs for `heads` heads: the swapped
    kernel's (`SWAPPED_RATES`) in `hbm_frac`'s and `tensor_frac`'s place (the others' where a
    fit has none)."""
    out = {k: float(v) for k, v in params.items() if k not in SWAPPED_RATES.values()}
    if swapped(gpu, heads):
        out.update({k: float(params.get(v, out[k])) for k, v in SWAPPED_RATES.items()})
    return out


def decode_features(work: KernelWork, params, hardware: HardwareSpec, heads: int,
                    math: str = "bf16") -> tuple[LinearTerms, np.ndarray]:
    """(terms, [dp, n] design rows) of a decode kernel: `epsim.cost.mla.mla_kernel_features`;
    on Blackwell (`MLA_SWAPPED_TERMS`) the memory and math columns are the swapped kernel's
    own where it runs, the other kernel's left 0 (and the reverse)."""
    rows = mla_kernel_features(work, kernel_params(params, hardware.name, heads), hardware, math)
    if hardware.name in HOPPER:
        return MLA_TERMS, rows
    extra = np.zeros(rows.shape[:-1] + (2,))
    if swapped(hardware.name, heads):
        rows, extra = rows.copy(), rows[..., 3:5].copy()
        rows[..., 3:5] = 0.0
    return MLA_SWAPPED_TERMS, np.concatenate([rows, extra], axis=-1)


class MlaDecodeKernel(DecodeKernel):
    """`epsim.cost.flash.DecodeKernel` over MLA's cache with its split partial outputs' bytes
    (`with_partials`, `form` the kernel's), after the FP8 cache's cast pass where the GPU runs
    one (`decode_dequantises`; `dequant` the pass's fit, None for none)."""

    def __init__(self, *args, form: MlaForm, dequant: tuple[MlaForm, dict] | None = None,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.form, self.dequant = form, dequant

    def us(self, seqs: np.ndarray, context: np.ndarray) -> np.ndarray:
        counts = self.counts(seqs)
        work = decode_work(counts.seqs, context, self.heads, self.kv_heads, self.head_dim,
                           self.num_sms, counts, self.kv_ratio, self.grid)
        t = kernel_us(with_partials(work, counts.seqs, self.heads, self.form), self.params)
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
    params = absolute(kernel_params(mla.decode, gpu, mla.heads), mla.hardware,
                      math_dtype(gpu, mla.kv_bytes))
    return MlaDecodeKernel(mla.heads, 1, form.flash_head_dim, mla.num_sms, params,
                           form.flash_kv_ratio,
                           decode_grid(decode_block_heads(gpu, mla.heads), not mla.one_kv_split),
                           form=form, dequant=(mla.decode_form, dict(mla.decode)) if cast else None)
