"""CostModel: one step's time from its per-layer, per-rank counts, all coefficients from a Profile.

An MoE layer in EP with DP attention is bulk-synchronous (docs/model.md):

    layer_us = attention (slowest rank) + dispatch + experts (slowest rank) + combine

or, with two-batch overlap, two half micro-batches whose communication hides behind the
other's compute: `max(2*compute_half, 2*comm_half) + min(compute_half, comm_half)`.
A step adds the dense layers, the LM head and a per-step overhead.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from epsim import vocab
from epsim.cost.attention import (BatchCounts, attention_defaults, attention_heads,
                                  attention_projections_us, attention_us, gemm_us, lm_head_us,
                                  measured_attention_us, overhead_defaults)
from epsim.cost.block_ops import PARTS as BLOCK_OPS_PARTS
from epsim.cost.block_ops import block_ops_defaults, block_ops_us
from epsim.cost.comm import (collective_defaults, collective_us, combine_bytes_per_copy,
                             comm_defaults, comm_us, dedup_for, l2_bytes,
                             dispatch_bytes_per_copy)
from epsim.cost.experts import (dense_gemm, dense_us, even_experts_us, experts_defaults,
                                model_gemm)
from epsim.cost.flash import DecodeKernel, attention_kernel_defaults
from epsim.cost.tables import PlacementTables
from epsim.cost.provenance import Ledger
from epsim.cost.timing import TIME_MODES, StageTiming, stage_timing
from epsim.cost.traffic import Traffic, count_traffic
from epsim.errors import SpecError
from epsim.profile import GRAPH, Profile, load_profile, mode_path
from epsim.cost.transport import network_us, transport_path
from epsim.eplb.placement import ranks_per_node
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import ModelSpec


def layer_defaults() -> dict[str, float]:
    """Parameters of `<backend>/moe_layer`: `sync_us`, what a whole MoE layer adds to its
    dispatch, experts and combine timed apart (ranks reaching each collective at different
    times; negative where stages overlap). The live bench measures it; unmeasured, 0."""
    return {"sync_us": 0.0}


def max_nodes_per_token(model: ModelSpec, num_nodes: int) -> float | None:
    """Nodes one token's experts may span under group-limited routing, or None (no limit).

    DeepSeek-V3 picks `topk_group` of `num_expert_groups` groups per token; with experts laid
    out contiguously a group covers `num_nodes / num_expert_groups` nodes (at least one node's
    share), so a token reaches at most `topk_group * max(1, num_nodes / groups)` nodes
    (EP 64 on 8 nodes: 4 of 8).
    """
    groups = model.num_expert_groups
    if groups <= 1 or model.topk_group >= groups or num_nodes <= 1:
        return None
    cap = model.topk_group * max(1.0, num_nodes / groups)
    return cap if cap < num_nodes else None


class ProfileHardwareWarning(UserWarning):
    """The profile was measured on another GPU than the cluster's; its fits are not used."""


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
    # the block's own ops the three stages do not hold (router; permute and weighting where
    # the experts component is the bare grouped GEMM): `CostModel.block_ops_parts`
    block_ops_us: np.ndarray | float = 0.0

    @property
    def layer_us(self) -> np.ndarray:
        return (self.dispatch_us + self.experts_us + self.combine_us + self.block_ops_us
                + self.sync_us)

    # derived once per object: the fast engine prices one MoECost for many steps
    @cached_property
    def comm_us(self) -> np.ndarray:
        """[layers] dispatch + combine."""
        return self.dispatch_us + self.combine_us

    @cached_property
    def stage_rows(self) -> np.ndarray:
        """[3, layers] dispatch, experts, combine as rows."""
        return np.stack([self.dispatch_us, self.experts_us, self.combine_us])

    @cached_property
    def sums(self) -> tuple[float, float, float, float]:
        """(dispatch, experts, combine, network) summed over layers (µs)."""
        network = float(np.sum(self.network_us))
        if np.ndim(self.network_us) == 0:
            network *= self.experts_us.shape[-1]
        return (float(self.dispatch_us.sum()), float(self.experts_us.sum()),
                float(self.combine_us.sum()), network)

    @cached_property
    def block_ops_sum(self) -> float:
        """Block ops summed over layers (µs)."""
        if np.ndim(self.block_ops_us) == 0:
            return float(self.block_ops_us) * self.experts_us.shape[-1]
        return float(np.sum(self.block_ops_us))


@dataclass(frozen=True)
class _TokenTerms:
    """What a step costs that depends only on its tokens per rank (`CostModel._token_terms`):
    CUDA graph or eager, one layer's shared experts, the LM head, one dense layer's MLP, the
    per-step overhead (µs, slowest rank each), the busiest EP rank's tokens."""

    graph: bool
    shared_us: float
    lm_head_us: float
    dense_mlp_us: float
    overhead_us: float
    max_tokens: float


