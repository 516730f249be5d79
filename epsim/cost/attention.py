"""Attention and the dense parts of a step, per DP rank, from datasheet figures.

Each is a roofline (`epsim.cost.roofline`): weight bytes + KV-cache bytes against FLOPs.
Attention of one layer on one rank:

    bytes = attention_weights + kv_bytes * (decode_context + prefill_context
            + new tokens written)
    flops = 2 * attention_params * tokens + core_flops_per_pair * (decode_context + prefill_pairs)

where `decode_context` sums the context lengths of the decode tokens (each reads its whole KV
cache) and `prefill_pairs` counts causal (query, key) pairs of the prefill chunks (the
quadratic term); `any/attention` holds its datasheet x efficiency parameters. Where the profile
holds single-GPU kernel fits (`any/attention_decode/graph`, `any/attention_prefill/graph`),
`measured_attention_us` replaces it: the projections as a dense GEMM plus the fitted kernels.
The LM head is a GEMM roofline on the sampled rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from epsim.cost.derived import derived
from epsim.cost.flash import BYTES, FA2_GRIDS, DecodeKernel, FlashGrids, kernel_us, prefill_work
from epsim.cost.roofline import TENSOR_EFFICIENCY, roofline_us
from epsim.fast_init import fast_init
from epsim.spec.hardware import HardwareSpec
from epsim.spec.model import ModelSpec
from epsim.spec.quant import kv_bytes_per_element

ATTENTION_HBM_EFFICIENCY = 0.7       # paged KV reads reach less than a streaming copy


@fast_init
@dataclass(frozen=True, eq=False)
class BatchCounts:
    """What each DP rank runs in one step, `[dp]` float64 each.

    Attributes:
        decode_tokens: decode tokens (one per running request that decodes).
        decode_context: sum over decode tokens of their context length (KV entries read).
        prefill_tokens: prefill (extend) tokens in this step's chunk.
        prefill_context: sum over prefilling requests of prefix + chunk (KV entries read).
        prefill_pairs: causal (query, key) pairs of the chunks: sum of chunk*prefix + chunk*(chunk+1)/2.
        sampled_tokens: rows through the LM head (decode tokens + prompts finishing prefill).
        phase: "prefill" if any rank extends this step, else "decode".
        prefill_seqs: prefill chunks (sequences extending) in this step; None: one chunk on
            each rank that extends (what the flash kernel's CTA count follows).
        decode_queries_per_seq: decode queries each decoding sequence runs (1; a speculative
            verify step's `num_draft_tokens`): its KV cache is read once for all of them and
            the decode kernel runs one sequence per request, its queries in one tile.
    """

    decode_tokens: np.ndarray
    decode_context: np.ndarray
    prefill_tokens: np.ndarray
    prefill_context: np.ndarray
    prefill_pairs: np.ndarray
    sampled_tokens: np.ndarray
    phase: str = "decode"
    prefill_seqs: np.ndarray | None = None
    decode_queries_per_seq: float = 1.0

    @derived
    def prefill_chunks(self) -> np.ndarray:
        """[dp] prefill chunks per rank (`prefill_seqs`, else 1 where a rank extends)."""
        if self.prefill_seqs is not None:
            return self.prefill_seqs
        return (self.prefill_tokens > 0).astype(np.float64)

    @derived
    def tokens(self) -> np.ndarray:
        """[dp] tokens each rank runs through the model."""
        return self.decode_tokens + self.prefill_tokens

    @derived
    def routed_tokens(self) -> int:
        """Tokens of the whole batch as a whole number: what its `[layers, experts]` loads are
        drawn for (`SkewModel.loads`, `loads_block`)."""
        return int(round(float(self.tokens.sum())))

    def scaled(self, fraction: float) -> "BatchCounts":
        """One micro-batch of two-batch overlap: every count times `fraction`."""
        scaled = {name: getattr(self, name) * fraction for name in (
            "decode_tokens", "decode_context", "prefill_tokens", "prefill_context",
            "prefill_pairs", "sampled_tokens")}
        return replace(self, prefill_seqs=self.prefill_chunks * fraction, **scaled)

    @classmethod
    def uniform_decode(cls, num_ranks: int, tokens_per_rank: float, context: float) -> "BatchCounts":
        """Every rank decodes `tokens_per_rank` requests of `context` tokens each."""
        t = np.full(num_ranks, float(tokens_per_rank))
        z = np.zeros(num_ranks)
        return cls(t, t * context, z, z, z, t, "decode")


def attention_defaults(hardware: HardwareSpec) -> dict[str, float]:
    """Datasheet parameters of `any/attention`."""
    return {"base_us": 4.0, "hbm_gbps": hardware.hbm_gbps * ATTENTION_HBM_EFFICIENCY,
            "tflops": hardware.bf16_tflops * TENSOR_EFFICIENCY}


def overhead_defaults() -> dict[str, float]:
    """Datasheet-free defaults of `any/step_overhead`: scheduling, sampling, launch gaps."""
    return {"base_us": 150.0, "per_layer_us": 3.0}


def core_flops_per_pair(model: ModelSpec, phase: str) -> float:
    """FLOPs per (query, key) pair: scores and the weighted sum of values, all heads.

    GQA: 4 * heads * head_dim. MLA decode runs absorbed over the latent
    (2*heads*(kv_lora + rope) + 2*heads*kv_lora); MLA prefill runs per head
    (2*heads*(nope + rope) + 2*heads*v_head).
    """
    heads = model.num_attention_heads
    if model.attention.startswith("mla"):
        if phase == "decode":
            return 2.0 * heads * (model.kv_lora_rank + model.qk_rope_head_dim + model.kv_lora_rank)
        return 2.0 * heads * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim)
    return 4.0 * heads * model.head_dim


@lru_cache(maxsize=32)
def _attention_constants(model: ModelSpec, kv_cache_dtype: str = "auto"
                         ) -> tuple[float, float, float, float, float]:
    """(weight bytes, projection flops per token, core flops per decode / prefill pair, KV bytes
    per token) of one layer: the attention projections in the dense parts' format (the
    router's gate GEMM is the block ops' term, `epsim.cost.block_ops`), the KV cache in
    `kv_cache_dtype`."""
    return (model.attention_params * model.dense_weight_bytes_per_param,
            2.0 * model.attention_params,
            core_flops_per_pair(model, "decode"), core_flops_per_pair(model, "prefill"),
            model.kv_bytes_per_token(kv_cache_dtype))


def kv_share(model: ModelSpec, tp_size: int) -> float:
    """The share of a DP group's KV cache each of its `tp_size` GPUs holds and reads: GQA splits
    the KV heads (a GPU keeps at least one, replicated when there are fewer heads than GPUs);
    MLA's latent is one head: every GPU keeps and reads all of it (why MLA models run DP
    attention)."""
    if model.attention.startswith("mla"):
        return 1.0
    kv_heads = model.num_key_value_heads
    return max(kv_heads // tp_size, 1) / kv_heads


def attention_work(batch: BatchCounts, model: ModelSpec, tp_size: int = 1,
                   kv_cache_dtype: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """(bytes [dp], flops [dp]) of one attention layer per rank; `tp_size` ranks share one
    DP group's attention: the projections' weights and every FLOP split evenly (heads split),
    the KV cache by `kv_share`."""
    weight_bytes, proj_flops, core_decode, core_prefill, kv_bytes = _attention_constants(
        model, kv_cache_dtype)
    tokens = batch.tokens
    # a sequence's cache is read once for all its queries (a verify step's draft tokens)
    kv_entries = batch.decode_context / batch.decode_queries_per_seq + tokens
    flops = proj_flops * tokens + core_decode * batch.decode_context
    if batch.phase == "prefill":                  # decode steps carry no prefill terms
        kv_entries = kv_entries + batch.prefill_context
        flops = flops + core_prefill * batch.prefill_pairs
    if tp_size > 1:
        num_bytes = (weight_bytes / tp_size * (tokens > 0)
                     + kv_bytes * kv_share(model, tp_size) * kv_entries)
        return num_bytes, flops / tp_size
    return weight_bytes * (tokens > 0) + kv_bytes * kv_entries, flops


def attention_us(batch: BatchCounts, model: ModelSpec, params: dict[str, float],
                 tp_size: int = 1, kv_cache_dtype: str = "auto") -> np.ndarray:
    """[dp] microseconds of one attention layer per rank; 0 for an idle rank."""
    num_bytes, flops = attention_work(batch, model, tp_size, kv_cache_dtype)
    busy = batch.tokens > 0
    return np.where(busy, params["base_us"] + roofline_us(num_bytes, flops, params["hbm_gbps"],
                                                         params["tflops"]), 0.0)


def gemm_us(weight_bytes: float, flops_per_token: float, tokens: np.ndarray,
            gemm_params: dict[str, float], tp_size: int = 1) -> np.ndarray:
    """[dp] roofline microseconds of a dense GEMM block on each rank's tokens (0 when idle)."""
    tokens = np.asarray(tokens, dtype=np.float64)
    t = roofline_us(weight_bytes / tp_size * (tokens > 0), flops_per_token * tokens / tp_size,
                    gemm_params["hbm_gbps"], gemm_params["tflops"])
    return t


