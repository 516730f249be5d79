"""The single-GPU components of an MoE layer, each as an op ready to time and its record fields.

- **experts**: the grouped GEMM (SwiGLU, `live.experts.expert_mlp`) of the `num_local` experts
  the GPU holds, as rank 0 of an EP group of `num_experts / num_local` ranks that each route
  `tokens` tokens. Per-expert rows are drawn by `epsim.routing` (the simulator's own load
  generator) over the whole group's tokens; skewed experts sit on rank 0 (no per-layer shuffle),
  so the measured GPU is the busiest rank. Rows are already grouped by expert: permutes, the
  router and the weighting are the block's own terms, not timed here.
- **attention_prefill**: causal GQA attention of `num_seqs` sequences of `context_len` new
  tokens (`torch.nn.functional.scaled_dot_product_attention`, the first kernel of flash,
  efficient, cuDNN, math that runs the shape; the record names it).
- **attention_decode**: one new token per sequence against a KV cache of `context_len` tokens.
- **dense_mlp**: a dense SwiGLU MLP (DeepSeek-V3's dense layers and shared expert).
- **block_ops**: the block's own work around the experts, on one GPU holding every expert (EP 1):
  the live block's forward (`Qwen3MoeSparseMoeBlock`, router on) with the experts replaced by
  the identity, i.e. router GEMM + fp32 softmax + top-k + renormalize + slot choice, the permute
  into expert order, and the top-k weighting with its fp32 sum and cast back. Its sub-parts
  (`router`, `permute`, `combine_weighting`: the block's `route`/`select_slots`,
  `permute_local`, `weight_local`) are timed alone too, into `extra.parts`.

Weights and activations are random normal (never zeros: they run faster than real data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from epsim.routing import skew_from_dict
from live.block import Qwen3MoeSparseMoeBlock
from live.config import MoeConfig
from live.errors import LiveError
from live.experts import expert_mlp, swiglu_mlp

MAX_EXPERT_ROWS = 1 << 18   # a skewed point above this many rows is left out (memory, minutes)


@dataclass(frozen=True)
class ExpertShape:
    name: str
    hidden_size: int
    intermediate_size: int
    num_experts: int
    top_k: int


@dataclass(frozen=True)
class AttentionShape:
    name: str
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class MlpShape:
    name: str
    hidden_size: int
    intermediate_size: int


@dataclass(frozen=True)
class Point:
    """One configuration to time.

    Attributes:
        kind: record kind (experts | attention_prefill | attention_decode | dense_mlp).
        shape: an ExpertShape, AttentionShape or MlpShape.
        tokens: experts, dense_mlp: tokens per rank; attention: tokens per sequence that are
            new (prefill: `context_len`; decode: 1).
        num_local: experts: experts on the GPU. skew: experts: `epsim.routing` descriptor.
        num_seqs, context_len: attention.
    """

    kind: str
    shape: object
    tokens: int = 0
    num_local: int = 0
    skew: tuple = ()                # descriptor items (hashable); dict(skew) is the descriptor
    num_seqs: int = 0
    context_len: int = 0

    @property
    def label(self) -> str:
        if self.kind == "experts":
            return (f"experts/{self.shape.name}/L{self.num_local}/{dict(self.skew)['kind']}"
                    f"/t{self.tokens}")
        if self.kind.startswith("attention"):
            return f"{self.kind}/{self.shape.name}/b{self.num_seqs}/ctx{self.context_len}"
        return f"{self.kind}/{self.shape.name}/t{self.tokens}"

    @property
    def weight_key(self) -> tuple:
        """Points with the same key share one weight allocation (see `WeightCache`)."""
        return (self.kind, self.shape) if self.kind in ("experts", "dense_mlp", "block_ops") else ()


def expert_rows(point: Point, seed: int) -> np.ndarray:
    """Rows per expert of every rank of the emulated EP group, `[ranks, num_local]` int64.

    `ep_size x tokens` tokens each pick `top_k` experts by `epsim.routing` (SkewModel.loads);
    rank r holds experts `r*num_local .. (r+1)*num_local - 1`.
    """
    shape = point.shape
    ep_size = shape.num_experts // point.num_local
    skew = skew_from_dict(dict(point.skew), 1, shape.num_experts, shape.top_k, seed=seed)
    rng = np.random.default_rng([seed, point.num_local, point.tokens])
    loads = skew.loads(ep_size * point.tokens, rng)[0]                    # [experts]
    rows = np.clip(np.rint(loads), 0, None).astype(np.int64)
    return rows.reshape(ep_size, point.num_local)


class WeightCache:
    """The weights of the last shape used (random normal, scaled), largest expert count first.

    Experts: `[max_local, 2*I, H]` and `[max_local, H, I]`, points slice the first `num_local`
    (contiguous); dense MLP: `[2*I, H]`, `[H, I]`. One shape is held at a time.
    """

    def __init__(self, device: torch.device, dtype: torch.dtype, seed: int):
        self.device, self.dtype, self.seed = device, dtype, seed
        self._key, self._tensors = None, ()

    def block(self, key: tuple, shape: ExpertShape):
        """The single-device live block of an expert shape (random router, every expert on this
        device), held like the weights: one shape at a time."""
        if key != self._key:
            self._drop()
            config = MoeConfig(shape.hidden_size, shape.intermediate_size, shape.num_experts,
                               shape.top_k)
            block = Qwen3MoeSparseMoeBlock(config, dtype=self.dtype, device=self.device)
            gen = torch.Generator(device=self.device).manual_seed(self.seed)
            block.gate.weight.copy_(_randn(block.gate.weight.shape, gen, self.device, self.dtype)
                                    * (shape.hidden_size ** -0.5))
            self._key, self._tensors = key, (block,)
        return self._tensors[0]

    def _drop(self) -> None:
        self._key, self._tensors = None, ()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def get(self, key: tuple, shape, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
        if key != self._key or self._tensors[0].shape[0] < num_slots:
            self._drop()
            gen = torch.Generator(device=self.device).manual_seed(self.seed)
            h, i = shape.hidden_size, shape.intermediate_size
            lead = (num_slots,) if key[0] == "experts" else ()
            self._tensors = tuple(
                (torch.randn(*lead, *dims, generator=gen, device=self.device, dtype=self.dtype)
                 * (dims[1] ** -0.5))
                for dims in ((2 * i, h), (h, i)))
            self._key = key
        return self._tensors


def _randn(shape, gen, device, dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, device=device, dtype=dtype)


def build_op(point: Point, weights: WeightCache, max_local: int, seed: int
             ) -> tuple[Callable[[], object] | None, dict]:
    """The op of a point (inputs allocated) and its record fields; op None when left out.

    Returns:
        (op, fields): fields are MeasurementRecord fields (kind, sizes, counts, extra);
        an op of None comes with `fields["skipped"]` saying why.
    """
    device, dtype = weights.device, weights.dtype
    gen = torch.Generator(device=device).manual_seed(seed + point.tokens)
    if point.kind == "experts":
        return _experts_op(point, weights, max_local, seed, gen)
    if point.kind == "dense_mlp":
        shape = point.shape
        gate_up, down = weights.get(point.weight_key, shape, 1)
        x = _randn((point.tokens, shape.hidden_size), gen, device, dtype)
        fields = dict(kind="dense_mlp", num_tokens_per_rank=point.tokens, ep_size=1,
                      hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
                      model=shape.name)
        return (lambda: swiglu_mlp(x, gate_up, down)), fields
    if point.kind in ("attention_prefill", "attention_decode"):
        return _attention_op(point, gen, device, dtype)
    if point.kind == "block_ops":
        return _block_ops_op(point, weights, gen)
    raise LiveError(f"kind ({point.kind!r}) must be experts, attention_prefill, "
                    f"attention_decode, dense_mlp or block_ops")


def _block_ops_op(point: Point, weights: WeightCache, gen):
    """The live block's forward with identity experts, and its three sub-parts as ops
    (`fields["parts"]`), each on inputs the previous part made once beforehand."""
    shape = point.shape
    block = weights.block(point.weight_key, shape)
    x = _randn((point.tokens, shape.hidden_size), gen, weights.device, weights.dtype)

    def identity_experts(rows, counts):
        return rows
    with torch.no_grad():
        routing = block.route(x)
        slots = block.select_slots(routing.topk_ids)
        gathered = block.backend.gather(x, slots, routing.topk_weights)
        rows, pairs = block.permute_local(gathered)
    fields = dict(kind="block_ops", num_tokens_per_rank=point.tokens, ep_size=1,
                  hidden_size=shape.hidden_size, moe_intermediate_size=shape.intermediate_size,
                  num_experts=shape.num_experts, num_physical_experts=shape.num_experts,
                  top_k=shape.top_k, model=shape.name,
                  extra={"pairs": int(point.tokens * shape.top_k),
                         "router": "softmax top-k, renormalized (Qwen3), fp32 weights"})
    fields["parts"] = {
        "router": lambda: block.select_slots(block.route(x).topk_ids),
        "permute": lambda: block.permute_local(gathered),
        "combine_weighting": lambda: block.weight_local(rows, gathered, pairs)}
    return (lambda: block(x, expert_fn=identity_experts)), fields


def _experts_op(point: Point, weights: WeightCache, max_local: int, seed: int, gen):
    shape = point.shape
    rows = expert_rows(point, seed)                                       # [ranks, num_local]
    ep_size = rows.shape[0]
    fields = dict(kind="experts", num_tokens_per_rank=point.tokens, hidden_size=shape.hidden_size,
                  moe_intermediate_size=shape.intermediate_size, num_experts=shape.num_experts,
                  num_physical_experts=shape.num_experts, num_local_experts=point.num_local,
                  top_k=shape.top_k, model=shape.name, ep_size=ep_size, skew=dict(point.skew),
                  expert_tokens_per_rank=rows.sum(axis=1).astype(float).tolist(),
                  local_expert_tokens=rows.astype(float).tolist(),
                  extra={"measured_rank": 0, "rows": int(rows[0].sum()),
                         "experts_touched": int((rows[0] > 0).sum())})
    num_rows = int(rows[0].sum())
    if num_rows > MAX_EXPERT_ROWS:
        return None, dict(fields, skipped=f"{num_rows} rows > {MAX_EXPERT_ROWS}")
    gate_up, down = weights.get(point.weight_key, shape, max_local)
    gate_up, down = gate_up[:point.num_local], down[:point.num_local]
    x = _randn((num_rows, shape.hidden_size), gen, weights.device, weights.dtype)
    counts = torch.from_numpy(rows[0]).to(weights.device)
    impl = "grouped_mm" if weights.device.type == "cuda" else "loop"
    fields["extra"]["impl"] = impl
    return (lambda: expert_mlp(x, counts, gate_up, down, impl=impl)), fields


SDPA_KERNELS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


def _attention_op(point: Point, gen, device, dtype):
    shape = point.shape
    decode = point.kind == "attention_decode"
    q_len = 1 if decode else point.context_len
    q = _randn((point.num_seqs, shape.num_heads, q_len, shape.head_dim), gen, device, dtype)
    k, v = (_randn((point.num_seqs, shape.num_kv_heads, point.context_len, shape.head_dim),
                   gen, device, dtype) for _ in range(2))
    fields = dict(kind=point.kind, num_tokens_per_rank=point.num_seqs * q_len, model=shape.name,
                  ep_size=1, hidden_size=0,
                  num_attention_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
                  head_dim=shape.head_dim, num_seqs=point.num_seqs,
                  context_len=point.context_len, extra={"causal": not decode})
    errors = []
    for name in SDPA_KERNELS:
        backend = getattr(SDPBackend, name)

        def op(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=not decode,
                                                      enable_gqa=True)
        try:
            op()
        except RuntimeError as exc:           # this kernel does not take the shape here
            errors.append(f"{name}: {str(exc).splitlines()[0][:80]}")
            continue
        fields["extra"]["kernel"] = f"sdpa/{name.lower()}"
        return op, fields
    return None, dict(fields, skipped="; ".join(errors))
