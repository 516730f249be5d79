"""The decoder layer under test, on one GPU: Hugging Face transformers' Qwen3 MoE decoder layer
in decode, whole, as a "virtual EP n" rank, as a stack, and its parts, each an op to time.

- **EP 1**: `Qwen3MoeDecoderLayer` as transformers builds it: input RMSNorm, `Qwen3MoeAttention`
  (SDPA), residual, post-attention RMSNorm, `Qwen3MoeSparseMoeBlock` with
  `config._experts_implementation = "grouped_mm"`, residual; one GPU holds every expert and the
  block's own router routes the batch.
- **Virtual EP n**: one rank of an EP n group with DP attention, its communication left out. Its
  own `B` sequences go through the same norms, attention and router; then `Qwen3MoeExperts` of
  its `E/n` local experts (views of the layer's first `E/n`) run on the token-expert pairs the
  group's `n x B` tokens route to them: drawn by `epsim.routing`
  (`live.bench.component_ops.expert_rows`, the component bench's draw), ranks sorted busiest
  first and rank 0 measured, as the simulator prices the slowest rank. What dispatch delivers
  (the pairs, their expert and weight) and what combine returns (`[B, H]` rows) are buffers.
- **Decode**: one new token per sequence against a KV cache of `context_len` tokens whose last
  slot takes the new token, so attention reads `context_len` keys, as `attention_decode` does;
  SDPA is held to the kernel the component bench picks for the shape (first of flash,
  efficient, cuDNN, math that runs it).
- **DeepSeek-like** (`DEEPSEEK_LIKE`): the same layer at DeepSeek-V3's MoE sizes (H 7168, 256
  routed experts, top-8, I 2048) with Qwen3's softmax router (not DeepSeek's sigmoid
  group-limited one) and one shared expert (`Qwen3MoeMLP` of width 2048, added to the routed
  output); attention is a GQA stand-in for MLA: DeepSeek's 128 query heads, 2 KV heads of 128,
  i.e. 1024 cached bytes per token and layer against MLA's 1152 (a decode reads about MLA's
  bytes; it does 4.25x fewer FLOPs per key than MLA's absorbed decode).

Weights and activations are random normal, scaled by fan-in (never zeros).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from epsim.zoo import get_model
from live.bench.component_ops import AttentionShape, ExpertShape, MlpShape, Point, expert_rows
from live.config import MoeConfig
from live.experts import expert_mlp

UNIFORM = (("kind", "uniform"),)


@dataclass(frozen=True)
class LayerShape:
    """One decoder layer's sizes (`shared_intermediate_size` 0: no shared expert)."""

    name: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    moe_intermediate_size: int
    num_experts: int
    top_k: int
    shared_intermediate_size: int = 0

    @property
    def experts(self) -> ExpertShape:
        return ExpertShape(self.name, self.hidden_size, self.moe_intermediate_size,
                           self.num_experts, self.top_k)

    @property
    def attention(self) -> AttentionShape:
        return AttentionShape(self.name, self.num_heads, self.num_kv_heads, self.head_dim)

    @property
    def shared(self) -> MlpShape | None:
        return (MlpShape(f"{self.name}/shared_expert", self.hidden_size,
                         self.shared_intermediate_size) if self.shared_intermediate_size else None)

    def hf_config(self, num_experts: int | None = None):
        """`transformers.Qwen3MoeConfig` of this layer (every layer sparse, SDPA attention,
        grouped_mm experts); `num_experts`: a rank's local experts instead of all."""
        config = MoeConfig(self.hidden_size, self.moe_intermediate_size,
                           num_experts or self.num_experts, self.top_k).hf_config("grouped_mm")
        config.num_attention_heads, config.num_key_value_heads = self.num_heads, self.num_kv_heads
        config.head_dim, config.decoder_sparse_step, config.mlp_only_layers = self.head_dim, 1, []
        config._attn_implementation = "sdpa"
        return config


DEEPSEEK_LIKE = LayerShape("DeepSeek-like", 7168, 128, 2, 128, 2048, 256, 8, 2048)


def zoo_shape(name: str) -> LayerShape:
    """A Qwen3 MoE model of `epsim.zoo` as a LayerShape (no shared expert)."""
    m = get_model(name)
    return LayerShape(name, m.hidden_size, m.num_attention_heads, m.num_key_value_heads,
                      m.head_dim, m.moe_intermediate_size, m.num_experts, m.top_k)


