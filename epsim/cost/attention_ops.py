"""The attention block's own ops: what a layer's attention block runs besides its projections'
GEMMs and the attention kernel -- the norms, RoPE, the KV write and the residual add -- as the
engine that serves the model runs them (`ENGINES`).

One rank's time, `tokens` its tokens, is

    t = launch_us * kernels + tokens * bytes_per_token / hbm_gbps * 1e-3

  launch_us   per-launch base: the fixed device time of one of the block's kernels in a CUDA
              graph (launch, ramp, tail)
  hbm_gbps    the rate these passes reach (<= datasheet HBM)

Both are fitted as `any/attention_ops/graph` on the `layer_part` records of our layer bench
(`attention_block` less the attention kernel measured at the same point and the projections as
priced), which times transformers' block; the engine only names which kernels run and what they
move (`block_ops`), counted from its code, so the fit prices SGLang's fused block from the same
per-launch and per-byte physics. A profile without that fit charges nothing here: the
datasheet attention roofline stands for the whole attention (docs/model.md, section 5).

`transformers` -- HF transformers' eager Qwen3 attention block in decode (`Qwen3MoeAttention`
behind `input_layernorm`, SDPA, a static KV cache: what `live.bench.layers` times and the
composition axis compares against; tests/live/bench/test_attention_ops.py counts its aten ops on
the CPU), per token, with `H` hidden, `Q` = query heads x head_dim, `K` = KV heads x head_dim,
`R` = RMSNorm rows (1 + query heads + KV heads):

  RMSNorm (input over H, q over Q, k over K)  bf16 -> fp32, square, mean, + eps, rsqrt, scale,
                      -> bf16, times weight: 36 bytes per element + 24 per row
  RoPE (q and k)      x cos, the rotated half (neg, cat), x sin, add: 20 bytes per element
  KV write            k and v copied into the cache: 4 bytes per element of each (8 per K)
  residual            x + attention output: 6 bytes per element of H

  so `42 H + 56 Q + 64 K + 24 R` bytes and 41 launches: 37 elementwise kernels and the 4
  projection GEMMs, whose roofline (`epsim.cost.attention.attention_projections_us`) has no
  fixed term. MLA takes the same form over its own widths (the GQA block's kernel count:
  transformers' MLA block was not measured).

`sglang` -- SGLang's decoder layer in decode on CUDA (python/sglang/srt/models/qwen3_moe.py,
deepseek_v2.py and deepseek_common/attention_forward_methods/forward_mla.py, layers/layernorm.py,
rotary_embedding.py), one launch per kernel:

  add-RMSNorm x 2     `fused_add_rmsnorm`: the input norm with the previous block's residual add,
                      and the post-attention norm with this block's residual add (one kernel
                      each: reads x and the residual, writes both): 8 bytes per element of H each
  head norms          GQA: q_norm and k_norm (`apply_qk_norm`), MLA: q_a_layernorm and
                      kv_a_layernorm over the latents; one kernel each, the second on the
                      alternate stream while the graph is captured (their fixed times overlap:
                      one launch), bf16 in and out: 4 bytes per element
  RoPE                `apply_rope_with_cos_sin_cache_inplace` on q and k (MLA: their rope dims),
                      in place: 4 bytes per element
  KV write            `set_kv_buffer` (MLA: the latent and its rope key): 4 bytes per element
  projections         GQA: qkv and o, two GEMM launches (their roofline has no fixed term); MLA's
                      GEMMs carry their own (`epsim.cost.dense_gemm.gemm_us`: base_us)
  activation quant    a dense format quantising activations (FP8, NVFP4): one
                      `per_token_group_quant` launch before each projection GEMM (GQA: 2, and its
                      3 bytes per element of H and Q; MLA: 3, whose bytes the GEMMs' quant term
                      holds); MLA's BMMs in FP8 (a per-tensor FP8 checkpoint; DeepSeek's block
                      FP8 `kv_b_proj` is dequantised to BF16 at load): `per_tensor_quant_mla_fp8`
                      with its zeroed scale (2 launches) before each of `W_UK` and `W_UV`, and
                      the copy that flattens the `W_UV` output (4 bytes per element of heads x v)

  so GQA BF16 7 launches and `16 H + 8 Q + 16 K` bytes per token (Qwen3-30B-A3B: 7 launches and
  ~74 KB against transformers' 41 and ~349 KB), MLA block-FP8 (DeepSeek-V3/R1) 8 launches and
  ~158 KB.

  With `deployment.enable_flashinfer_allreduce_fusion` (SGLang's server arg; on by default for
  DeepSeek-V3/R1 and Qwen3-MoE on Hopper and Blackwell from 0.5.7, single node, no DP attention,
  `moe_a2a_backend` none: `ServerArgs._handle_model_specific_adjustments`) and attention TP > 1,
  both add-RMSNorms run inside the TP all-reduce before them (`LayerCommunicator`:
  `RMSNorm.forward_with_allreduce_fusion`, flashinfer's `trtllm_allreduce_fusion`, all-reduce +
  residual add + RMSNorm in one kernel) while the batch holds at most
  `FUSED_ALLREDUCE_MAX_TOKENS` tokens (`apply_flashinfer_allreduce_fusion`): their two launches
  go (`BlockOps.fused_norms`; their bytes stay, the fused kernel moves them); the all-reduce is
  priced as before (`epsim.cost.tp`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.linear import ATTENTION_OPS_TERMS
from epsim.cost.roofline import HBM_EFFICIENCY
from epsim.spec.hardware import HardwareSpec
from epsim.spec.model import ModelSpec

ENGINES = ("sglang", "transformers")
DEFAULT_ENGINE = "sglang"        # what a deployment serves with; the live bench is transformers

# transformers' eager block (module docstring)
KERNELS = 41          # launches besides the attention kernel (37 elementwise, 4 projection GEMMs)
NORM_BYTES_PER_ELEMENT = 36.0
NORM_BYTES_PER_ROW = 24.0
ROPE_BYTES_PER_ELEMENT = 20.0
KV_WRITE_BYTES_PER_ELEMENT = 4.0
RESIDUAL_BYTES_PER_ELEMENT = 6.0

# SGLang's fused block (module docstring)
FUSED_ADD_NORM_BYTES_PER_ELEMENT = 8.0   # x and residual read, both written, bf16
INPLACE_BYTES_PER_ELEMENT = 4.0          # bf16 read and written: head norms, RoPE, KV write, copy
QUANT_BYTES_PER_ELEMENT = 3.0            # bf16 read, fp8 written
QUANT_FORMATS = ("fp8", "fp8_block", "nvfp4")   # dense formats that quantise activations
# MLA's absorbed BMMs run in FP8 for a per-tensor/channel FP8 checkpoint; DeepSeek's 128 x 128
# block-FP8 `kv_b_proj` is dequantised to BF16 at load (deepseek_weight_loader, unless
# SGL_USE_DEEPGEMM_BMM): plain BF16 BMMs, no quant kernels around them
FP8_BMM_FORMATS = ("fp8",)
# SGLang's `FUSE_ALLREDUCE_MAX_BATCH_SIZE` (layers/communicator.py, 0.5.5-0.5.9): the largest
# batch whose all-reduce takes the next norm in (module docstring)
FUSED_ALLREDUCE_MAX_TOKENS = 2048
FUSED_NORMS = 2                          # the two add-RMSNorms of a decoder layer


@dataclass(frozen=True)
class BlockOps:
    """The attention block's own ops on one rank: `kernels` launches with a fixed time each and
    `bytes_per_token` moved per token; `fused_norms` of the launches run inside the TP
    all-reduce at batches of at most `FUSED_ALLREDUCE_MAX_TOKENS` tokens (module docstring)."""

    kernels: int
    bytes_per_token: float
    fused_norms: int = 0

    def launches(self, tokens) -> np.ndarray:
        """[...] launches a rank with `tokens` ([...]) runs: none idle, `kernels` less the
        fused norms while the all-reduce takes them."""
        t = np.asarray(tokens, dtype=np.float64)
        fused = (t <= FUSED_ALLREDUCE_MAX_TOKENS) * float(self.fused_norms)
        return np.where(t > 0, self.kernels - fused, 0.0)


def attention_ops_defaults(hardware: HardwareSpec) -> dict[str, float]:
    """Starting values of `any/attention_ops` for a fit (2 µs per launch, HBM times the stated
    efficiency); the simulator charges the term only where a profile holds its fit."""
    return {"launch_us": 2.0, "hbm_gbps": hardware.hbm_gbps * HBM_EFFICIENCY}


def bytes_per_token(hidden_size: int, query_width: int, key_width: int, rope_width: int,
                    norm_rows: int, kv_write_width: int) -> float:
    """Bytes transformers' block ops move per token (module docstring).

    Args:
        query_width, key_width: elements the q and k RMSNorms run over.
        rope_width: elements RoPE rotates (q and k together).
        norm_rows: RMSNorm rows (the input's, and one per normalized head or latent).
        kv_write_width: elements written into the KV cache.
    """
    h = float(hidden_size)
    return (NORM_BYTES_PER_ELEMENT * (h + query_width + key_width) + NORM_BYTES_PER_ROW * norm_rows
            + ROPE_BYTES_PER_ELEMENT * rope_width + KV_WRITE_BYTES_PER_ELEMENT * kv_write_width
            + RESIDUAL_BYTES_PER_ELEMENT * h)


def _widths(model: ModelSpec, tp_size: int) -> tuple[int, int, int, int]:
    """(q norm width, k norm width, rope width, KV-write width) of one rank's block: GQA heads
    split over `tp_size` ranks (a KV head at least); MLA's latents, its query heads' and shared
    key's rope dims. The hidden-size passes are every rank's."""
    heads = max(model.num_attention_heads // tp_size, 1)
    if model.attention == "mla":
        rope = model.qk_rope_head_dim
        return (model.q_lora_rank, model.kv_lora_rank, heads * rope + rope,
                model.kv_lora_rank + rope)
    kv_heads = max(model.num_key_value_heads // tp_size, 1)
    q, k = heads * model.head_dim, kv_heads * model.head_dim
    return q, k, q + k, 2 * k


def _transformers(model: ModelSpec, tp_size: int) -> BlockOps:
    q, k, rope, kv = _widths(model, tp_size)
    heads = max(model.num_attention_heads // tp_size, 1)
    rows = 3 if model.attention == "mla" else 1 + heads + max(model.num_key_value_heads
                                                             // tp_size, 1)
    return BlockOps(KERNELS, bytes_per_token(model.hidden_size, q, k, rope, rows, kv))


def _sglang(model: ModelSpec, tp_size: int, allreduce_fusion: bool = False) -> BlockOps:
    q, k, rope, kv = _widths(model, tp_size)
    h = float(model.hidden_size)
    dense = model.dense_weight_dtype or model.weight_dtype
    quantised = dense in QUANT_FORMATS
    moved = (2 * FUSED_ADD_NORM_BYTES_PER_ELEMENT * h
             + INPLACE_BYTES_PER_ELEMENT * (q + k + rope + kv))
    kernels = 2 + 1 + 1 + 1                        # add-norms, head norms (overlapped), RoPE, KV
    if model.attention == "mla":
        kernels += 3 if quantised else 0           # activation quant before the three GEMMs
        if dense in FP8_BMM_FORMATS:               # BMM quant + zeroed scale, twice; the copy
            heads = max(model.num_attention_heads // tp_size, 1)
            kernels += 5
            moved += INPLACE_BYTES_PER_ELEMENT * heads * model.v_head_dim
    else:
        kernels += 2                               # qkv and o projections: no fixed term
        if quantised:
            kernels += 2
            moved += QUANT_BYTES_PER_ELEMENT * (h + max(model.num_attention_heads // tp_size, 1)
                                                * model.head_dim)
    # the add-norms inside the TP all-reduce (module docstring); one GPU has no all-reduce
    fused = FUSED_NORMS if allreduce_fusion and tp_size > 1 else 0
    return BlockOps(kernels, moved, fused)


def block_ops(model: ModelSpec, engine: str = DEFAULT_ENGINE, tp_size: int = 1,
              allreduce_fusion: bool = False) -> BlockOps:
    """The attention block's own ops of one rank of `model` as `engine` runs them (module
    docstring); `allreduce_fusion`: SGLang's `enable_flashinfer_allreduce_fusion` (transformers'
    block has no such fusion)."""
    if engine not in ENGINES:
        raise ValueError(f"engine ({engine!r}) must be one of {list(ENGINES)}")
    if engine == "sglang":
        return _sglang(model, tp_size, allreduce_fusion)
    return _transformers(model, tp_size)


def attention_ops_features(tokens, ops: BlockOps) -> np.ndarray:
    """[..., 2] design columns (launches, KB moved) of ranks with `tokens` ([...]); times
    `ATTENTION_OPS_TERMS.coefficients(params)` gives `attention_ops_us`. An idle rank runs
    nothing."""
    t = np.asarray(tokens, dtype=np.float64)
    return np.stack([ops.launches(t), t * ops.bytes_per_token * 1e-3], axis=-1)


def attention_ops_us(tokens, ops: BlockOps, params) -> np.ndarray:
    """[...] microseconds of each rank's attention-block ops on its `tokens` ([...])."""
    launch, per_kb = ATTENTION_OPS_TERMS.coefficients(params)
    t = np.asarray(tokens, dtype=np.float64)
    return np.where(t > 0, launch * ops.launches(t) + t * (ops.bytes_per_token * 1e-3 * per_kb),
                    0.0)
