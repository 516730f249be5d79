"""The attention block's own ops: what a layer's attention block runs besides its projections'
GEMMs and the attention kernel -- the input RMSNorm, the per-head q/k RMSNorms, RoPE, the KV
write and the residual add.

Counted from the ops transformers' Qwen3 attention block dispatches in decode (`Qwen3MoeAttention`
behind `input_layernorm`, SDPA, a static KV cache; tests/live/bench/test_attention_ops.py counts
them on the CPU), per token of a rank, with `H` hidden, `Q` = query heads x head_dim, `K` = KV
heads x head_dim, `R` = RMSNorm rows (1 + query heads + KV heads):

  RMSNorm (input over H, q over Q, k over K)  bf16 -> fp32, square, mean, + eps, rsqrt, scale,
                      -> bf16, times weight: 36 bytes per element + 24 per row
  RoPE (q and k)      x cos, the rotated half (neg, cat), x sin, add: 20 bytes per element
  KV write            k and v copied into the cache: 4 bytes per element of each (8 per K)
  residual            x + attention output: 6 bytes per element of H

so `bytes_per_token = 42 H + 56 Q + 64 K + 24 R`, and one rank's time is

    t = launch_us * KERNELS + tokens * bytes_per_token / hbm_gbps * 1e-3

  launch_us   per-launch base: the fixed device time of one of the block's kernels in a CUDA
              graph (launch, ramp, tail); `KERNELS` = 41: 37 elementwise kernels and the 4
              projection GEMMs, whose roofline (`epsim.cost.attention.attention_projections_us`)
              has no fixed term
  hbm_gbps    the rate these passes reach (<= datasheet HBM)

MLA (DeepSeek-V3) takes the same form over its own widths: the input norm over H, the latent
norms over `q_lora_rank` and `kv_lora_rank`, RoPE over the query heads' and the key's rope
dims, the KV write of the latent; its kernel count is the GQA block's (transformers' MLA block
was not measured). Fitted as `any/attention_ops/graph` on the `layer_part` records of the layer
bench (`attention_block` less the attention kernel measured at the same point and the
projections as priced). A profile without that fit charges nothing here: the datasheet
attention roofline stands for the whole attention (docs/model.md, section 5).
"""

from __future__ import annotations

import numpy as np

from epsim.cost.linear import ATTENTION_OPS_TERMS
from epsim.cost.roofline import HBM_EFFICIENCY
from epsim.spec.hardware import HardwareSpec
from epsim.spec.model import ModelSpec

KERNELS = 41          # launches besides the attention kernel (37 elementwise, 4 projection GEMMs)
NORM_BYTES_PER_ELEMENT = 36.0
NORM_BYTES_PER_ROW = 24.0
ROPE_BYTES_PER_ELEMENT = 20.0
KV_WRITE_BYTES_PER_ELEMENT = 4.0
RESIDUAL_BYTES_PER_ELEMENT = 6.0


def attention_ops_defaults(hardware: HardwareSpec) -> dict[str, float]:
    """Starting values of `any/attention_ops` for a fit (2 µs per launch, HBM times the stated
    efficiency); the simulator charges the term only where a profile holds its fit."""
    return {"launch_us": 2.0, "hbm_gbps": hardware.hbm_gbps * HBM_EFFICIENCY}


def bytes_per_token(hidden_size: int, query_width: int, key_width: int, rope_width: int,
                    norm_rows: int, kv_write_width: int) -> float:
    """Bytes the block's own ops move per token (module docstring).

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


def model_bytes_per_token(model: ModelSpec, tp_size: int = 1) -> float:
    """`bytes_per_token` of one rank of a model's attention block; `tp_size` ranks split its
    heads (GQA: a KV head at least), the hidden-size passes are every rank's."""
    if model.attention == "mla":
        heads = max(model.num_attention_heads // tp_size, 1)
        rope = model.qk_rope_head_dim
        return bytes_per_token(model.hidden_size, model.q_lora_rank, model.kv_lora_rank,
                               heads * rope + rope, 3, model.kv_lora_rank + rope)
    heads = max(model.num_attention_heads // tp_size, 1)
    kv_heads = max(model.num_key_value_heads // tp_size, 1)
    q, k = heads * model.head_dim, kv_heads * model.head_dim
    return bytes_per_token(model.hidden_size, q, k, q + k, 1 + heads + kv_heads, 2 * k)


def attention_ops_features(tokens, per_token_bytes: float) -> np.ndarray:
    """[..., 2] design columns (launches, KB moved) of ranks with `tokens` ([...]); times
    `ATTENTION_OPS_TERMS.coefficients(params)` gives `attention_ops_us`. An idle rank runs
    nothing."""
    t = np.asarray(tokens, dtype=np.float64)
    busy = (t > 0).astype(np.float64)
    return np.stack([busy * KERNELS, t * per_token_bytes * 1e-3], axis=-1)


def attention_ops_us(tokens, per_token_bytes: float, params) -> np.ndarray:
    """[...] microseconds of each rank's attention-block ops on its `tokens` ([...])."""
    launch, per_kb = ATTENTION_OPS_TERMS.coefficients(params)
    t = np.asarray(tokens, dtype=np.float64)
    return np.where(t > 0, launch * KERNELS + t * (per_token_bytes * 1e-3 * per_kb), 0.0)