class StaticKV:
    """A decode KV cache for transformers' attention (`update` is all it calls): `[B, KV heads,
    context_len, D]` keys and values, the new token written into the last slot (static
    addresses: a CUDA graph replays it)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.keys[:, :, -1:].copy_(key_states)
        self.values[:, :, -1:].copy_(value_states)
        return self.keys, self.values


class WithSharedExpert(nn.Module):
    """A sparse MoE block plus a shared expert on every token (DeepSeek's MoE)."""

    def __init__(self, block: nn.Module, shared: nn.Module):
        super().__init__()
        self.block, self.shared = block, shared

    @property
    def gate(self):
        return self.block.gate

    @property
    def experts(self):
        return self.block.experts

    def forward(self, hidden_states):
        return self.block(hidden_states) + self.shared(hidden_states)


def _cache_kwarg(module: nn.Module) -> str:
    """The name transformers gives the cache argument (`cache` from 5.2x, `past_key_values`
    before)."""
    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


class Layer:
    """One transformers decoder layer on the device (random weights) and what a virtual EP n rank
    of it runs. `hf` is the `Qwen3MoeDecoderLayer`; `local_experts(n)` its rank's experts."""

    def __init__(self, shape: LayerShape, device: torch.device, dtype: torch.dtype, seed: int):
        from transformers.models.qwen3_moe import modeling_qwen3_moe as hf
        self.shape, self.config = shape, shape.hf_config()
        with torch.device("meta"):
            layer = hf.Qwen3MoeDecoderLayer(self.config, 0)
            shared = (hf.Qwen3MoeMLP(self.config, intermediate_size=shape.shared_intermediate_size)
                      if shape.shared_intermediate_size else None)
        gen = torch.Generator(device=device).manual_seed(seed)
        for module in (layer, shared):
            if module is not None:
                module.to(dtype=dtype).to_empty(device=device)
                _randomize(module, gen)
        if shared is not None:
            layer.mlp = WithSharedExpert(layer.mlp, shared)
        self.hf, self.shared = layer.eval(), shared
        self.rotary = hf.Qwen3MoeRotaryEmbedding(config=self.config).to(device)
        self._local: dict[int, nn.Module] = {}
        # read once: a signature read inside the op would be timed as host overhead
        self.cache_kwarg = _cache_kwarg(layer.self_attn)
        self._layer_cache_kwarg = _cache_kwarg(layer)

    def local_experts(self, ep_size: int) -> nn.Module:
        """`Qwen3MoeExperts` of a rank's `E / ep_size` experts: views of the first ones."""
        if ep_size == 1:
            return self.hf.mlp.experts
        if ep_size not in self._local:
            from transformers.models.qwen3_moe import modeling_qwen3_moe as hf
            num_local = self.shape.num_experts // ep_size
            with torch.device("meta"):
                experts = hf.Qwen3MoeExperts(self.shape.hf_config(num_local))
            full = self.hf.mlp.experts
            experts.gate_up_proj = nn.Parameter(full.gate_up_proj[:num_local], requires_grad=False)
            experts.down_proj = nn.Parameter(full.down_proj[:num_local], requires_grad=False)
            self._local[ep_size] = experts
        return self._local[ep_size]

    def attention_block(self, x, position, cache):
        """Input RMSNorm, attention, residual: `[B, 1, H]`."""
        h = self.hf.self_attn(self.hf.input_layernorm(x), position_embeddings=position,
                              attention_mask=None, **{self.cache_kwarg: cache})[0]
        return x + h

    def moe_block(self, h, rank: "RankInputs | None"):
        """Post-attention RMSNorm, the MoE block (EP 1) or a virtual rank's share of it, and
        the residual."""
        normed = self.hf.post_attention_layernorm(h)
        if rank is None:
            return h + self.hf.mlp(normed)
        flat = normed.view(-1, self.shape.hidden_size)
        self.hf.mlp.gate(flat)                  # routes own tokens; dispatch sends them (not timed)
        self.local_experts(rank.ep_size)(rank.pairs, rank.expert_ids, rank.weights)
        out = h + rank.combined                 # what combine returned (not timed)
        return out + self.shared(normed) if self.shared is not None else out

    def forward(self, x, position, cache, rank: "RankInputs | None" = None):
        """The whole layer, `[B, 1, H]` -> `[B, 1, H]`; EP 1 through transformers' own forward."""
        if rank is None:
            out = self.hf(x, attention_mask=None, position_embeddings=position,
                          **{self._layer_cache_kwarg: cache})
            return out[0] if isinstance(out, tuple) else out
        return self.moe_block(self.attention_block(x, position, cache), rank)


def _randomize(module: nn.Module, gen: torch.Generator) -> None:
    """Norm weights 1; every matrix random normal scaled by its fan-in (the last dimension)."""
    with torch.no_grad():
        for param in module.parameters():
            param.requires_grad_(False)
            if param.dim() == 1:
                param.fill_(1.0)
            else:
                param.normal_(0.0, param.shape[-1] ** -0.5, generator=gen)


@dataclass
class Decode:
    """One decode batch's inputs: `x [B, 1, H]`, the rotary `(cos, sin)` at position
    `context_len - 1`, a KV cache per layer."""

    x: torch.Tensor
    position: tuple
    caches: list


def decode_inputs(layer: Layer, num_seqs: int, context_len: int, num_layers: int,
                  gen: torch.Generator) -> Decode:
    shape, device, dtype = layer.shape, gen.device, layer.hf.input_layernorm.weight.dtype
    x = torch.randn(num_seqs, 1, shape.hidden_size, generator=gen, device=device, dtype=dtype)
    positions = torch.full((num_seqs, 1), context_len - 1, device=device)
    position = layer.rotary(x, positions)
    kv = (num_seqs, shape.num_kv_heads, context_len, shape.head_dim)
    caches = [StaticKV(*(torch.randn(*kv, generator=gen, device=device, dtype=dtype)
                         for _ in range(2))) for _ in range(num_layers)]
    return Decode(x, position, caches)


@dataclass
class RankInputs:
    """What a virtual EP n rank receives and returns around its experts: `pairs [P, H]`,
    `expert_ids [P, 1]` (local), `weights [P, 1]`, `combined [B, 1, H]`; `rows [n, E/n]` the
    whole group's rows per expert, the measured rank first."""

    ep_size: int
    rows: np.ndarray
    pairs: torch.Tensor
    expert_ids: torch.Tensor
    weights: torch.Tensor
    combined: torch.Tensor


def group_rows(shape: LayerShape, num_seqs: int, ep_size: int, seed: int) -> np.ndarray:
    """Rows per local expert of every rank of a virtual EP group, `[ranks, E/n]`, busiest rank
    first: `epsim.routing`'s uniform draw for `ep_size x num_seqs` tokens (`expert_rows`)."""
    point = Point("experts", shape.experts, num_seqs, shape.num_experts // ep_size, UNIFORM)
    rows = expert_rows(point, seed)
    return rows[np.argsort(-rows.sum(axis=1), kind="stable")]


def rank_inputs(shape: LayerShape, num_seqs: int, ep_size: int, seed: int,
                gen: torch.Generator, dtype: torch.dtype) -> RankInputs:
    rows = group_rows(shape, num_seqs, ep_size, seed)
    device = gen.device
    ids = np.repeat(np.arange(rows.shape[1]), rows[0])
    ids = ids[np.random.default_rng([seed, ep_size, num_seqs]).permutation(len(ids))]
    num_pairs = len(ids)                        # pairs arrive grouped by source rank, not expert
    return RankInputs(
        ep_size, rows,
        torch.randn(num_pairs, shape.hidden_size, generator=gen, device=device, dtype=dtype),
        torch.from_numpy(ids).to(device).view(-1, 1),
        torch.rand(num_pairs, 1, generator=gen, device=device, dtype=dtype),
        torch.randn(num_seqs, 1, shape.hidden_size, generator=gen, device=device, dtype=dtype))


def route(layer: Layer, h: torch.Tensor) -> tuple[np.ndarray, tuple]:
    """EP 1: the layer's own router on post-attention rows `h [B, 1, H]`: rows per expert
    `[1, E]`, and `(normed rows [B, H], ids [B, k], weights [B, k])` for its experts."""
    with torch.no_grad():
        normed = layer.hf.post_attention_layernorm(h).view(-1, layer.shape.hidden_size)
        _, weights, ids = layer.hf.mlp.gate(normed)
    counts = torch.bincount(ids.flatten(), minlength=layer.shape.num_experts)
    return counts.cpu().numpy()[None, :].astype(np.int64), (normed, ids, weights)


def experts_op(layer: Layer, rows: np.ndarray, gen: torch.Generator):
    """The grouped GEMM alone (`live.experts.expert_mlp`, as `experts` records time it) on the
    measured rank's rows (`rows[0]`), weights shared with the layer."""
    experts, num_local = layer.hf.mlp.experts, rows.shape[1]
    gate_up, down = experts.gate_up_proj[:num_local], experts.down_proj[:num_local]
    x = torch.randn(int(rows[0].sum()), layer.shape.hidden_size, generator=gen, device=gen.device,
                    dtype=gate_up.dtype)
    counts = torch.from_numpy(rows[0]).to(gen.device)
    impl = "grouped_mm" if gen.device.type == "cuda" else "loop"
    return (lambda: expert_mlp(x, counts, gate_up, down, impl=impl)), impl


def with_kernel(fn, kernel: str):
    """`fn` with SDPA held to `kernel` (`"sdpa/flash_attention"`, ...; "" leaves it free)."""
    if not kernel:
        return fn
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, kernel.split("/")[-1].upper())

    def op():
        with sdpa_kernel([backend]):
            return fn()
    return op

