"""Multi-head latent attention (DeepSeek-V3/R1, Kimi-K2): its kernel, its absorbed BMMs and its
projections, per DP rank and layer.

MLA caches one latent per token and layer: `kv_lora_rank` values (512) plus the shared RoPE key
(`qk_rope_head_dim`, 64), at the KV cache's dtype (`kv_cache_dtype`: 2 bytes BF16, 1 FP8), read
by every query head (one "KV head"). A layer on one rank, `h = heads / attn_tp` query heads:

    projections   q_a and kv_a fused [T, H] -> q_lora + kv_lora + rope (replicated over attention
                  TP), q_b [T, q_lora] -> h (nope + rope), o [T, h v] -> H, in the dense weights'
                  format (`epsim.cost.quant`: `any/gemm_<format>/graph`)
    decode        absorbed: `W_UK` BMM per head ([T, nope] x [nope, kv_lora], `mla_gen_pre`), the
                  kernel over the latent (queries of kv_lora + rope, values of kv_lora), `W_UV` BMM
                  per head ([T, kv_lora] x [kv_lora, v], `mla_gen_post`)
    prefill       per head, as SGLang runs it (MHA on its fa3 and trtllm_mla backends): `kv_b`
                  [keys, kv_lora] -> h (nope + v) up-projects every key's K and V from the
                  latent, then queries and keys of nope + rope, values of v. AIC's collector
                  times Hopper's kernel in the absorbed form (as decode) and Blackwell's per
                  head: the record rows follow the collector (`absorbed_prefill`)

The kernel is costed as `epsim.cost.flash` costs a flash kernel -- CTAs of 64 or 128 query rows
(the heads of one sequence swapped into rows: MLA's one KV head makes every head a row), key
splits where the CTAs cannot fill the GPU, waves, and a roofline of the busiest slot -- at
MLA's sizes: per (row, key) `2 (d_qk + d_v)` FLOPs (d_qk, d_v = 576, 512 absorbed; 192, 128 per
head), per key `d_qk x kv bytes` of cache (absorbed: the latent and its RoPE key; per head:
K and V), per (token, head) `2 (d_qk + d_v)` bytes of BF16 query and output. Its parameters
(`MLA_TERMS`) are efficiencies, fractions of the GPU's datasheet HBM and of the tensor peak of
the format its MMAs run in (BF16; FP8 in Blackwell's FP8-cache decode, `math_dtype`), so a fit
on one GPU prices another from its datasheet.

Decode on Hopper with more than 64 heads on a GPU (128 under DP attention) runs a sequence's
heads as `ceil(heads / 64)` CTAs (FlashMLA, FlashAttention-3); Blackwell's kernel (TRT-LLM's MLA
generation kernel) holds 128 heads in one (`decode_block_heads`). The blocks of a sequence run
side by side and read the same keys microseconds apart, so the cache is streamed from HBM once
(the later blocks' reads are L2 hits), and 128 heads are bound by their math: DeepSeek's FlashMLA
runs 128 heads compute-bound on H800 at 580-660 TFLOP/s (deepseek-ai/FlashMLA: its README and
docs/20250422-new-kernel-deep-dive.md, "h_q is 128 and the kernel is compute-bound", memory
traffic "~ 2 s_k d_k", one read). aiconfigurator-core's SGLang 0.5.14 `generation_mla_perf`
tables (FlashAttention-3, BF16 cache) show it across two GPUs: at 1-19 GB of cache, 16 and 64
heads stream it at 2.8-3.0 TB/s on h100_sxm and 4.0-4.4 on h200_sxm (their HBM, 3.35 and 4.8
TB/s), while the 128-head kernel's 2 x 128 x (576 + 512) FLOPs a key run at 530-540 TFLOP/s on
both (the same SMs and clocks): its time follows the math, not a second read (a re-read at a
fitted rate, fitted on h200_sxm alone before, priced h100_sxm's 128 heads 20-30 % low).

Hopper's kernel takes an FP8 cache through a pass of its own that casts it to BF16 before the
kernel streams the copy (`decode_dequantises`, `dequant_frac`); Blackwell's reads FP8 keys in
its loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from epsim.cost.flash import (SPLIT_ROWS, DecodeGrid, DecodeKernel, KernelWork, decode_counts,
                              decode_work, kernel_features, kernel_us, prefill_work)
from epsim.cost.linear import LinearTerms
from epsim.cost.quant import gemm_us, gemm_work
from epsim.cost.roofline import HBM_EFFICIENCY, TENSOR_EFFICIENCY
from epsim.profile import HOPPER
from epsim.spec.gpu import HardwareSpec

MLA_TERMS = LinearTerms(("base_us", "wave_us", "per_split_us", "hbm_frac", "tensor_frac"),
                        frozenset({"hbm_frac", "tensor_frac"}))
# Hopper's FP8-cache decode (`decode_dequantises`): the kernel's terms and the cast pass before it
MLA_DEQUANT_TERMS = LinearTerms(MLA_TERMS.params + ("dequant_frac",),
                                MLA_TERMS.inverse | {"dequant_frac"})
# an SM's cast rate at its datasheet: 4 sub-partitions x 32 lanes, one element a lane a cycle, at
# Hopper's 1.98 GHz boost clock (H100/H200 SXM), in elements per microsecond; `dequant_frac` is
# the pass's rate over it
SM_CAST_ELEMS_PER_US = 128 * 1980.0
BF16_BYTES = 2.0
# GPUs whose MLA prefill records time the absorbed form (Hopper: aiconfigurator's collector sets
# FlashAttention-3's MLA path up so); the others' (Blackwell: TRT-LLM MLA) are per head. SGLang
# itself runs a prefill per head on both (MHA): the simulator prices it so
ABSORBED_PREFILL = HOPPER
# query heads one Blackwell decode CTA holds (TRT-LLM's MLA generation kernel: all of DeepSeek's
# 128, module docstring), and the fewest rows its tile pads fewer heads to (`decode_block_heads`;
# AIC's b200_sxm table is memory-bound below 32 heads, so 8, 16 or 32 fit it alike: 12.5-12.8 %
# in-sample); Hopper's kernels hold `SPLIT_ROWS` (64)
BLACKWELL_DECODE_HEADS = 128
BLACKWELL_MIN_ROWS = 16
# DeepSeek's MLA sizes, for records that do not carry them (aiconfigurator's collectors time
# DeepSeek-V3's attention: kv_lora 512, rope 64, nope 128, v 128)
DEEPSEEK_MLA = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                "v_head_dim": 128}


@dataclass(frozen=True)
class MlaForm:
    """The shape an MLA kernel runs: head dims of its queries/keys and values, cache bytes.

    Attributes:
        qk_dim, v_dim: per head (absorbed: kv_lora + rope and kv_lora; per head: nope + rope
            and v).
        kv_bytes_per_key: bytes of cache (or up-projected K and V) read per key.
        heads_in_rows: the heads of a token share its row blocks (absorbed: one KV head); per
            head, each head's chunk fills row blocks of its own.
    """

    qk_dim: int
    v_dim: int
    kv_bytes_per_key: float
    heads_in_rows: bool = False

    @property
    def flash_head_dim(self) -> float:
        """The head_dim a flash kernel with `4 head_dim` FLOPs per (row, key) and `4 head_dim`
        bytes of query and output per (token, head) would have: `(qk_dim + v_dim) / 2`."""
        return (self.qk_dim + self.v_dim) / 2.0

    @property
    def flash_kv_ratio(self) -> float:
        """KV bytes per key over the flash kernel's (`2 x 2 x head_dim` at BF16)."""
        return self.kv_bytes_per_key / (BF16_BYTES * 2.0 * self.flash_head_dim)


