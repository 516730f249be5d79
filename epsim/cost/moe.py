"""The MoE layers of one (micro-)batch: traffic -> dispatch, experts, combine and block ops.

An MoE layer in EP is bulk-synchronous (docs/model.md):

    layer_us = dispatch + experts (slowest rank) + combine + block ops + sync

`moe_cost` prices every MoE layer of a batch from its `[layers, experts]` loads with a
deployment's `CostParams` (`CostModel.moe` calls it); the fast engine prices many steps' loads
at once and reads one `MoECost` for many steps, so what it derives is computed once per object.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.block_ops import block_ops_us
from epsim.cost.derived import derived
from epsim.cost.comm import background_us, chunked, comm_us, per_message
from epsim.cost import served_tiles
from epsim.cost.exiting_ctas import EXIT_FORMATS, exiting_ctas_per_sm
from epsim.cost.experts import even_experts_us, even_row_tiles, experts_rank_us, experts_us
from epsim.cost.layout import layout_us
from epsim.cost.params import CostParams
from epsim.cost.tables import PlacementTables
from epsim.cost.tp import none_collectives_us
from epsim.cost.masked_runner import masked_rows
from epsim.cost.normal_runner import contiguous_gemm
from epsim.cost.quant import (remote_token_weight, remote_tokens, trtllm_gemm, trtllm_ladder,
                              trtllm_tile)
from epsim.cost.rereads import reread_kb
from epsim.cost.traffic import Traffic, count_traffic, rank_slot_rows
from epsim.cost.transport import network_us
from epsim.fast_init import fast_init


def layer_defaults() -> dict[str, float]:
    """Parameters of `<backend>/moe_layer`: `sync_us`, what a whole MoE layer adds to its
    dispatch, experts and combine timed apart (ranks reaching each collective at different
    times; negative where stages overlap). The live bench measures it; unmeasured, 0."""
    return {"sync_us": 0.0}


@fast_init
@dataclass(frozen=True, eq=False)
class MoECost:
    """Dispatch, expert and combine time of every MoE layer, `[layers]` microseconds
    (`sync_us`: what the whole layer adds to the three, see `layer_defaults`)."""

    dispatch_us: np.ndarray
    experts_us: np.ndarray
    combine_us: np.ndarray
    traffic: Traffic
    mode: str
    sync_us: float = 0.0
    network_us: np.ndarray | float = 0.0    # the fabric's part of each dispatch and combine
    # the block's own ops the backend's kernels do not do (router; permute and weighting
    # unless low-latency kernels lay rows out and weight them): `StepKindParams.block_ops_parts`
    block_ops_us: np.ndarray | float = 0.0
    # the backend's own layout work, inside `experts_us` (`epsim.cost.layout`; 0: not charged)
    layout_us: np.ndarray | float = 0.0
    # what of each dispatch and combine runs off the compute stream, for two-batch overlap
    # (`epsim.cost.tbo`): the NIC's part behind a receive hook, or the whole exchange on a
    # communication stream; the rest occupies the compute stream
    dispatch_wire_us: np.ndarray | float = 0.0
    combine_wire_us: np.ndarray | float = 0.0

    @property
    def layer_us(self) -> np.ndarray:
        return (self.dispatch_us + self.experts_us + self.combine_us + self.block_ops_us
                + self.sync_us)

    # derived once per object: the fast engine prices one MoECost for many steps
    @derived
    def comm_us(self) -> np.ndarray:
        """[layers] dispatch + combine."""
        return self.dispatch_us + self.combine_us

    @derived
    def stage_rows(self) -> np.ndarray:
        """[3, layers] dispatch, experts, combine as rows."""
        return np.stack([self.dispatch_us, self.experts_us, self.combine_us])

    @derived
    def sums(self) -> tuple[float, float, float, float]:
        """(dispatch, experts, combine, network) summed over layers (µs)."""
        network = float(np.sum(self.network_us))
        if np.ndim(self.network_us) == 0:
            network *= self.experts_us.shape[-1]
        return (float(self.dispatch_us.sum()), float(self.experts_us.sum()),
                float(self.combine_us.sum()), network)

    @derived
    def layout_sum(self) -> float:
        """The backend's layout work summed over layers (µs; inside the experts' sum)."""
        if np.ndim(self.layout_us) == 0:
            return float(self.layout_us) * self.experts_us.shape[-1]
        return float(np.sum(self.layout_us))

    @derived
    def block_ops_sum(self) -> float:
        """Block ops summed over layers (µs)."""
        if np.ndim(self.block_ops_us) == 0:
            return float(self.block_ops_us) * self.experts_us.shape[-1]
        return float(np.sum(self.block_ops_us))


def received_layout_us(tr: Traffic, experts) -> np.ndarray:
    """[layers] the busiest rank's layout of the tokens it received (`StageParams` of the experts
    with `layout_bytes_per_token`: DeepEP normal's scatter and gather, `epsim.cost.quant`)."""
    received = (tr.nvl_recv + tr.rdma_recv + tr.self_copies).max(axis=-1)
    return received * experts.layout_bytes_per_token * 1e-3 / experts.params["hbm_gbps"]