def lm_head_us(sampled_tokens: np.ndarray, model: ModelSpec, gemm_params: dict[str, float],
               tp_size: int = 1) -> np.ndarray:
    """[dp] the LM head (BF16 vocab projection) on the rows that sample a token."""
    params = float(model.vocab_size * model.hidden_size)
    return gemm_us(2.0 * params, 2.0 * params, sampled_tokens, gemm_params, tp_size)


# -- measured attention kernels (single-GPU records: `any/attention_decode|prefill/graph`) -------
def measured_attention_us(batch: BatchCounts, model: ModelSpec, decode: dict[str, float],
                          prefill: dict[str, float], projections: dict[str, float], num_sms: int,
                          tp_size: int = 1, projections_us: np.ndarray | None = None,
                          decode_kernel: DecodeKernel | None = None,
                          kv_cache_dtype: str = "auto",
                          grids: FlashGrids = FA2_GRIDS) -> np.ndarray:
    """[dp] one attention layer per rank with fitted kernels: the projections as a
    dense GEMM (`projections`: hbm_gbps, tflops), the decode tokens' flash kernel over their
    contexts (`decode`) and the prefill chunks' causal one (`prefill`; `epsim.cost.flash`);
    `tp_size` ranks split the heads; 0 for an idle rank.

    Args:
        projections_us: [dp] `attention_projections_us` of these tokens when the caller has it
            (it depends on the tokens alone; the engine remembers it per batch shape).
        decode_kernel: a `DecodeKernel` of these heads and `decode` (the same bits, faster
            over steps that keep their sequence counts).
        kv_cache_dtype: SGLang's `--kv-cache-dtype` (the kernels' KV bytes, `kv_ratio`).
        grids: the fitted kernels' CTA grids (`epsim.cost.flash.component_grids`)."""
    heads, kv_heads, head_dim = attention_heads(model, tp_size)
    ratio = kv_ratio(kv_cache_dtype)
    tokens = batch.tokens
    t = (attention_projections_us(tokens, model, projections, tp_size)
         if projections_us is None else projections_us)
    if decode_kernel is None:
        decode_kernel = DecodeKernel(heads, kv_heads, head_dim, num_sms, decode, ratio,
                                     grids.decode)
    q = batch.decode_queries_per_seq             # a verify step: one sequence per request
    t = t + (decode_kernel.us(batch.decode_tokens, batch.decode_context) if q == 1.0 else
             decode_kernel.us(batch.decode_tokens / q, batch.decode_context / q))
    if batch.phase == "prefill":
        t = t + kernel_us(prefill_work(batch.prefill_tokens, batch.prefill_context,
                                       batch.prefill_chunks, heads, kv_heads, head_dim, num_sms,
                                       ratio, grids.prefill),
                          prefill)
    return np.where(tokens > 0, t, 0.0)