def absorbed_form(kv_lora_rank: int, rope_dim: int, kv_bytes: float) -> MlaForm:
    """The absorbed kernel: queries and keys over the latent and its RoPE key, values the
    latent; the cache read once per key, shared by every head."""
    return MlaForm(kv_lora_rank + rope_dim, kv_lora_rank, (kv_lora_rank + rope_dim) * kv_bytes,
                   heads_in_rows=True)


def per_head_form(nope_dim: int, rope_dim: int, v_dim: int, kv_bytes: float) -> MlaForm:
    """The per-head (non-absorbed) prefill kernel: K of nope + rope and V of v per key."""
    return MlaForm(nope_dim + rope_dim, v_dim, (nope_dim + rope_dim + v_dim) * kv_bytes)


def absorbed_prefill(gpu: str) -> bool:
    """Whether aiconfigurator's MLA prefill records of the GPU time the absorbed form
    (`ABSORBED_PREFILL`): how a record is read, not how SGLang runs a prefill (per head)."""
    return gpu in ABSORBED_PREFILL


def mla_defaults() -> dict[str, float]:
    """Datasheet parameters of `any/mla_decode|prefill`: the flash kernels' fixed costs, the
    stated efficiencies of `epsim.cost.roofline`."""
    return {"base_us": 8.0, "wave_us": 2.0, "per_split_us": 0.5, "hbm_frac": HBM_EFFICIENCY,
            "tensor_frac": TENSOR_EFFICIENCY}