@dataclass(frozen=True, eq=False)
class StepCost:
    """One step's time, by part. Per-layer arrays are `[moe_layers]` float64 microseconds.

    With two-batch overlap, the part arrays hold both micro-batches' work and `layer_us` the
    overlapped layer time, so `layer_us` may be less than the sum of the parts; `traffic` is
    then one micro-batch's (`traffic.fraction` = 0.5).
    """

    attention_us: np.ndarray
    dispatch_us: np.ndarray
    experts_us: np.ndarray
    combine_us: np.ndarray
    shared_experts_us: np.ndarray
    block_ops_us: np.ndarray
    layer_us: np.ndarray
    dense_us: float
    overhead_us: float
    step_us: float
    phase: str
    mode: str
    traffic: Traffic
    parts: np.ndarray        # [7, layers]: the seven per-layer arrays above as rows, in order


@dataclass(frozen=True, eq=False)
class _MoEStack:
    """A few MoE costs' arrays stacked for `CostModel.decode_steps`: experts, block ops and
    dispatch + combine `[moes, layers]`, the three stages `[moes, 3, layers]`, sync `[moes]`."""

    experts: np.ndarray
    block: np.ndarray
    comm: np.ndarray
    stages: np.ndarray
    sync: np.ndarray


@dataclass(frozen=True, eq=False)
class StepBlock:
    """k decode steps priced at once (`CostModel.decode_steps`): `step_us` [k] and `parts`
    [k, 7, layers] (`StepCost.parts` of each step); `cost(i, moe)` is step i's StepCost."""

    step_us: np.ndarray
    parts: np.ndarray
    dense_us: float | np.ndarray      # [k] with dense layers (their attention differs by step)
    overhead_us: float
    phase: str
    attention_us: np.ndarray          # [k] one layer's attention (slowest rank, one micro-batch)
    terms: "_TokenTerms"
    scale: float = 1.0                # micro-batches per step (two-batch overlap: 2)

    def dense(self, i: int) -> float:
        """Step i's dense layers and LM head (µs)."""
        return float(self.dense_us[i]) if np.ndim(self.dense_us) else self.dense_us

    def cost(self, i: int, moe: MoECost) -> StepCost:
        p = self.parts[i]
        return StepCost(attention_us=p[0], dispatch_us=p[1], experts_us=p[2], combine_us=p[3],
                        shared_experts_us=p[4], block_ops_us=p[5], layer_us=p[6],
                        dense_us=self.dense(i), overhead_us=self.overhead_us,
                        step_us=float(self.step_us[i]), phase=self.phase, mode=moe.mode,
                        traffic=moe.traffic, parts=p)


def _overlapped(compute: np.ndarray, comm: np.ndarray, tbo: bool) -> tuple[np.ndarray, float]:
    """(layer time, micro-batches per step) of one MoE layer from its compute and communication
    (`[..., layers]`): with two-batch overlap two micro-batches, each one's communication
    hidden behind the other's compute as far as it goes; else compute, then communication."""
    if tbo:
        return np.maximum(2.0 * compute, 2.0 * comm) + np.minimum(compute, comm), 2.0
    return compute + comm, 1.0