def remote_slots_us(tr: Traffic, top_k: int, experts) -> np.ndarray:
    """[layers] the fused MoE kernel's work on the slots of other ranks' experts at the busiest
    rank (`StageParams.remote_slot_bytes`: no dispatch, so its kernels run over every one of
    the group's `tokens x top_k` slots, `epsim.cost.quant`)."""
    remote = np.maximum(tr.num_tokens * top_k - tr.pairs.max(axis=-1), 0.0)
    return remote * experts.remote_slot_bytes * 1e-3 / experts.params["hbm_gbps"]


TRTLLM_SCALES = np.array([0.5, 1.0, 2.0, 4.0])     # the launcher's candidate tiles / its centre


def trtllm_experts_us(params: CostParams, loads: np.ndarray, tr: Traffic,
                      tables: PlacementTables, experts, fraction: float, pairs: np.ndarray,
                      active: np.ndarray) -> np.ndarray:
    """[layers] the busiest rank's experts in FlashInfer's TRT-LLM MoE (Blackwell's fused
    kernel, `StageParams.reread_gbps`), as SGLang serves it: its warm-up autotune pass times
    the launcher's candidate token tiles {centre/2, centre, 2 centre, 4 centre} (the centre
    from the balanced share the rank's kernel sees: the group's tokens with the `none` backend,
    every rank holding them; else the rank's rows) and keeps the fastest, priced here as the
    cheapest under this model. A tile pads each expert's rows to whole tiles
    (`ExpertGemm.tile_rows`) and streams the expert's weights once per tile: the re-reads of
    `epsim.cost.rereads.reread_kb` at `reread_gbps`, on the roofline's memory side. The input's
    tokens whose slots lie on other ranks cost the fitted `token_us` each with the `none` backend
    (`epsim.cost.quant.remote_tokens`: routing, quantisation and finalize run over every token),
    and each candidate's launched token tiles past the live ones the fitted `exit_us` per CTA per
    SM (`epsim.cost.exiting_ctas`: the launch's worst case over the input's slots, the group's
    with the `none` backend), inside the autotuner's choice.

    Args:
        pairs, active: [..., layers, ranks] rows and active experts per rank (fused shared
            experts included).
    """
    m = params.model
    rows = rank_slot_rows(loads, tables, fraction)           # [..., layers, ranks, slots]
    spr = rows.shape[-1]
    share = (np.full(tr.pairs.shape, tr.num_tokens * fraction * m.top_k / spr)
             if params.backend == "none" else tr.pairs / spr)
    centre = trtllm_tile(share, m.weight_dtype, tuned=True)
    # the four candidates priced at once along a leading axis, [4, ..., layers, ranks]: every
    # entry the same arithmetic as pricing one candidate at a time (a tenth of the calls)
    scales = TRTLLM_SCALES.reshape((-1,) + (1,) * np.ndim(centre))
    tile = trtllm_ladder(centre * scales, m.weight_dtype)
    gemm = trtllm_gemm(params.gemm, tile, m.weight_dtype, m.top_k)
    reread = reread_kb(rows, tile, gemm.weight_bytes) / experts.reread_gbps
    live = even_row_tiles(pairs, active, tile)
    t = experts_rank_us(pairs, active, live, gemm, experts.params, reread)
    exit_us = experts.params.get("exit_us", 0.0)
    if exit_us and m.weight_dtype in EXIT_FORMATS:
        # the launch's worst case over the slots the rank's input holds (the group's with the
        # `none` backend, else its own pairs; fused shared experts: one more slot a token and
        # local expert each): the CTAs past its live tiles exit, per SM
        shared = params.fused_shared_experts
        slots = (np.full(tr.pairs.shape, tr.num_tokens * fraction * (m.top_k + shared))
                 if params.backend == "none" else pairs)
        t = t + exit_us * exiting_ctas_per_sm(slots, spr + shared, live, tile, gemm)
    t = t.min(axis=0)
    token_us = experts.params.get("token_us", 0.0)
    if token_us and params.backend == "none":
        # every rank routes, quantises and finalizes the group's tokens, its slots or not (a
        # dispatch backend hands its runner the rank's own pairs: DeepEP low-latency's
        # per-expert buffers run no routing or finalize over tokens)
        tokens = tr.num_tokens * tr.fraction
        t = t + token_us * remote_tokens(tokens, tr.pairs, m.top_k) \
            * remote_token_weight(m.weight_dtype, gemm.intermediate_size, m.top_k, tokens,
                                  gemm.num_sms)
    return t.max(axis=-1)


