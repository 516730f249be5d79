"""One MoE decoder layer by part: what `CostModel.step` charges per MoE layer, split into the
per-rank parts the GPU runs, each with the profile component that priced it.

    layer_us = attention (+ its block's own ops) + shared experts + block ops + experts
               (kernel + the backend's own layout work) + dispatch + combine + sync

(two-batch overlap: the overlapped form of `epsim.cost.step.overlapped`). `layer_cost` is the
public entry point the composition axis (`epsim.validate.composition`) judges against whole
layers measured on a GPU: one path, the step's own arithmetic, no reconstruction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.cost.block_ops import PARTS as BLOCK_OPS_PARTS
from epsim.cost.block_ops import block_ops_us
from epsim.cost.tables import PlacementTables
from epsim.cost.tp import ALLREDUCE_KEY, measured_none_reduce

# the parts a layer's communication brings: left out of a rank's own compute
COMMUNICATION = ("dispatch", "combine", "layout", "sync")


@dataclass(frozen=True)
class LayerPart:
    """One part of one MoE layer (the slowest rank's; the busiest rank's for dispatch and
    combine), both micro-batches under two-batch overlap.

    Attributes:
        name: attention (projections and kernel), attention_ops (the attention block's norms,
            RoPE, KV write, residual), shared_experts, block_ops (router, and the permute and
            weighting where the step adds them), block_ops_in_comm (the permute and weighting a
            low-latency backend's dispatch and combine do, or a fused MoE kernel's fit holds,
            priced as the block would run them: not charged), experts (the grouped-GEMM kernel,
            with an eager step's host), layout (the backend's own layout work), dispatch, combine, sync.
        us: [moe_layers] float64 µs.
        component: the profile key that priced it ("" for datasheet values).
        charged: whether the layer's time holds it.
    """

    name: str
    us: np.ndarray
    component: str
    charged: bool = True


@dataclass(frozen=True)
class LayerCost:
    """One decode step's MoE layers by part (`layer_cost`).

    Attributes:
        parts: every part, in the order of `LayerPart.name`.
        layer_us: [moe_layers] what the step charges per MoE layer (overlaps included).
        per_layer_us: the step overhead's per-layer term (`any/step_overhead`).
        graph: priced as a CUDA-graph replay (device time).
    """

    parts: tuple[LayerPart, ...]
    layer_us: np.ndarray
    per_layer_us: float
    graph: bool

    def part(self, name: str) -> np.ndarray:
        """[moe_layers] µs of part `name` (zeros if the layer has none)."""
        for p in self.parts:
            if p.name == name:
                return p.us
        return np.zeros_like(self.layer_us)

    def component(self, name: str) -> str:
        """The component that priced part `name` ("" for none or datasheet)."""
        return next((p.component for p in self.parts if p.name == name), "")

    @property
    def compute_us(self) -> np.ndarray:
        """[moe_layers] a rank's own work, as a rank that communicates nothing runs it: every
        part but dispatch, combine, the backend's layout work and the layer sync, with the
        permute and weighting a low-latency backend's kernels would do run by the block."""
        return sum((p.us for p in self.parts if p.name not in COMMUNICATION),
                   np.zeros_like(self.layer_us))


def layer_cost(cost_model, batch: BatchCounts, loads: np.ndarray,
               tables: PlacementTables) -> LayerCost:
    """The MoE layers of one step of `batch` on `cost_model`'s deployment, by part.

    Prices the step as `CostModel.step` does (and adds it to the model's ledger, as `step`
    does), then names each part's component.

    Args:
        batch: per-DP-rank counts.
        loads: [moe_layers, experts] token-expert pairs of the whole batch.
        tables: the placement's `build_tables`.
    """
    cm, p = cost_model, cost_model.params
    fraction = cm.micro_batch_fraction
    part = batch.scaled(fraction) if fraction != 1.0 else batch
    graph = cm.uses_graph(batch)
    moe = cm.moe(loads, cm.ep_tokens(batch), tables, batch.phase, fraction, graph)
    step = cm.step(batch, None, tables, moe=moe)
    scale = 1.0 / fraction
    kind = p.step(graph)
    ops = cm._attention_ops(part.tokens)
    ops_us = np.full(step.layer_us.shape, 0.0 if ops is None else float(ops.max()) * scale)
    attention_key = ("any/attention_decode/graph" if p.attention.kernels is not None
                     else "any/attention" if p.profile_applies
                     and "any/attention" in cm.profile.components else "")
    layout = kind.layout.get(moe.mode)
    layout_us = np.broadcast_to(moe.layout_us, step.layer_us.shape) * scale
    parts = [
        LayerPart("attention", step.attention_us - ops_us, attention_key),
        LayerPart("attention_ops", ops_us, "any/attention_ops/graph" if ops is not None else ""),
        LayerPart("shared_experts", step.shared_experts_us,
                  "any/dense/graph" if p.dense is not None else kind.experts.timing.key),
        LayerPart("block_ops", step.block_ops_us, kind.block_ops.timing.key),
        LayerPart("experts", step.experts_us - layout_us, kind.experts.timing.key),
        LayerPart("layout", layout_us, layout.timing.key if layout else ""),
        LayerPart("dispatch", step.dispatch_us, _comm_key(p, kind, "dispatch", moe.mode)),
        LayerPart("combine", step.combine_us,
                  _comm_key(p, kind, "combine", moe.mode, cm.profile.components)),
        LayerPart("sync", np.full(step.layer_us.shape, moe.sync_us * scale),
                  _sync_key(cm, graph) if moe.sync_us else "")]
    inside = tuple(x for x in BLOCK_OPS_PARTS if x not in kind.block_ops_parts[moe.mode])
    if inside:
        m = cm.model
        tr = moe.traffic
        own = np.asarray(cm.ep_tokens(batch), dtype=np.float64) * fraction
        us = block_ops_us(own, tr.pairs, m.hidden_size, m.num_experts, m.top_k,
                          kind.block_ops.params, inside, kind.block_ops_engine) * scale
        parts.insert(4, LayerPart("block_ops_in_comm", us, kind.block_ops.timing.key,
                                  charged=False))
    return LayerCost(tuple(parts), step.layer_us, float(p.overhead["per_layer_us"]), graph)


def _comm_key(params, kind, stage: str, mode: str, components=()) -> str:
    if params.parallel.tp_size == 1:          # one GPU: nothing crosses
        return ""
    if params.backend == "none":
        if stage == "combine" and (kind.graph or not measured_none_reduce(params)):
            return ALLREDUCE_KEY if ALLREDUCE_KEY in components else ""   # `epsim.cost.tp`'s model
        return "none/allgather" if stage == "dispatch" else "none/allreduce"
    found = kind.stage(stage, mode)
    return found.timing.key if found is not None else ""


def _sync_key(cost_model, graph: bool) -> str:
    backend = cost_model.params.backend
    key = f"{backend}/moe_layer/graph" if graph else f"{backend}/moe_layer"
    return key if key in cost_model.profile.components else ""