def absolute(params, hardware: HardwareSpec, math: str = "bf16") -> dict[str, float]:
    """`params` with `hbm_gbps`, `tflops` (datasheet HBM and `math`'s tensor peak x the
    fractions, `math_dtype`), the form `epsim.cost.flash.kernel_us` reads (`dequant_frac` prices
    its own pass, `dequant_us`; a `reread_hbm_ratio` of a profile fitted before the cache was
    read once is not read)."""
    out = {k: float(v) for k, v in params.items()
           if k not in ("hbm_frac", "tensor_frac", "reread_hbm_ratio", "dequant_frac")}
    out["hbm_gbps"] = float(params["hbm_frac"]) * hardware.hbm_gbps
    out["tflops"] = float(params["tensor_frac"]) * hardware.tensor_tflops(math)
    return out


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


def decode_block_heads(gpu: str, heads: int = BLACKWELL_DECODE_HEADS) -> int:
    """Query rows of one MLA decode CTA on `gpu` (zoo name) for `heads` heads a GPU: 64 on
    Hopper (FlashAttention-3's 64-row tile, fewer heads padded to it); on the others (Blackwell,
    module docstring) `heads` rounded up to a power of two, from `BLACKWELL_MIN_ROWS` to 128:
    TRT-LLM's generation kernels pick their query tile by the heads (its swapped-MMA tiles for
    few heads), so 16 heads do not pay 128 rows' math (aiconfigurator-core's b200_sxm table,
    BF16 cache, 16.8M keys: 16 heads 3.4 ms at 5.7 TB/s, memory-bound; 128 rows' math takes 128
    heads 4.6 ms)."""
    if gpu in HOPPER:
        return SPLIT_ROWS
    rows = BLACKWELL_MIN_ROWS
    while rows < min(heads, BLACKWELL_DECODE_HEADS):
        rows *= 2
    return rows


def decode_grid(block_heads: int = SPLIT_ROWS) -> DecodeGrid:
    """The MLA decode kernel's CTAs: `block_heads` query rows each, split or not, over 64-key
    blocks, one CTA per SM. A CTA's `rows x kv_lora` FP32 output (64 x 512: 128 KB, half the
    register file) and its latent K/V stages fill an SM: FlashAttention-3's MLA path tiles
    64 x 64 (`tile_size_fwd_sm90`, headdim 64 with headdim_v 512) and runs its
    `num_splits_heuristic` over `num_sm` CTAs, one each; FlashMLA launches one CTA per SM. So
    the CTAs beyond a whole wave of `num_sms` cost what they compute: 128 sequences of 128
    heads on 132 SMs are 256 CTAs, two waves; 256 sequences four (aiconfigurator-core's H100
    SGLang FA3 table, 2047 keys: 153 and 296 µs). Counted as the GQA kernel's 128-row CTAs two
    per SM, both were one wave."""
    return DecodeGrid(plain_rows=block_heads, split_rows=block_heads, key_block=64,
                      ctas_per_sm=1)


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
    return decode_work(seqs, context, heads, 1, head_dim, num_sms, counts, form.flash_kv_ratio,
                       grid)


def prefill_kernel_work(tokens, context, seqs, heads: int, form: MlaForm,
                        num_sms: int) -> KernelWork:
    """The causal MLA prefill kernel: `seqs` [dp] chunks of `tokens` [dp] new tokens whose
    keys number `context` [dp] in all (`epsim.cost.flash.prefill_work` at MLA's sizes: its
    CTAs, waves and bytes). Its math:
      per head   the flash kernel's: whole 128 x 128 (query rows, keys) tiles under the causal
                 diagonal, each head's chunk in row blocks of its own, the busiest slot's
                 share. A chunk shorter than a tile pays the whole tile (aiconfigurator's B200
                 TRT-LLM MLA prefill at 128 heads: 1-4 TFLOP/s of causal pairs at 16-token
                 chunks, 250 at 256, 1100-1300 at 4096-16384; counted in tiles 90-440, 380,
                 1100-1300)
      absorbed   the causal pairs' own FLOPs: a token's heads share its row blocks (MLA's one
                 KV head), so short chunks still fill the rows"""
    tokens = np.asarray(tokens, dtype=np.float64)
    context = np.asarray(context, dtype=np.float64)
    seqs = np.maximum(np.asarray(seqs, dtype=np.float64), (tokens > 0).astype(np.float64))
    work = prefill_work(tokens, context, seqs, heads, 1, form.flash_head_dim, num_sms,
                        form.flash_kv_ratio)
    if not form.heads_in_rows:
        return work
    chunk = np.divide(tokens, seqs, out=np.zeros_like(tokens), where=seqs > 0)
    prefix = np.maximum(np.divide(context, seqs, out=np.zeros_like(tokens), where=seqs > 0)
                        - chunk, 0.0)
    pairs = seqs * (chunk * prefix + chunk * (chunk + 1.0) / 2.0)
    return replace(work, mflops=pairs * heads * 2.0 * (form.qk_dim + form.v_dim) * 1e-6)