def moe_cost(params: CostParams, loads: np.ndarray, tokens_per_rank: np.ndarray,
             tables: PlacementTables, mode: str, fraction: float = 1.0,
             graph: bool = False) -> MoECost:
    """Dispatch, experts, combine and block ops of every MoE layer for one (micro-)batch.

    One cost path per stage, whatever the backend (docs/model.md, section 4): the experts are
    the kernel model plus, at EP > 1, the backend's own layout work where it was measured
    (`epsim.cost.layout`); the block ops are those the backend's kernels do not do
    (`StepKindParams.block_ops_parts`); dispatch and combine follow the network model, and
    nothing crosses a GPU at EP 1 (no dispatch, combine or layer sync there).

    Args:
        loads: [layers, experts] token-expert pairs of the whole batch (or [draws, layers,
            experts]: each draw priced alone, every result with a leading draws axis).
        tokens_per_rank: [ranks] tokens each EP rank dispatches (whole batch).
        mode: the DeepEP kernel mode ("" for other backends; `CostParams.kernel_modes`).
        fraction: the micro-batch's share of the batch (two-batch overlap: 0.5).
        graph: a CUDA-graph replay (device time only, `.../graph` components).
    """
    m, step = params.model, params.step(graph)
    tr = count_traffic(loads, tokens_per_rank, tables, params.dedup[mode], fraction,
                       params.max_nodes_per_token)
    pairs, active = tr.pairs, tr.active_experts
    if params.fused_shared_experts:
        # fused shared experts (EP 1, `epsim.cost.shared_experts`): one more expert per shared
        # expert in the kernel, with a row for every token
        pairs = pairs + params.fused_shared_experts * tr.num_tokens * tr.fraction
        active = active + params.fused_shared_experts
    if step.experts.reread_gbps:              # Blackwell's fused kernel: its tiles
        expert = trtllm_experts_us(params, loads, tr, tables, step.experts, fraction, pairs,
                                   active) + step.experts.host_us
    elif step.experts.masked_gemm is not None:    # DeepEP low latency's masked DeepGEMM
        gemm = step.experts.masked_gemm
        expert = experts_us(pairs, active, masked_rows(pairs, gemm, 0.0), gemm,
                            step.experts.params) + step.experts.host_us
    else:
        # DeepEP normal's runner (fitted with its layout): DeepGEMM's contiguous tiles
        gemm = contiguous_gemm(params.gemm) if step.experts.layout_bytes_per_token else params.gemm
        expert = even_experts_us(pairs, active, gemm, step.experts.params)
        if step.experts.served_tiles:        # SGLang's served tiles (`epsim.cost.served_tiles`)
            expert = expert * served_tiles.factor(tr.num_tokens * tr.fraction)
        expert = expert + step.experts.host_us
    if step.experts.layout_bytes_per_token:   # a runner fitted with its layout (quantised DeepEP)
        expert = expert + received_layout_us(tr, step.experts)
    if step.experts.remote_slot_bytes:        # the fused kernel over every slot (`none`)
        expert = expert + remote_slots_us(tr, m.top_k, step.experts)
    own = np.asarray(tokens_per_rank, dtype=np.float64) * fraction       # [ranks]
    block = block_ops_us(own, tr.pairs, m.hidden_size, m.num_experts, m.top_k,
                         step.block_ops.params, step.block_ops_parts[mode],
                         step.block_ops_engine) + step.block_ops_host[mode]
    layout = _layout_us(params, step.layout.get(mode), tr)
    if layout is not None:
        expert = expert + layout
    if params.parallel.tp_size == 1:          # one GPU holds every expert: nothing crosses
        zero = np.zeros(expert.shape)
        return MoECost(zero, expert, zero, tr, mode, 0.0, block_ops_us=block)
    if params.backend == "none":
        # all-gather and all-reduce over the tp_size GPUs (`epsim.cost.tp`; MoE-TP's reduce)
        gather, reduce = none_collectives_us(params, tr.num_tokens, graph)
        dispatch = np.full(expert.shape, gather)       # [layers] (or [steps, layers])
        combine = np.full(expert.shape, reduce)
        return MoECost(dispatch, expert, combine, tr, mode, step.sync_us, block_ops_us=block,
                       layout_us=0.0 if layout is None else layout, dispatch_wire_us=dispatch,
                       combine_wire_us=combine)
    send, back = step.dispatch[mode], step.combine[mode]
    pl = tables.placement
    slots = pl.num_physical                  # expert slots a low-latency kernel signals
    remote = slots - pl.slots_per_rank * pl.ranks_per_node      # ... those on other nodes
    # a chunked kernel (DeepEP normal) walks every token its busiest rank holds
    owner = own.max() if chunked(params.backend, mode) else 0.0
    dispatch = comm_us(tr, send.bytes_per_copy, send.params, params.l2_bytes, slots, remote,
                       owner, params.ranks_per_node - 1,
                       "dispatch" if owner else "") + send.host_us
    combine = comm_us(tr, back.bytes_per_copy, back.params, params.l2_bytes, slots, remote,
                      owner, params.ranks_per_node - 1, "combine" if owner else "") + back.host_us
    fabric = network_us(tr, params.transport)
    dispatch, combine = dispatch + fabric, combine + fabric
    if per_message(tr.dedup):      # receive-hook kernels: the NIC's part runs without SMs
        d_wire = np.minimum(background_us(tr, send.bytes_per_copy, send.params) + fabric,
                            dispatch)
        c_wire = np.minimum(background_us(tr, back.bytes_per_copy, back.params) + fabric,
                            combine)
    else:                          # DeepEP normal, NCCL: on a communication stream
        d_wire, c_wire = dispatch, combine
    return MoECost(dispatch, expert, combine, tr, mode, step.sync_us, fabric, block,
                   0.0 if layout is None else layout, d_wire, c_wire)


def _layout_us(params: CostParams, layout, tr: Traffic) -> np.ndarray | None:
    """[layers] (or [draws, layers]) the slowest rank's layout work of the backend over the
    pairs each rank receives, or None where it is not charged (EP 1, unmeasured)."""
    if layout is None:
        return None
    return layout_us(tr.pairs, params.model.hidden_size, layout.params).max(axis=-1)
