"""One shape's state on the device during a layer run (its layers, built as the points need
them, and a virtual rank's inputs per EP size and batch) and the records of one point: its op
(`live.bench.layer_ops`, or `live.bench.component_ops.build_op` for the single-GPU
components), timed by `live.bench.op_timing.time_op`, one `epsim.records` line per timing."""

from __future__ import annotations

import zlib

import numpy as np
import torch

from epsim.records import MeasurementRecord
from live.bench.component_ops import Point, WeightCache, build_op
from live.bench.components import time_point
from live.bench.layer_ops import Layer, decode_inputs, experts_op, rank_inputs, route, with_kernel
from live.bench.op_timing import time_op

COMPONENT_KINDS = ("attention_decode", "block_ops", "dense_mlp")


def component_point(shape, kind: str, num_seqs: int, context_len: int = 0) -> Point:
    """The `live.bench.component_ops` point of a component kind at a layer point of `shape`."""
    if kind == "attention_decode":
        return Point(kind, shape.attention, num_seqs=num_seqs, context_len=context_len)
    return Point(kind, shape.experts if kind == "block_ops" else shape.shared, num_seqs)


class ShapeState:
    """What the points of one LayerShape share on the device: layers (layer i from seed + i),
    the component ops' weights (`WeightCache`) while component points run, each virtual rank's
    inputs, and the SDPA kernel of each decode shape."""

    def __init__(self, shape, device: torch.device, dtype: torch.dtype, seed: int):
        self.shape, self.device, self.dtype, self.seed = shape, device, dtype, seed
        self.layers: list[Layer] = []
        self.weights: WeightCache | None = None
        self.ranks: dict[tuple[int, int], object] = {}
        self.kernels: dict[tuple[int, int], str] = {}

    def layer(self, index: int) -> Layer:
        while len(self.layers) <= index:
            self.layers.append(Layer(self.shape, self.device, self.dtype,
                                     self.seed + len(self.layers)))
        return self.layers[index]

    def rank(self, ep_size: int, num_seqs: int, gen: torch.Generator, fresh: bool = False):
        """A virtual rank's inputs (`RankInputs`), kept per (EP size, batch); `fresh`: new
        buffers with the same rows (another layer of a stack)."""
        key = (ep_size, num_seqs)
        if fresh or key not in self.ranks:
            inputs = rank_inputs(self.shape, num_seqs, ep_size, self.seed, gen, self.dtype)
            if fresh:
                return inputs
            self.ranks[key] = inputs
        return self.ranks[key]

    def kernel(self, num_seqs: int, context_len: int) -> str:
        """The SDPA kernel the component bench picks for this decode shape."""
        key = (num_seqs, context_len)
        if key not in self.kernels:
            point = component_point(self.shape, "attention_decode", num_seqs, context_len)
            _, fields = build_op(point, self._weights(), 0, self.seed)
            self.kernels[key] = fields["extra"].get("kernel", "")
        return self.kernels[key]

    def _weights(self) -> WeightCache:
        if self.weights is None:
            self.weights = WeightCache(self.device, self.dtype, self.seed)
        return self.weights

    def records(self, point, plan, flush, provenance: dict):
        """The point's records (one per timing), or why it was left out (a string)."""
        if point.kind in COMPONENT_KINDS:         # timed as the component bench times them
            component = component_point(self.shape, point.kind, point.num_seqs,
                                        point.context_len)
            records = time_point(component, 0, plan, self._weights(), 0, flush, provenance)
            if point.kind == "attention_decode" and not isinstance(records, str):
                self.kernels[(point.num_seqs, point.context_len)] = records[0].extra["kernel"]
            return records
        if point.kind != "layer_part":
            self.weights = None                     # the live block's zeroed experts: freed
        op, fields = self.op(point)
        with torch.no_grad():
            times = time_op(op, self.device, plan.num_iters, plan.num_warmup, flush)
        extra = dict(fields.pop("extra", {}), dtype=plan.dtype, method=times.method,
                     l2=("" if self.device.type != "cuda" else
                         "kept (no flush)" if plan.keep_l2 else "flushed before each call"),
                     **{"pass": 0})
        if times.graph_error:
            extra["graph_error"] = times.graph_error
        return [MeasurementRecord(**fields, backend="local", timing=timing, dispatch_dtype="",
                                  seed=self.seed, **summary, num_iters=plan.num_iters,
                                  extra=extra, provenance=provenance)
                for timing, summary in times.summaries().items()]

    def op(self, point):
        """(op, record fields) of a layer, stack or part point."""
        shape = self.shape
        gen = torch.Generator(device=self.device).manual_seed(
            self.seed + zlib.crc32(point.label.encode()))
        layer = self.layer(0)
        ep, b = point.ep_size, point.num_seqs
        rank = self.rank(ep, b, gen) if ep > 1 else None
        if point.kind in ("decoder_layer", "layer_stack") or point.part == "attention_block":
            return self._decode_op(point, layer, rank, gen)
        h = torch.randn(b, 1, shape.hidden_size, generator=gen, device=self.device,
                        dtype=self.dtype)                  # post-attention rows
        rows, (normed, ids, weights) = route(layer, h) if rank is None else (rank.rows, (None,) * 3)
        if point.part == "router":
            op, rows = (lambda: layer.hf.mlp.gate(normed)), None
        elif point.part == "moe_block":
            op = lambda: layer.moe_block(h, rank)          # noqa: E731 - an op to time
        elif point.part == "experts_module":
            experts = layer.local_experts(ep)
            op = ((lambda: experts(normed, ids, weights)) if rank is None else
                  (lambda: experts(rank.pairs, rank.expert_ids, rank.weights)))
        else:                                              # experts: the grouped GEMM alone
            op, impl = experts_op(layer, rows, gen)
            return op, self.fields(point, rows, impl=impl)
        return op, self.fields(point, rows)

    def _decode_op(self, point, layer: Layer, rank, gen: torch.Generator):
        """A whole layer, a stack, or the attention block: ops over one decode batch."""
        layers = [self.layer(i) for i in range(point.num_layers)]
        decode = decode_inputs(layer, point.num_seqs, point.context_len, point.num_layers, gen)
        kernel = self.kernel(point.num_seqs, point.context_len)
        if point.part == "attention_block":
            return (with_kernel(lambda: layer.attention_block(decode.x, decode.position,
                                                              decode.caches[0]), kernel),
                    self.fields(point, None, kernel=kernel))
        ranks = [rank] + [self.rank(point.ep_size, point.num_seqs, gen, fresh=True)
                          if rank is not None else None for _ in layers[1:]]
        rows = rank.rows if rank is not None else route(
            layer, layer.attention_block(decode.x, decode.position, decode.caches[0]))[0]

        def forward():
            h = decode.x
            for i, each in enumerate(layers):
                h = each.forward(h, decode.position, decode.caches[i], ranks[i])
            return h
        return with_kernel(forward, kernel), self.fields(point, rows, kernel=kernel)

    def fields(self, point, rows: np.ndarray | None, **extra) -> dict:
        """Record fields of a layer, stack or part point; `rows [ranks, local experts]`: rows
        per expert of the group, the measured rank first (None: a part without experts)."""
        s, ep = self.shape, point.ep_size
        fields = dict(kind=point.kind, ep_size=ep, num_tokens_per_rank=point.num_seqs,
                      hidden_size=s.hidden_size, moe_intermediate_size=s.moe_intermediate_size,
                      num_experts=s.num_experts, num_physical_experts=s.num_experts,
                      num_local_experts=s.num_experts // ep, top_k=s.top_k,
                      intermediate_size=s.shared_intermediate_size,
                      num_attention_heads=s.num_heads, num_kv_heads=s.num_kv_heads,
                      head_dim=s.head_dim, num_seqs=point.num_seqs,
                      context_len=point.context_len, model=s.name, num_layers=point.num_layers,
                      skew={"kind": "uniform"} if ep > 1 else {})
        extra = dict(part=point.part or point.kind, experts_implementation="grouped_mm",
                     **extra)
        if rows is not None:
            fields.update(expert_tokens_per_rank=rows.sum(axis=1).astype(float).tolist(),
                          local_expert_tokens=rows.astype(float).tolist())
            extra.update(measured_rank=0, rows=int(rows[0].sum()),
                         experts_touched=int((rows[0] > 0).sum()),
                         routing=("the layer's router" if ep == 1 else
                                  "epsim.routing uniform, busiest rank first"))
        fields["extra"] = extra
        return fields