def mla_kernel_us(work: KernelWork, params, hardware: HardwareSpec) -> np.ndarray:
    """[dp] microseconds of an MLA kernel (`MLA_TERMS` fractions, BF16 math); 0 without work."""
    return kernel_us(work, absolute(params, hardware))


def mla_kernel_features(work: KernelWork, params, hardware: HardwareSpec,
                        math: str = "bf16") -> np.ndarray:
    """[dp, 5] design rows in `MLA_TERMS` order: `epsim.cost.flash.kernel_features` with the
    memory and math columns as µs at the datasheet HBM rate and `math`'s tensor peak
    (`math_dtype`)."""
    rows = kernel_features(work, absolute(params, hardware, math))
    rows[..., 3] /= hardware.hbm_gbps
    rows[..., 4] /= hardware.tensor_tflops(math)
    return rows


# -- one MLA layer on a rank: projections, absorbed BMMs, kernel (the simulator's pricing) --------
@dataclass(frozen=True)
class MlaParams:
    """What one rank's MLA layer reads (`epsim.cost.resolve`).

    Attributes:
        decode, prefill: the kernels' fraction parameters (`MLA_TERMS`) over `mla_defaults`.
        bmm, gemm: the absorbed BMMs' and the projections' (`epsim.cost.quant.GEMM_TERMS`).
        bmm_format, gemm_format: their weight formats (the BMMs run FP8 for FP8 checkpoints).
        keys: part ("decode", "prefill", "bmm", "projections") -> the profile component that
            gave its parameters, "" for datasheet values.
        hardware, num_sms: the GPU.
        heads: query heads on the rank (`num_attention_heads / attn_tp`).
        hidden_size, q_lora_rank, kv_lora_rank, rope_dim, nope_dim, v_dim: the model's sizes.
        kv_bytes: bytes of one cache element (`kv_cache_dtype`).
        absorbed_prefill: price the prefill in the absorbed form (False: per head, what SGLang
            runs; the records of Hopper's kernel are absorbed, `ABSORBED_PREFILL`).
    """

    decode: Mapping[str, float]
    prefill: Mapping[str, float]
    bmm: Mapping[str, float]
    gemm: Mapping[str, float]
    bmm_format: str
    gemm_format: str
    keys: Mapping[str, str]
    hardware: HardwareSpec
    num_sms: int
    heads: int
    hidden_size: int
    q_lora_rank: int
    kv_lora_rank: int
    rope_dim: int
    nope_dim: int
    v_dim: int
    kv_bytes: float
    absorbed_prefill: bool

    @property
    def decode_form(self) -> MlaForm:
        return absorbed_form(self.kv_lora_rank, self.rope_dim, self.kv_bytes)

    @property
    def prefill_form(self) -> MlaForm:
        if self.absorbed_prefill:
            return self.decode_form
        return per_head_form(self.nope_dim, self.rope_dim, self.v_dim, self.kv_bytes)