class CostModel:
    """Predicts step and MoE-layer times of one deployment.

    Args:
        model, cluster, deployment: the specs; EP ranks `deployment.ep_size`, ranks per node
            `epsim.eplb.ranks_per_node`.
        profile: coefficients per component; unset ones take datasheet defaults. A profile
            measured on another GPU type is ignored with a ProfileHardwareWarning.
        time_mode: "auto" (SGLang: decode steps within `cuda_graph_max_bs` replay CUDA graphs,
            device time; others eager, device + host overhead), "graph" or "eager" for all.
    """

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, deployment: DeploymentSpec,
                 profile: Profile | None = None, time_mode: str = "auto"):
        self.model, self.cluster, self.deployment = model, cluster, deployment
        self.profile = profile if profile is not None else load_profile(shared=True)
        hw = cluster.hardware
        self.num_ranks = deployment.ep_size
        self.ranks_per_node = ranks_per_node(self.num_ranks, cluster.gpus_per_node_resolved)
        self.num_nodes = self.num_ranks // self.ranks_per_node
        self.backend = deployment.moe_a2a_backend
        self.tp_size = 1 if deployment.enable_dp_attention else self.num_ranks
        self.profile_applies = self.profile.hardware == cluster.gpu or not self.profile.components
        if not self.profile_applies:
            warnings.warn(f"profile {self.profile.name or self.profile.path} was measured on "
                          f"{self.profile.hardware}; the cluster is {cluster.gpu}: using datasheet "
                          f"defaults for {cluster.gpu}", ProfileHardwareWarning, stacklevel=2)
        modes = vocab.DEEPEP_MODES if self.backend == "deepep" else ("",)
        self._mode = {phase: deployment.deepep_mode_for(phase) if self.backend == "deepep" else ""
                      for phase in ("prefill", "decode")}
        if time_mode not in TIME_MODES:
            raise SpecError(f"mode ({time_mode!r}) must be one of {list(TIME_MODES)}")
        self.time_mode = time_mode
        dtype = deployment.dispatch_dtype
        # each stage in an eager step and in a CUDA-graph step (`epsim.cost.timing`): decode
        # steps SGLang replays as CUDA graphs (batches up to cuda_graph_max_bs) pay device time
        # only; eager steps add the host overhead, fitted on its own, to the device time. Where
        # no device-only timing exists (`torch`) the eager component serves both.
        self.graph_enabled = not deployment.disable_cuda_graph
        stages = [(kind, mode) for kind in ("dispatch", "combine") for mode in modes] \
            if self.backend != "none" else []
        self.timings: dict[tuple[str, str, bool], StageTiming] = {}
        self.comm_params, self.graph_comm_params = {}, {}
        for kind, mode in stages:
            path = mode_path(mode, kind, dtype)
            defaults = comm_defaults(self.backend, mode, cluster)
            eager, graph = (self._timing(kind, path, e) for e in (True, False))
            self.timings[(kind, mode, True)], self.timings[(kind, mode, False)] = eager, graph
            self.comm_params[(kind, mode)] = self._params(self.backend, kind, eager.mode_path,
                                                          defaults)
            self.graph_comm_params[(kind, mode)] = self._params(self.backend, kind,
                                                                graph.mode_path, defaults)
        path = mode_path("", "experts", dtype)
        eager, graph = (self._timing("experts", path, e) for e in (True, False))
        self.timings[("experts", "", True)], self.timings[("experts", "", False)] = eager, graph
        defaults = experts_defaults(hw, model.weight_dtype)
        self.experts_params = self._params(self.backend, "experts", path, defaults)  # or any/
        if eager.device_only:          # device time + host overhead: the graph fit is the device's
            self.experts_params = self._params(self.backend, "experts", eager.mode_path,
                                               self.experts_params)
        self.graph_experts_params = self._params(self.backend, "experts", graph.mode_path,
                                                 self.experts_params)
        self.collective_params = self._params("none", "allreduce", "", collective_defaults(cluster))
        self.allgather_params = self._params("none", "allgather", "", self.collective_params)
        self.sync_us = self._params(self.backend, "moe_layer", "", layer_defaults())["sync_us"]
        self.graph_sync_us = self._params(self.backend, "moe_layer", "graph",
                                          {"sync_us": self.sync_us})["sync_us"]
        self.attention_params = self._params("any", "attention", "", attention_defaults(hw))
        self.overhead_params = self._params("any", "step_overhead", "", overhead_defaults())
        # the scale-out path of this backend over the cluster's network (a separate term:
        # fabric latency and host-proxy messages, added where ranks span nodes)
        self.transport = transport_path(self.backend, cluster.network_resolved.kind)
        self.max_nodes_per_token = max_nodes_per_token(model, self.num_nodes)
        self.gemm = model_gemm(model, cluster.gpu)           # the routed experts' grouped GEMM
        # single-GPU kernels measured device-only (`any/dense/graph`, `any/attention_*/graph`):
        # dense MLPs (dense layers, shared experts) with the experts' physics, attention as its
        # projections (a dense GEMM) plus the fitted decode and prefill kernels; None: the
        # datasheet rooflines of section 5 of docs/model.md
        self.dense_params = self._kernel("dense")
        decode, prefill = self._kernel("attention_decode"), self._kernel("attention_prefill")
        self.attention_kernels = (decode, prefill) if decode and prefill else None
        self._decode_kernel = DecodeKernel(*attention_heads(model, self.tp_size),
                                           self.gemm.num_sms, decode) if decode else None
        self._token_ranges = self._fitted_ranges(modes)
        self.ledger = Ledger()               # what the costed steps spent, for `provenance`
        # the block's own ops (router, permute, top-k weighting; `epsim.cost.block_ops`):
        # device time from `any/block_ops/graph`, an eager step adds `any/block_ops/host`
        self.block_ops_timings = {eager: stage_timing(self.profile, "any", "block_ops", "", eager)
                                  if self.profile_applies else
                                  StageTiming("block_ops", eager, "", GRAPH, False)
                                  for eager in (True, False)}
        self.block_ops_params = {eager: self._params("any", "block_ops", t.mode_path,
                                                     block_ops_defaults(hw))
                                 for eager, t in self.block_ops_timings.items()}
        self.block_ops_parts = {eager: self._block_ops_parts(eager) for eager in (True, False)}
        self._terms_memo: dict[tuple, _TokenTerms] = {}
        self._projections_memo: dict[bytes, np.ndarray] = {}     # tokens -> [dp] µs
        self._host_rows: dict[tuple[bool, str], np.ndarray] = {}
        self._stack_memo: tuple[dict[int, int], list[MoECost], _MoEStack] | None = None
        self._ledger_memo: dict[tuple, tuple[MoECost, np.ndarray]] = {}

    def _block_ops_parts(self, eager: bool) -> tuple[str, ...]:
        """The block ops a step adds on its own (docs/model.md, "The block's own ops"): the
        router always (the bench forces routing, so no measured stage holds it); the permute
        and the weighting only where the experts stage is costed by the bare grouped GEMM
        (`any/experts...` or datasheet): a backend's own experts fit (`<backend>/experts...`)
        already holds its layout work around the GEMM."""
        key = self.timings[("experts", "", eager)].key
        return ("router",) if key.split("/")[0] == self.backend else BLOCK_OPS_PARTS

    def _fitted_ranges(self, modes: tuple[str, ...]) -> list[tuple[str, str, str, float, float]]:
        """Warn (ExtrapolationWarning) now where EP size or hidden size lie outside what the
        used fitted components saw; return their token ranges for `moe` to check."""
        if not self.profile_applies:
            return []
        # the components the steps read: each stage's in eager and in graph steps (`timings`)
        used = list(dict.fromkeys((self.backend, t.kind, t.mode_path)
                                  for t in self.timings.values() if t.key))
        if self.backend == "none":
            used.append(("none", "allreduce", ""))
        out, warned = [], set()
        for backend, kind, mode in used:
            comp = self.profile.component(backend, kind, mode)
            if comp is None or comp.source != "fit":
                continue
            for name, value in (("ep_size", self.num_ranks), ("hidden_size", self.model.hidden_size)):
                if name not in warned and comp.outside(**{name: value}):
                    self.profile.warn_outside(backend, kind, mode, **{name: value})
                    warned.add(name)                  # one warning per quantity, not per part
            if "num_tokens_per_rank" in comp.valid_range:
                out.append((backend, kind, mode, *comp.valid_range["num_tokens_per_rank"]))
        return out

    def _check_tokens(self, tokens_per_rank: np.ndarray) -> None:
        """Warn once per component when a batch's tokens per rank leave its fitted range."""
        most = float(tokens_per_rank.max()) if tokens_per_rank.size else 0.0
        if most <= 0:                                 # an idle step predicts nothing
            return
        for i, (backend, kind, mode, lo, hi) in enumerate(self._token_ranges):
            if not lo <= most <= hi:
                self.profile.warn_outside(backend, kind, mode, num_tokens_per_rank=most)
                self._token_ranges = self._token_ranges[:i] + self._token_ranges[i + 1:]
                break

    def _timing(self, kind: str, mode_path: str, eager: bool) -> StageTiming:
        if not self.profile_applies:
            return StageTiming(kind, eager, "", mode_path, False)
        return stage_timing(self.profile, self.backend, kind, mode_path, eager)

    def _kernel(self, kind: str) -> dict[str, float] | None:
        """Parameters of a fitted single-GPU kernel component `any/<kind>/graph`, or None."""
        if not self.profile_applies or self.profile.resolve("any", kind, GRAPH) is None:
            return None
        defaults = (attention_kernel_defaults(self.cluster.hardware) if kind.startswith("attention")
                    else experts_defaults(self.cluster.hardware, self.model.weight_dtype))
        return self.profile.params("any", kind, GRAPH, defaults=defaults)

    def _gemm_params(self, experts_params: dict[str, float]) -> dict[str, float]:
        """Rates of a dense GEMM: the fitted dense MLP's, else the experts'."""
        return self.dense_params or experts_params

    def _host_row(self, graph: bool, mode: str) -> np.ndarray:
        """[3] host overhead of dispatch, experts and combine in one layer of a step."""
        key = (graph, mode)
        row = self._host_rows.get(key)
        if row is None:
            row = self._host_rows[key] = np.array(
                [self.host_us(kind, mode, graph) for kind in ("dispatch", "experts", "combine")])
        return row

    def host_us(self, kind: str, mode: str, graph: bool) -> float:
        """Host overhead one `kind` stage adds in a step (0 in a CUDA-graph step)."""
        if graph:
            return 0.0
        timing = self.timings.get((kind, mode if kind != "experts" else "", True))
        return timing.host_us if timing is not None else 0.0      # `none`: no a2a stages

    def _params(self, backend: str, kind: str, mode: str,
                defaults: dict[str, float]) -> dict[str, float]:
        if not self.profile_applies:
            return dict(defaults)
        return self.profile.params(backend, kind, mode, defaults=defaults)

    def mode_for(self, phase: str) -> str:
        """The deepep kernel mode of a phase (SGLang's `deepep_mode` rule); "" for others."""
        return self._mode[phase]

    def ep_tokens(self, batch: BatchCounts) -> np.ndarray:
        """[ranks] tokens each EP rank dispatches: its own with DP attention, else an even
        split of the one DP group's tokens (SGLang scatters them before dispatch)."""
        if self.deployment.enable_dp_attention:
            return batch.tokens
        return np.full(self.num_ranks, float(batch.tokens.sum()) / self.num_ranks)

    @property
    def micro_batch_fraction(self) -> float:
        """The share of a batch one MoE dispatch carries: 0.5 under two-batch overlap (two
        micro-batches), else 1 (`moe`'s `fraction`)."""
        return 0.5 if self.deployment.enable_two_batch_overlap else 1.0

    def uses_graph(self, batch: BatchCounts) -> bool:
        """Whether a step is costed as a CUDA-graph replay (device time only).

        `time_mode` "auto" follows SGLang: a pure decode step within `cuda_graph_max_bs` tokens
        per rank replays a CUDA graph, others run eagerly; "graph" / "eager" force one."""
        return self.graph_step(batch.phase, float(batch.tokens.max(initial=0.0)))

    def graph_step(self, phase: str, max_tokens_per_rank: float) -> bool:
        """`uses_graph` for a step of `phase` whose busiest rank runs `max_tokens_per_rank`."""
        if self.time_mode != "auto":
            return self.time_mode == "graph"
        return (self.graph_enabled and phase == "decode"
                and max_tokens_per_rank <= self.deployment.cuda_graph_max_bs)

    def moe(self, loads: np.ndarray, tokens_per_rank: np.ndarray, tables: PlacementTables,
            phase: str = "decode", fraction: float = 1.0, graph: bool = False) -> MoECost:
        """Dispatch, experts and combine of every MoE layer for one (micro-)batch.

        Args:
            loads: [layers, experts] token-expert pairs of the whole batch.
            tokens_per_rank: [ranks] tokens each EP rank dispatches (whole batch).
            fraction: the micro-batch's share of the batch (two-batch overlap: 0.5).
            graph: a CUDA-graph replay (device time only, `.../graph` components).
        """
        mode = self.mode_for(phase)
        dedup = dedup_for(self.backend, mode)
        if self._token_ranges:
            self._check_tokens(np.asarray(tokens_per_rank))
        tr = count_traffic(loads, tokens_per_rank, tables, dedup, fraction,
                           self.max_nodes_per_token)
        m = self.model
        experts_params = self.graph_experts_params if graph else self.experts_params
        comm_params = self.graph_comm_params if graph else self.comm_params
        expert = even_experts_us(tr.pairs, tr.active_experts, self.gemm,
                                 experts_params) + self.host_us("experts", "", graph)
        own = np.asarray(tokens_per_rank, dtype=np.float64) * fraction       # [ranks]
        block = block_ops_us(own, tr.pairs, m.hidden_size, m.num_experts, m.top_k,
                             self.block_ops_params[not graph],
                             self.block_ops_parts[not graph]) + self.block_ops_host_us(graph)
        if self.backend == "none":
            hidden_bytes = tr.num_tokens * m.hidden_size * 2.0
            gather = collective_us(hidden_bytes, self.num_ranks, self.num_nodes, 1,
                                   self.allgather_params) if self.tp_size == 1 else 0.0
            reduce = collective_us(hidden_bytes, self.num_ranks, self.num_nodes, 2,
                                   self.collective_params)
            dispatch = np.full(expert.shape, float(gather))       # [layers] (or [steps, layers])
            combine = np.full(expert.shape, float(reduce))
        else:
            l2 = l2_bytes(self.cluster.gpu)
            dispatch = comm_us(tr, dispatch_bytes_per_copy(
                m.hidden_size, self.deployment.dispatch_dtype, m.top_k, dedup),
                comm_params[("dispatch", mode)], l2) + self.host_us("dispatch", mode, graph)
            combine = comm_us(tr, combine_bytes_per_copy(m.hidden_size),
                              comm_params[("combine", mode)], l2) + self.host_us("combine", mode, graph)
            fabric = network_us(tr, self.transport)
            dispatch, combine = dispatch + fabric, combine + fabric
            return MoECost(dispatch, expert, combine, tr, mode,
                           self.graph_sync_us if graph else self.sync_us, fabric, block)
        return MoECost(dispatch, expert, combine, tr, mode,
                       self.graph_sync_us if graph else self.sync_us, block_ops_us=block)

    def block_ops_host_us(self, graph: bool) -> float:
        """Host overhead the block ops add in a step (0 in a CUDA-graph step)."""
        return 0.0 if graph else self.block_ops_timings[True].host_us

    def step(self, batch: BatchCounts, loads: np.ndarray | None, tables: PlacementTables,
             moe: MoECost | None = None) -> StepCost:
        """The time of one forward step of every DP rank (lockstep).

        Args:
            batch: per-DP-rank counts (`[dp]`, dp = ep_size with DP attention, else 1).
            loads: [moe_layers, experts] token-expert pairs of the whole batch.
            tables: the current placement's `build_tables`.
            moe: this step's `moe(...)` when the caller priced it already (the fast engine
                prices many steps' MoE layers in one call); `loads` is then unused.
        """
        tbo = self.deployment.enable_two_batch_overlap
        fraction = self.micro_batch_fraction
        part = batch.scaled(fraction) if tbo else batch
        attn = self._attention_layer_us(part)
        terms = self._token_terms(batch, part)
        graph, shared = terms.graph, terms.shared_us
        if moe is None:
            moe = self.moe(loads, self.ep_tokens(batch), tables, batch.phase, fraction, graph)
        compute = (attn + shared) + moe.experts_us + moe.block_ops_us      # [layers]
        layer, scale = _overlapped(compute, moe.comm_us, tbo)
        if moe.sync_us:
            layer = layer + scale * moe.sync_us            # once per micro-batch's collectives
        # `decode_steps` repeats this arithmetic over many steps: change the two together
        num_layers = layer.shape[0]
        dense = terms.lm_head_us
        if self.model.num_dense_layers:
            # without two-batch overlap `part` is `batch`: its attention is priced already
            whole = attn if part is batch else self._attention_layer_us(batch)
            dense += self.model.num_dense_layers * (whole + terms.dense_mlp_us)
        overhead = terms.overhead_us
        step = float(layer.sum()) + dense + overhead
        self._record(graph, moe.mode, attn, moe, shared, dense, overhead, scale, num_layers,
                     terms.max_tokens)
        parts = np.empty((7, num_layers))     # one block, so a recorder sums all parts at once
        parts[0] = attn * scale
        parts[1:4] = moe.stage_rows
        parts[4] = shared * scale
        parts[5] = moe.block_ops_us
        parts[6] = layer
        if scale != 1.0:
            parts[1:4] *= scale
            parts[5] *= scale
        return StepCost(
            attention_us=parts[0], dispatch_us=parts[1], experts_us=parts[2], combine_us=parts[3],
            shared_experts_us=parts[4], block_ops_us=parts[5], layer_us=parts[6], dense_us=dense,
            overhead_us=overhead,
            step_us=step, phase=batch.phase, mode=moe.mode, traffic=moe.traffic, parts=parts)

    def leaps(self, batch: BatchCounts) -> bool:
        """Whether `decode_steps` prices steps of this batch shape: a pure decode batch with
        neither TP attention nor a split-KV decode launch (the terms `decode_steps` does not
        vectorise; the engine then steps one at a time)."""
        if not (batch.phase == "decode" and self.tp_size == 1):
            return False
        if self.attention_kernels is None:      # the datasheet roofline: elementwise in contexts
            return True
        if self._decode_kernel is None:
            return False
        part = batch.scaled(0.5) if self.deployment.enable_two_batch_overlap else batch
        return not any(self._decode_kernel.counts(b.decode_tokens).may_split for b in (batch, part))

    def decode_steps(self, batch: BatchCounts, contexts: np.ndarray,
                     moes: list[MoECost]) -> "StepBlock":
        """`step(batch, None, tables, moe=moes[i])` for k decode steps that differ only in
        their contexts, at once (the engine's leap over a saturated decode batch,
        `epsim.sim.leap`): `step`'s arithmetic on `[k, ...]` arrays, so the same bits as k
        calls (tests/epsim/sim/test_leap.py holds the two together).

        Args:
            batch: the steps' counts (`leaps(batch)`); its `decode_context` is unused.
            contexts: [k, dp] each step's `decode_context`.
            moes: k MoE costs, one per step (a pool's rows, shared between steps).
        `ledger` is left alone: `record_decode_steps` adds the steps that are kept.
        """
        tbo = self.deployment.enable_two_batch_overlap
        part = batch.scaled(0.5) if tbo else batch          # as `step`: one micro-batch
        terms = self._token_terms(batch, part)
        shared = terms.shared_us
        attn = self._decode_attention(part, contexts * 0.5 if tbo else contexts)     # [k]
        index, stacked = self._moe_stack(moes)
        pick = np.fromiter((index[id(m)] for m in moes), dtype=np.int64, count=len(moes))
        experts, block, comm = stacked.experts[pick], stacked.block[pick], stacked.comm[pick]
        compute = (attn[:, None] + shared) + experts + block                    # [k, layers]
        layer, scale = _overlapped(compute, comm, tbo)
        if stacked.sync.any():
            layer = layer + scale * stacked.sync[pick][:, None]
        dense, overhead = terms.lm_head_us, terms.overhead_us
        if self.model.num_dense_layers:         # [k]: their attention follows the contexts
            whole = self._decode_attention(batch, contexts) if tbo else attn
            dense = dense + self.model.num_dense_layers * (whole + terms.dense_mlp_us)
        step_us = layer.sum(axis=1) + dense + overhead
        num_layers = layer.shape[1]
        parts = np.empty((len(moes), 7, num_layers))
        parts[:, 0] = attn[:, None] * scale
        parts[:, 1:4] = stacked.stages[pick]
        parts[:, 4] = shared * scale
        parts[:, 5] = block
        parts[:, 6] = layer
        if tbo:
            parts[:, 1:4] *= scale
            parts[:, 5] *= scale
        return StepBlock(step_us, parts, dense, overhead, batch.phase, attn, terms, scale)

    def _decode_attention(self, batch: BatchCounts, contexts: np.ndarray) -> np.ndarray:
        """[k] `_attention_layer_us` of k decode steps of `batch` whose contexts are `contexts`
        ([k, dp]): the slowest rank's projections and decode kernel (or the datasheet
        roofline), the same bits."""
        if self.attention_kernels is None:
            return attention_us(replace(batch, decode_context=contexts), self.model,
                                self.attention_params).max(axis=1)
        proj = self._projections(batch.tokens, self._gemm_params(self.experts_params))
        per_rank = proj + self._decode_kernel.us(batch.decode_tokens, contexts)     # [k, dp]
        return np.where(batch.tokens > 0, per_rank, 0.0).max(axis=1)

    def _moe_stack(self, moes: list[MoECost]) -> tuple[dict[int, int], "_MoEStack"]:
        """The arrays of the distinct MoE costs among `moes` stacked (`[distinct, layers]`)
        and each one's row by `id`, remembered for the last set (a pool's rows, asked for at
        every leap over it, in whatever order its steps drew them)."""
        if self._stack_memo is not None:
            index, held, stacked = self._stack_memo
            if all(id(m) in index and held[index[id(m)]] is m for m in moes):
                return index, stacked
        distinct = list({id(m): m for m in moes}.values())
        stacked = _MoEStack(
            np.stack([m.experts_us for m in distinct]),
            np.stack([np.broadcast_to(m.block_ops_us, m.experts_us.shape) for m in distinct]),
            np.stack([m.comm_us for m in distinct]), np.stack([m.stage_rows for m in distinct]),
            np.array([m.sync_us for m in distinct]))
        index = {id(m): i for i, m in enumerate(distinct)}
        self._stack_memo = (index, distinct, stacked)
        return index, stacked

    def record_decode_steps(self, block: "StepBlock", moes: list[MoECost]) -> None:
        """Add the first `len(moes)` steps of a `decode_steps` block to `ledger`, as `step`
        would have one by one."""
        terms, num_layers = block.terms, block.parts.shape[2]
        per_step_dense = bool(np.ndim(block.dense_us))
        dense = 0.0 if per_step_dense else block.dense_us
        # a row per distinct MoE cost, remembered while its pool serves (each leap asks again)
        memo, base = self._ledger_memo, []
        for m in moes:
            key = (id(m), terms.graph, terms.shared_us, dense, block.overhead_us, block.scale,
                   num_layers)
            hit = memo.get(key)
            if hit is None or hit[0] is not m:
                if len(memo) >= 64:
                    memo.clear()
                hit = memo[key] = (m, self._ledger_row(terms.graph, m.mode, 0.0, m,
                                                       terms.shared_us, dense, block.overhead_us,
                                                       block.scale, num_layers))
            base.append(hit[1])
        rows = np.stack(base)
        rows[:, 0] = block.attention_us[:len(moes)] * block.scale * num_layers  # as `_ledger_row`
        if per_step_dense:
            rows[:, 5] = block.dense_us[:len(moes)]
        self.ledger.add_rows(terms.graph, moes[0].mode, rows, terms.max_tokens)

    def _token_terms(self, batch: BatchCounts, part: BatchCounts) -> "_TokenTerms":
        """The parts of a step that depend only on its tokens per rank (not on contexts or
        loads), remembered for the last few batch shapes: a run repeats few of them."""
        key = (batch.tokens.tobytes(), batch.sampled_tokens.tobytes(), batch.phase)
        hit = self._terms_memo.get(key)
        if hit is not None:
            return hit
        m = self.model
        graph = self.uses_graph(batch)
        experts_params = self.graph_experts_params if graph else self.experts_params
        shared = float(self._mlp_us(part.tokens, m.num_shared_experts * m.moe_intermediate_size,
                                    experts_params).max()) if m.num_shared_experts else 0.0
        lm_head = float(lm_head_us(batch.sampled_tokens, m, self._gemm_params(experts_params),
                                   self.tp_size).max())
        dense_mlp = float(self._mlp_us(batch.tokens, m.intermediate_size, experts_params).max()
                          ) if m.num_dense_layers else 0.0
        overhead = (self.overhead_params["base_us"]
                    + self.overhead_params["per_layer_us"] * m.num_layers)
        terms = _TokenTerms(graph, shared, lm_head, dense_mlp, overhead,
                            float(self.ep_tokens(batch).max(initial=0.0)))
        if len(self._terms_memo) >= 64:
            self._terms_memo.clear()
        self._terms_memo[key] = terms
        return terms

    def record_layer(self, moe: MoECost, graph: bool, max_tokens: float) -> None:
        """Add one MoE layer costed alone (`epsim cost`) to `ledger`."""
        self._record(graph, moe.mode, 0.0, moe, 0.0, 0.0, 0.0, 1.0, moe.experts_us.shape[0],
                     max_tokens)

    def _record(self, graph: bool, mode: str, attn: float, moe: MoECost, shared: float,
                dense: float, overhead: float, scale: float, num_layers: int,
                max_tokens: float) -> None:
        """Add one step's parts to `ledger` (for the provenance shares)."""
        self.ledger.add(graph, mode, self._ledger_row(graph, mode, attn, moe, shared, dense,
                                                      overhead, scale, num_layers), max_tokens)

    def _ledger_row(self, graph: bool, mode: str, attn: float, moe: MoECost, shared: float,
                    dense: float, overhead: float, scale: float, num_layers: int) -> np.ndarray:
        """[len(provenance.COLUMNS)] one step's parts as `ledger` sums them."""
        host = self._host_row(graph, mode) * num_layers * scale
        dispatch, experts, combine, network = moe.sums
        network *= scale
        return np.array([attn * scale * num_layers, dispatch * scale - network, experts * scale,
                         combine * scale - network, shared * scale * num_layers, dense, overhead,
                         host[0], host[1], host[2], moe.sync_us * scale * num_layers,
                         2.0 * network, moe.block_ops_sum * scale,
                         self.block_ops_host_us(graph) * num_layers * scale])

    def _mlp_us(self, tokens: np.ndarray, width: int, experts_params: dict[str, float]) -> np.ndarray:
        """[dp] a dense SwiGLU MLP of `width` on each rank's tokens: the fitted dense kernel
        (`epsim.cost.experts.dense_us`), else the datasheet roofline with the experts' rates."""
        m = self.model
        if self.dense_params is None:
            params = float(3 * m.hidden_size * width)
            return gemm_us(params * m.weight_bytes_per_param, 2.0 * params, tokens, experts_params,
                           self.tp_size)
        gemm = dense_gemm(m.hidden_size, max(width // self.tp_size, 1), m.weight_bytes_per_param,
                          self.cluster.gpu)
        return dense_us(tokens, gemm, self.dense_params)

    def _projections(self, tokens: np.ndarray, projections: dict[str, float]) -> np.ndarray:
        """[dp] `attention_projections_us` of `tokens`, remembered per batch shape (they depend
        on the tokens alone; read-only)."""
        key = tokens.tobytes()
        proj = self._projections_memo.get(key)
        if proj is None:
            if len(self._projections_memo) >= 64:
                self._projections_memo.clear()
            proj = self._projections_memo[key] = attention_projections_us(
                tokens, self.model, projections, self.tp_size)
            proj.flags.writeable = False
        return proj

    def _attention_layer_us(self, batch: BatchCounts) -> float:
        """Slowest rank's attention of one layer, plus the TP all-reduce without DP attention."""
        if self.attention_kernels is not None:
            decode, prefill = self.attention_kernels
            projections = self._gemm_params(self.experts_params)
            proj = self._projections(batch.tokens, projections)
            t = float(measured_attention_us(batch, self.model, decode, prefill, projections,
                                            self.gemm.num_sms, self.tp_size, proj,
                                            self._decode_kernel).max())
        else:
            t = float(attention_us(batch, self.model, self.attention_params, self.tp_size).max())
        if self.tp_size > 1:
            hidden_bytes = float(batch.tokens.sum()) * self.model.hidden_size * 2.0
            t += float(collective_us(hidden_bytes, self.num_ranks, self.num_nodes, 2,
                                     self.collective_params))
        return t
