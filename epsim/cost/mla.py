"""Multi-head latent attention (DeepSeek-V3/R1, Kimi-K2): its kernel, its absorbed BMMs and its
projections, per DP rank and layer.

MLA caches one latent per token and layer: `kv_lora_rank` values (512) plus the shared RoPE key
(`qk_rope_head_dim`, 64), at the KV cache's dtype (`kv_cache_dtype`: 2 bytes BF16, 1 FP8), read
by every query head (one "KV head"). A layer on one rank, `h = heads / attn_tp` query heads:

    projections   q_a and kv_a fused [T, H] -> q_lora + kv_lora + rope (replicated over attention
                  TP), q_b [T, q_lora] -> h (nope + rope), o [T, h v] -> H, in the dense weights'
                  format (`epsim.cost.quant`: `any/gemm_<format>/graph`); q_b alone block-FP8
                  where SGLang's `SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN` quantises it at load
                  (`NVFP4_CKPT_FP8_ATTN_QUANT_MODULES = ["q_b_proj"]`: `q_b_gemm`)
    decode        absorbed: `W_UK` BMM per head ([T, nope] x [nope, kv_lora], `mla_gen_pre`), the
                  kernel over the latent (queries of kv_lora + rope, values of kv_lora), `W_UV` BMM
                  per head ([T, kv_lora] x [kv_lora, v], `mla_gen_post`)
    prefill       per head, as SGLang runs it (MHA on its fa3 and trtllm_mla backends): `kv_b`
                  [keys, kv_lora] -> h (nope + v) up-projects every key's K and V from the
                  latent, then queries and keys of nope + rope, values of v. AIC's collector
                  times Hopper's kernel in the absorbed form (as decode) and Blackwell's per
                  head: the record rows follow the collector (`absorbed_prefill`)

The kernel is costed as `epsim.cost.flash` costs a flash kernel -- CTAs of query rows
(the heads of one sequence swapped into rows: MLA's one KV head makes every head a row), key
splits where the CTAs cannot fill the GPU, waves, and a roofline of the busiest slot -- at
MLA's sizes: per (row, key) `2 (d_qk + d_v)` FLOPs (d_qk, d_v = 576, 512 absorbed; 192, 128 per
head), per key `d_qk x kv bytes` of cache (absorbed: the latent and its RoPE key; per head:
K and V), per (token, head) `2 (d_qk + d_v)` bytes of BF16 query and output. Its parameters
(`MLA_TERMS`) are efficiencies, fractions of the GPU's datasheet HBM and of the tensor peak of
the format its MMAs run in, so a fit on one GPU prices another from its datasheet. Hopper's
absorbed prefill is bound on long chunks by its CTAs' key tiles re-read from L2, a stream with
a fitted rate of its own (`l2_gbps`, `MLA_PREFILL_TERMS`; `epsim.cost.mla_l2`). Blackwell's
per-head prefill is FlashInfer's TRT-LLM-gen ragged kernel (`epsim.cost.mla_ragged`): 256-row
CTAs, one an SM, each tile its MMAs at the cache's format plus the exponentials its softmax
cannot hide on the SMs' MUFU, the bytes streamed beside the tiles.

The decode kernel's tiling of the heads into CTAs on each GPU, the format its MMAs run in and
Hopper's cast pass over an FP8 cache are `epsim.cost.mla_decode`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from epsim.cost.experts import num_sms
from epsim.cost.flash import DecodeKernel, KernelWork, kernel_features, kernel_us, prefill_work
from epsim.cost.linear import LinearTerms
from epsim.cost.mla_ragged import RaggedWork, ragged, ragged_features, ragged_us, ragged_work
from epsim.cost.mla_bmm import bmm_us, bmm_work
from epsim.cost.mla_l2 import (ABSORBED_KEYS, ABSORBED_ROWS, BF16_BYTES, PrefillWork,
                               absorbed_tiles, fold_l2, l2_column, query_us)
from epsim.cost.dense_gemm import gemm_us, gemm_work
from epsim.cost import trtllm_fp8_gemm
from epsim.cost.roofline import HBM_EFFICIENCY, TENSOR_EFFICIENCY
from epsim.cost.trtllm_fp8_gemm import TrtllmFp8Gemm
from epsim.profile import HOPPER
from epsim.spec.gpu import HardwareSpec
from epsim.zoo import get_hardware, hardware_names

MLA_TERMS = LinearTerms(("base_us", "wave_us", "per_split_us", "hbm_frac", "tensor_frac"),
                        frozenset({"hbm_frac", "tensor_frac"}))
# the absorbed prefill's: and the L2 stream of its CTAs' key tiles (`epsim.cost.mla_l2`)
MLA_PREFILL_TERMS = LinearTerms(MLA_TERMS.params + ("l2_gbps",), MLA_TERMS.inverse | {"l2_gbps"})
# the format SGLang quantises an NVFP4 checkpoint's BF16 `q_b_proj` to at load under
# `SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN` (`Fp8Config(weight_block_size=[128, 128])`)
Q_B_FP8_FORMAT = "fp8_block"
# GPUs whose MLA prefill records time the absorbed form (Hopper: aiconfigurator's collector sets
# FlashAttention-3's MLA path up so); the others' (Blackwell: TRT-LLM MLA) are per head. SGLang
# itself runs a prefill per head on both (MHA): the simulator prices it so
ABSORBED_PREFILL = HOPPER
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
            "tensor_frac": TENSOR_EFFICIENCY, "swapped_hbm_frac": HBM_EFFICIENCY,
            "swapped_frac": TENSOR_EFFICIENCY}


def absolute(params, hardware: HardwareSpec, math: str = "bf16") -> dict[str, float]:
    """`params` with `hbm_gbps`, `tflops` (datasheet HBM and `math`'s tensor peak x the
    fractions, `math_dtype`; FP8 math also x `fp8_mma_ratio` where a fit holds one,
    `epsim.cost.mla_decode`), the form `epsim.cost.flash.kernel_us` reads (`dequant_frac`
    prices its own pass, `dequant_us`; a `reread_hbm_ratio` of a profile fitted before the cache
    was read once is not read)."""
    out = {k: float(v) for k, v in params.items()
           if k not in ("hbm_frac", "tensor_frac", "swapped_hbm_frac", "swapped_frac",
                        "reread_hbm_ratio", "dequant_frac", "fp8_mma_ratio")}
    out["hbm_gbps"] = float(params["hbm_frac"]) * hardware.hbm_gbps
    out["tflops"] = float(params["tensor_frac"]) * hardware.tensor_tflops(math)
    if math == "fp8":
        out["tflops"] *= float(params.get("fp8_mma_ratio", 1.0))
    return out


def prefill_kernel_work(tokens, context, seqs, heads: int, form: MlaForm,
                        num_sms: int, gpu: str = "") -> PrefillWork:
    """The causal MLA prefill kernel: `seqs` [dp] chunks of `tokens` [dp] new tokens whose
    keys number `context` [dp] in all (`epsim.cost.flash.prefill_work` at MLA's sizes: its
    CTAs, waves and bytes), with the L2 stream of its CTAs' key tiles (`epsim.cost.mla_l2`:
    `l2_kb`, every tile's keys at BF16); on `gpu` a Blackwell,
    the per-head form is the ragged kernel's `RaggedWork` (`epsim.cost.mla_ragged`). Its math:
      per head   the flash kernel's: whole 128 x 128 (query rows, keys) tiles under the causal
                 diagonal, each head's chunk in row blocks of its own, the busiest slot's
                 share. A chunk shorter than a tile pays the whole tile (aiconfigurator's B200
                 TRT-LLM MLA prefill at 128 heads: 1-4 TFLOP/s of causal pairs at 16-token
                 chunks, 250 at 256, 1100-1300 at 4096-16384; counted in tiles 90-440, 380,
                 1100-1300)
      absorbed   FlashAttention-3's MLA tiles (`epsim.cost.mla_l2.absorbed_tiles`): CTAs of 64
                 (token, head) rows, a token's heads side by side, one an SM, each running its
                 64-key tiles up to its last token; the busiest SM's tiles on one side of the
                 max, the HBM and L2 streams on the other, the waves added to it (a CTA's
                 fixed cost: an SM starting or ending a CTA streams no key tiles; with
                 the waves inside the max, `overlap`, the fit on chunks up to 1024 tokens read
                 a 4.4 TB/s L2 rate where 2048-16384-token chunks stream 5.1, and priced them
                 up to 15-22 % long). Counted as the causal pairs' own FLOPs with the waves
                 outside the max, the fit priced 4096-16384 20-30 % long on H100 and H200 (its
                 tensor rate fitted 0.50 for a kernel whose long chunks run at 0.61): short
                 chunks' tiles run faster than long ones' (docs/model.md 5d)
    The L2 stream carries the key tiles alone; the queries are read from HBM beside the max
    (`PrefillWork.q_kb`, `epsim.cost.mla_l2.query_us`), the outputs and keys on its HBM side."""
    tokens = np.asarray(tokens, dtype=np.float64)
    context = np.asarray(context, dtype=np.float64)
    seqs = np.maximum(np.asarray(seqs, dtype=np.float64), (tokens > 0).astype(np.float64))
    work = prefill_work(tokens, context, seqs, heads, 1, form.flash_head_dim, num_sms,
                        form.flash_kv_ratio)
    busy = tokens > 0
    if not form.heads_in_rows and ragged(gpu):      # Blackwell: `epsim.cost.mla_ragged`
        return ragged_work(tokens, context, seqs, heads, form.qk_dim, form.v_dim,
                           form.kv_bytes_per_key / (form.qk_dim + form.v_dim), num_sms, gpu)
    if not form.heads_in_rows:
        # a 128-row tile of one head reads 128 keys' K and V at BF16
        tile_mflops = 128.0 * 128.0 * 2.0 * (form.qk_dim + form.v_dim) * 1e-6
        key_kb = 128.0 * (form.qk_dim + form.v_dim) * BF16_BYTES * 1e-3
        return PrefillWork(work.waves, work.splits, work.mflops, work.mem_kb,
                           l2_kb=np.where(busy, work.mflops / tile_mflops * key_kb, 0.0))
    chunk = np.divide(tokens, seqs, out=np.zeros_like(tokens), where=seqs > 0)
    prefix = np.maximum(np.divide(context, seqs, out=np.zeros_like(tokens), where=seqs > 0)
                        - chunk, 0.0)
    tiles = absorbed_tiles(chunk, prefix, seqs, heads, num_sms)
    tile_flops = ABSORBED_ROWS * ABSORBED_KEYS * 2.0 * (form.qk_dim + form.v_dim)
    # a tile's keys: the latent and its RoPE key (the values are the latent's first kv_lora)
    key_kb = ABSORBED_KEYS * form.qk_dim * BF16_BYTES * 1e-3
    # every (token, head) row's query, Q and Qv at BF16, read from HBM between its CTA's tiles
    # (`epsim.cost.mla_l2.query_us`), off the max's HBM side (outputs and keys)
    q_kb = np.where(busy, tokens * heads * form.qk_dim * BF16_BYTES * 1e-3, 0.0)
    return PrefillWork(np.where(busy, np.ceil(tiles.ctas / num_sms), 0.0), work.splits,
                       np.where(busy, tiles.busiest * tile_flops * num_sms * 1e-6, 0.0),
                       work.mem_kb - q_kb, l2_kb=np.where(busy, tiles.total * key_kb, 0.0),
                       q_kb=q_kb)


def mla_kernel_us(work: KernelWork, params, hardware: HardwareSpec) -> np.ndarray:
    """[dp] microseconds of an MLA kernel (`MLA_TERMS` fractions, BF16 math; a prefill's L2
    stream at `l2_gbps` where fitted, `epsim.cost.mla_l2`); 0 without work."""
    p = absolute(params, hardware)
    if isinstance(work, RaggedWork):
        return ragged_us(work, p)
    return kernel_us(fold_l2(work, params, p["hbm_gbps"]), p) + query_us(work, p["hbm_gbps"])


def mla_kernel_features(work: KernelWork, params, hardware: HardwareSpec,
                        math: str = "bf16") -> np.ndarray:
    """[dp, 5] design rows in `MLA_TERMS` order: `epsim.cost.flash.kernel_features` with the
    memory and math columns as µs at the datasheet HBM rate and `math`'s tensor peak
    (`math_dtype`); [dp, 6] in `MLA_PREFILL_TERMS` order for a work with an L2 stream
    (`PrefillWork.l2_kb`: its KB)."""
    p = absolute(params, hardware, math)
    rows = ragged_features(work) if isinstance(work, RaggedWork) else \
        kernel_features(fold_l2(work, params, p["hbm_gbps"]), p)
    rows[..., 3] /= hardware.hbm_gbps
    rows[..., 4] /= hardware.tensor_tflops(math)
    if getattr(work, "l2_kb", None) is None:
        return rows
    rows = l2_column(rows, work, params, p["hbm_gbps"])
    rows[..., 3] += query_us(work, hardware.hbm_gbps)   # the queries, beside the max
    return rows


def sustained_frac(params, gpu: str, heads: int = 128, tokens: float = 16384.0) -> float:
    """The causal pairs' FLOPs of one long prefill chunk (`tokens` tokens, `heads` heads) over
    its priced time on `gpu`, as a fraction of the BF16 peak: the rate the prefill kernel
    sustains, whichever of its SMs' tiles and its L2 stream binds (Hopper's absorbed kernel;
    `tensor_frac` where no L2 stream was fitted), or its tiles' MMAs, exponentials and bytes
    (Blackwell's per-head ragged kernel, `epsim.cost.mla_ragged`)."""
    if ragged(gpu):                 # Blackwell's per-head kernel: its tiles' MMAs and exps
        form = per_head_form(DEEPSEEK_MLA["qk_nope_head_dim"], DEEPSEEK_MLA["qk_rope_head_dim"],
                             DEEPSEEK_MLA["v_head_dim"], BF16_BYTES)
    elif not params.get("l2_gbps") or gpu not in hardware_names():
        return float(params["tensor_frac"])
    else:
        form = absorbed_form(DEEPSEEK_MLA["kv_lora_rank"], DEEPSEEK_MLA["qk_rope_head_dim"],
                             BF16_BYTES)
    hardware, params, one = get_hardware(gpu), {**mla_defaults(), **params}, np.array([tokens])
    work = prefill_kernel_work(one, one, np.ones(1), heads, form, num_sms(gpu), gpu)
    pairs_mflops = tokens * (tokens + 1.0) / 2.0 * heads * 2.0 * (form.qk_dim + form.v_dim) * 1e-6
    us = float(mla_kernel_us(work, params, hardware)[0])
    return pairs_mflops / us / hardware.tensor_tflops("bf16")


def transferred(params, fit_gpu: str, gpu: str) -> dict[str, float]:
    """A prefill fit's parameters on `gpu`: as they are on a GPU of the fit's L2 (Hopper's
    H100/H200/H800); elsewhere the measured L2 rate says nothing of its L2, so the fit travels
    as the fraction of the tensor peak a long chunk sustained (`sustained_frac`), as the other
    MLA fits travel (the system axis: H200's fit judging B200's records)."""
    if not params.get("l2_gbps") or (fit_gpu in HOPPER and gpu in HOPPER):
        return dict(params)
    return {**{k: v for k, v in params.items() if k != "l2_gbps"},
            "tensor_frac": sustained_frac(params, fit_gpu)}


# -- one MLA layer on a rank: projections, absorbed BMMs, kernel (the simulator's pricing) --------
@dataclass(frozen=True)
class MlaParams:
    """What one rank's MLA layer reads (`epsim.cost.resolve`).

    Attributes:
        decode, prefill: the kernels' fraction parameters (`MLA_TERMS`) over `mla_defaults`.
        bmm, gemm: the absorbed BMMs' (`epsim.cost.mla_bmm.BMM_TERMS`) and the projections'
            (`epsim.cost.dense_gemm.GEMM_TERMS`).
        bmm_format, gemm_format: their weight formats (the BMMs run FP8 for a per-tensor FP8
            checkpoint; BF16 for a block-FP8 one, whose `kv_b_proj` SGLang dequantises at load).
        keys: part ("decode", "prefill", "bmm", "projections") -> the profile component that
            gave its parameters, "" for datasheet values.
        hardware, num_sms: the GPU.
        heads: query heads on the rank (`num_attention_heads / attn_tp`).
        hidden_size, q_lora_rank, kv_lora_rank, rope_dim, nope_dim, v_dim: the model's sizes.
        kv_bytes: bytes of one cache element (`kv_cache_dtype`).
        absorbed_prefill: price the prefill in the absorbed form (False: per head, what SGLang
            runs; the records of Hopper's kernel are absorbed, `ABSORBED_PREFILL`).
        fp8_gemm: the projections (and `kv_b`) on FlashInfer's trtllm block-FP8 GEMM
            (`epsim.cost.trtllm_fp8_gemm`), or None (the `gemm` fit).
        q_b_gemm: the block-FP8 GEMM fit `q_b` runs at where an NVFP4 checkpoint's BF16
            `q_b_proj` is quantised at load (`DeploymentSpec.nvfp4_fp8_q_b`), or None (`gemm`).
        one_kv_split: the decode kernel never splits a sequence's keys (SGLang's cutlass_mla,
            `DeploymentSpec.mla_kv_splits` "one"; `epsim.cost.mla_decode`).
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
    fp8_gemm: TrtllmFp8Gemm | None = None
    q_b_gemm: Mapping[str, float] | None = None
    one_kv_split: bool = False

    @property
    def decode_form(self) -> MlaForm:
        return absorbed_form(self.kv_lora_rank, self.rope_dim, self.kv_bytes)

    @property
    def prefill_form(self) -> MlaForm:
        if self.absorbed_prefill:
            return self.decode_form
        return per_head_form(self.nope_dim, self.rope_dim, self.v_dim, self.kv_bytes)


def _gemm(m, n: int, k: int, mla: MlaParams, batch: int = 1, bmm: bool = False) -> np.ndarray:
    if bmm:                                 # the absorbed BMMs: `epsim.cost.mla_bmm`
        return bmm_us(bmm_work(m, n, k, batch, mla.bmm_format), mla.bmm, mla.hardware,
                      mla.bmm_format)
    if mla.fp8_gemm is not None:            # FlashInfer's trtllm block-FP8 GEMM
        return trtllm_fp8_gemm.gemm_us(m, n, k, mla.fp8_gemm)
    return gemm_us(gemm_work(m, n, k, mla.gemm_format, mla.num_sms, batch, mla.hardware.name),
                   mla.gemm, mla.hardware, mla.gemm_format)


def mla_token_us(tokens, decode_tokens, mla: MlaParams) -> np.ndarray:
    """[dp] the parts of a layer that follow its tokens alone: the projections of every token
    and the absorbed BMMs of the decode tokens (`tokens`, `decode_tokens` [dp])."""
    h, heads = mla.hidden_size, mla.heads
    # SGLang fuses q_a and kv_a into one GEMM (`fused_qkv_a_proj_with_mqa`), replicated over
    # attention TP; q_b (or q without a q LoRA) and o are split by heads
    q_b = mla if mla.q_b_gemm is None else replace(mla, gemm=mla.q_b_gemm,
                                                   gemm_format=Q_B_FP8_FORMAT, fp8_gemm=None)
    t = (_gemm(tokens, mla.q_lora_rank + mla.kv_lora_rank + mla.rope_dim, h, mla)
         + _gemm(tokens, heads * (mla.nope_dim + mla.rope_dim), mla.q_lora_rank or h, q_b)
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
    work = prefill_kernel_work(tokens, context, batch.prefill_chunks, mla.heads, form, mla.num_sms,
                               mla.hardware.name)
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