class MlaDecodeKernel(DecodeKernel):
    """`epsim.cost.flash.DecodeKernel` over MLA's cache, after the FP8 cache's cast pass where
    the GPU runs one (`decode_dequantises`; `dequant` the pass's fit, None for none)."""

    def __init__(self, *args, dequant: tuple[MlaForm, dict] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.dequant = dequant

    def us(self, seqs: np.ndarray, context: np.ndarray) -> np.ndarray:
        t = super().us(seqs, context)
        if self.dequant is None:
            return t
        form, params = self.dequant
        return t + np.where(t > 0, dequant_us(context, form, self.num_sms, params), 0.0)


def mla_decode_kernel(mla: MlaParams) -> MlaDecodeKernel:
    """The decode kernel of `decode_kernel_work` as an `epsim.cost.flash.DecodeKernel` (its
    sequence counts' terms remembered across steps: the engine's decode path and its leaps),
    with the FP8 cache's cast pass where the GPU runs one."""
    cast = decode_dequantises(mla.hardware.name, mla.kv_bytes)
    form = kernel_form(mla.decode_form, cast)
    gpu = mla.hardware.name
    return MlaDecodeKernel(mla.heads, 1, form.flash_head_dim, mla.num_sms,
                           absolute(mla.decode, mla.hardware, math_dtype(gpu, mla.kv_bytes)),
                           form.flash_kv_ratio, decode_grid(decode_block_heads(gpu, mla.heads)),
                           dequant=(mla.decode_form, dict(mla.decode)) if cast else None)


def _gemm(m, n: int, k: int, mla: MlaParams, batch: int = 1, bmm: bool = False) -> np.ndarray:
    fmt = mla.bmm_format if bmm else mla.gemm_format
    return gemm_us(gemm_work(m, n, k, fmt, mla.num_sms, batch), mla.bmm if bmm else mla.gemm,
                   mla.hardware, fmt)


def mla_token_us(tokens, decode_tokens, mla: MlaParams) -> np.ndarray:
    """[dp] the parts of a layer that follow its tokens alone: the projections of every token
    and the absorbed BMMs of the decode tokens (`tokens`, `decode_tokens` [dp])."""
    h, heads = mla.hidden_size, mla.heads
    # SGLang fuses q_a and kv_a into one GEMM (`fused_qkv_a_proj_with_mqa`), replicated over
    # attention TP; q_b (or q without a q LoRA) and o are split by heads
    t = (_gemm(tokens, mla.q_lora_rank + mla.kv_lora_rank + mla.rope_dim, h, mla)
         + _gemm(tokens, heads * (mla.nope_dim + mla.rope_dim), mla.q_lora_rank or h, mla)
         + _gemm(tokens, h, heads * mla.v_dim, mla))
    return t + _bmms(decode_tokens, mla)


def mla_core_token_us(tokens, decode_tokens, mla: MlaParams) -> np.ndarray:
    """[dp] the part of `mla_token_us` SGLang runs after the kernel, in `op_core`
    (deepseek_v2.py:1062-1064 in 0.4.7): `o_proj` and the decode tokens' absorbed `W_UV` BMM
    (two-batch overlap's stages, `epsim.cost.tbo`)."""
    return (_gemm(tokens, mla.hidden_size, mla.heads * mla.v_dim, mla)
            + _gemm(decode_tokens, mla.v_dim, mla.kv_lora_rank, mla, mla.heads, bmm=True))


def _bmms(tokens, mla: MlaParams) -> np.ndarray:
    """[dp] the absorbed `W_UK` and `W_UV` BMMs of `tokens`, one GEMM per head each."""
    return (_gemm(tokens, mla.kv_lora_rank, mla.nope_dim, mla, mla.heads, bmm=True)
            + _gemm(tokens, mla.v_dim, mla.kv_lora_rank, mla, mla.heads, bmm=True))


def mla_prefill_us(batch, mla: MlaParams) -> np.ndarray:
    """[dp] a step's prefill chunks: the absorbed BMMs and kernel (absorbed form), or the
    up-projection of every key's K and V from the latent (`kv_b`) and the per-head kernel."""
    tokens, context = batch.prefill_tokens, batch.prefill_context
    form = mla.prefill_form
    if mla.absorbed_prefill:
        extra = _bmms(tokens, mla)
    else:
        extra = _gemm(context, mla.heads * (mla.nope_dim + mla.v_dim), mla.kv_lora_rank, mla)
    work = prefill_kernel_work(tokens, context, batch.prefill_chunks, mla.heads, form, mla.num_sms)
    return extra + mla_kernel_us(work, mla.prefill, mla.hardware)


def mla_attention_us(batch, mla: MlaParams, decode_kernel: DecodeKernel,
                     token_us: np.ndarray | None = None) -> np.ndarray:
    """[dp] one MLA layer per rank (module docstring): `mla_token_us` (or `token_us`, the
    caller's of these tokens), the decode tokens' kernel over their contexts, the prefill
    chunks'; 0 for an idle rank.

    Args:
        batch: an `epsim.cost.attention.BatchCounts`.
        decode_kernel: `mla_decode_kernel(mla)` (kept by the caller across steps)."""
    t = mla_token_us(batch.tokens, batch.decode_tokens, mla) if token_us is None else token_us
    t = t + decode_kernel.us(batch.decode_tokens, batch.decode_context)
    if batch.phase == "prefill":
        t = t + mla_prefill_us(batch, mla)
    return np.where(batch.tokens > 0, t, 0.0)