def attention_projections_us(tokens: np.ndarray, model: ModelSpec, projections: dict[str, float],
                             tp_size: int = 1) -> np.ndarray:
    """[dp] the attention projections of each rank's `tokens` as a dense GEMM roofline."""
    weight_bytes, proj_flops, _, _, _ = _attention_constants(model)
    return gemm_us(weight_bytes, proj_flops, tokens, projections, tp_size)


def kv_ratio(kv_cache_dtype: str) -> float:
    """A KV-cache element's bytes over the flash kernels' BF16 (1 for BF16, 0.5 for FP8)."""
    return kv_bytes_per_element(kv_cache_dtype) / BYTES


def attention_heads(model: ModelSpec, tp_size: int = 1) -> tuple[int, int, int]:
    """(query heads, KV heads, head_dim) one rank's attention kernel runs: GQA heads split over
    `tp_size` ranks (a KV head at least); MLA as its absorbed decode form, every query head
    against one latent KV head of `kv_lora_rank` (its measured kernels are GQA ones: the
    provenance line says so)."""
    if model.attention.startswith("mla"):
        return max(model.num_attention_heads // tp_size, 1), 1, model.kv_lora_rank
    return (max(model.num_attention_heads // tp_size, 1),
            max(model.num_key_value_heads // tp_size, 1), model.head_dim)
