"""CostParams: every coefficient a deployment's prices read, frozen, grouped the way a step
reads them (`epsim.cost.resolve.resolve_params` builds it from a Profile in one step).

The `CostModel` built on it only prices. New terms slot in as new fields:
  eager, graph      `StepKindParams`: what an eager step (device + host) and a CUDA-graph replay
                    (device only) read — dispatch and combine per kernel mode, experts (the
                    kernel model for every backend), block ops, the backend's own layout work
                    (`StageParams`: timing + coefficients each), which block ops are added, sync
  collectives       `none/allreduce` and `none/allgather` (the `none` backend, TP attention)
  attention         the datasheet roofline and the fitted decode / prefill kernels; the
                    attention block's own ops (fitted, else not charged)
  dense, overhead   the fitted dense-MLP kernel (or None) and the per-step overhead
  ranks and path    EP ranks, nodes, TP size, DeepEP kernel mode per phase, copy counting per
                    mode, the transport path over the network, group-limited routing's cap
  fitted ranges     the token range of every fitted component used, and what lies outside
  parallel, tp_collectives   the layout (attention TP / DP, EP, MoE-TP; `epsim.spec.parallel`)
                    and SGLang's all-reduce by algorithm (`epsim.cost.allreduce`, `tp.py`)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from epsim.cost.attention_ops import BlockOps
from epsim.cost.dual_stream import DualStreamOverlap
from epsim.cost.experts import ExpertGemm
from epsim.cost.flash import FA2_GRIDS, FlashGrids
from epsim.cost.mla import MlaParams
from epsim.cost.timing import StageTiming
from epsim.cost.transport import TransportPath
from epsim.cost.trtllm_fp8_gemm import TrtllmFp8Gemm
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import ModelSpec
from epsim.spec.parallel import Parallel

Coefficients = Mapping[str, float]      # a component's parameters, read-only


@dataclass(frozen=True)
class StageParams:
    """One stage of an MoE layer in one step kind.

    Attributes:
        timing: where its time comes from (`StageTiming`: the component, device-only or
            eager-timed, the host overhead an eager step adds).
        params: the component's coefficients over the datasheet defaults.
        bytes_per_copy: bytes one token copy carries (dispatch and combine; 0 otherwise).
        layout_bytes_per_token: the experts stage of a component fitted with its layout work
            (DeepEP normal's MoE runner on quantised experts, `epsim.cost.quant.layout_kb`):
            bytes its scatter and gather move per token the rank received; 0 otherwise.
        remote_slot_bytes: the experts stage of the fused MoE kernel on quantised experts with
            no dispatch (`none` backend: every rank holds the group's tokens): bytes it moves
            per (token, expert) slot of another rank (`epsim.cost.quant.remote_slot_bytes`);
            0 otherwise.
        reread_gbps: the experts stage of FlashInfer's TRT-LLM MoE (Blackwell's fused kernel on
            quantised experts): the rate its token tiles' weight re-reads cost, the datasheet
            HBM over the fitted `reread_frac` (`epsim.cost.rereads.reread_kb`; inf: a fitted 0);
            its token tiles priced with it (`epsim.cost.moe.trtllm_experts_us`); 0: another
            kernel (no fitted `reread_frac`).
        served_tiles: the experts stage priced at SGLang's served fused-MoE tiles: its device
            time times `epsim.cost.served_tiles.factor` of the group's tokens.
        masked_gemm: the experts stage of DeepEP low-latency's runner where DeepGEMM's masked
            grouped GEMM runs it (`epsim.cost.masked_runner`): that GEMM, at the layout DeepGEMM
            picks for the rank's local experts and their expected rows; None otherwise.
    """

    timing: StageTiming
    params: Coefficients
    bytes_per_copy: float = 0.0
    layout_bytes_per_token: float = 0.0
    remote_slot_bytes: float = 0.0
    reread_gbps: float = 0.0
    served_tiles: bool = False
    masked_gemm: ExpertGemm | None = None

    @property
    def host_us(self) -> float:
        """Host overhead the stage adds per call (0 in a CUDA-graph step), µs."""
        return self.timing.host_us


@dataclass(frozen=True)
class StepKindParams:
    """What the MoE layers of one kind of step read: a CUDA-graph replay (`graph`, device time)
    or an eager step (device time + host overhead).

    Attributes:
        dispatch, combine: by DeepEP kernel mode ("" for other backends); empty for `none` and
            at EP 1 (nothing crosses a GPU).
        experts: the routed experts' grouped GEMM: the kernel model (`any/experts[/graph]`)
            for every backend; an eager step adds the backend's host overhead.
        block_ops: the block's own ops (router, permute, top-k weighting).
        sync_us: what a whole MoE layer adds to its stages timed apart
            (`epsim.cost.moe.layer_defaults`); 0 at EP 1.
        host_rows: by kernel mode, [3] float64 host µs of dispatch, experts and combine in one
            layer (read-only; the ledger's `*_host` columns).
        layout: by kernel mode, the backend's own work around the grouped GEMM
            (`<backend>/layout...`, `epsim.cost.layout`) where it was measured; absent at EP 1
            and where unmeasured (not charged).
        block_ops_parts: by kernel mode, the block ops a step adds: the router always; the
            permute and the weighting unless the backend's kernels do them (low-latency
            `pair` copies at EP > 1: dispatch writes per-expert rows, combine weights them).
        block_ops_host: by kernel mode, the host overhead an eager step adds for those parts
            (`any/block_ops/host` times their launches' share of transformers' block's, the
            one measured; 0 in a graph).
        block_ops_engine: whose kernels the block ops are (`epsim.cost.block_ops.ENGINES`: the
            serving engine; the fit's coefficients price either).
    """

    graph: bool
    dispatch: Mapping[str, StageParams]
    combine: Mapping[str, StageParams]
    experts: StageParams
    block_ops: StageParams
    sync_us: float
    host_rows: Mapping[str, np.ndarray]
    # -- one cost path per stage (issue 40) --
    layout: Mapping[str, StageParams]
    block_ops_parts: Mapping[str, tuple[str, ...]]
    block_ops_host: Mapping[str, float]
    block_ops_engine: str = "transformers"

    def stage(self, kind: str, mode: str = "") -> StageParams | None:
        """The `kind` stage ("dispatch", "combine", "experts") in kernel `mode` (experts have
        none), or None (`none` has no all-to-all stages)."""
        if kind == "experts":
            return self.experts
        return (self.dispatch if kind == "dispatch" else self.combine).get(mode)

    @property
    def comm_stages(self) -> tuple[StageParams, ...]:
        """Every dispatch and combine stage, all kernel modes."""
        return (*self.dispatch.values(), *self.combine.values())


@dataclass(frozen=True)
class CollectiveParams:
    """The `none` backend's measured collectives: `allreduce` (`none/allreduce`: its eager
    combine on the GPU counts it was measured on) and `allgather` (`none/allgather` over
    allreduce's: its eager dispatch on those counts; elsewhere NCCL's ring of the all-reduce
    model, `epsim.cost.tp.nccl_allgather_us`); `allreduce_gpus`: the [lo, hi] GPU counts a fitted
    `none/allreduce` was measured on (its `ep_size` range; any without one), () where it is
    not a fit (SGLang's all-reduce model then prices the reduce, `epsim.cost.tp`)."""

    allreduce: Coefficients
    allgather: Coefficients
    allreduce_gpus: tuple[float, ...] = ()


@dataclass(frozen=True)
class AttentionParams:
    """One layer's attention.

    Attributes:
        roofline: `any/attention`, the datasheet roofline used where no kernel fits.
        decode, prefill: the fitted kernels `any/attention_decode|prefill/graph`, or None.
        heads: (query heads, KV heads, head_dim) one rank's kernel runs (`attention_heads`).
        projections: rates of the projections' dense GEMM (with the kernels): the fitted
            dense kernel's, else the eager step's experts' (in graph steps too).
        kv_cache_dtype: SGLang's `--kv-cache-dtype` (KV bytes per element,
            `epsim.spec.quant.kv_bytes_per_element`).
        mla: an MLA model's layer (`epsim.cost.mla.MlaParams`: kernels, absorbed BMMs and
            projections, each fitted or datasheet); None for GQA attention.
        grids: the CTA grids of the kernel the fitted GQA kernels timed
            (`epsim.cost.flash.component_grids`: FlashAttention-3's for AIC's Hopper tables).
    """

    roofline: Coefficients
    decode: Coefficients | None
    prefill: Coefficients | None
    heads: tuple[int, int, int]
    projections: Coefficients
    kv_cache_dtype: str = "auto"
    # -- MLA (epsim.cost.mla): its own kernels, BMMs and projections; None for GQA ----------
    mla: MlaParams | None = None
    grids: FlashGrids = FA2_GRIDS

    @property
    def kernels(self) -> tuple[Coefficients, Coefficients] | None:
        """(decode, prefill) where both kernels are fitted (projections + kernels), else None
        (the datasheet roofline, docs/model.md section 5)."""
        return (self.decode, self.prefill) if self.decode and self.prefill else None


@dataclass(frozen=True)
class TPCollectiveParams:
    """SGLang's all-reduce between tensor-parallel GPUs (`epsim.cost.tp`).

    Attributes:
        allreduce: {algorithm: coefficients} of `epsim.cost.allreduce` ("oneshot", "twoshot",
            "nccl"; `any/allreduce/graph/<algorithm>` over the datasheet defaults): device time.
        host_us: host overhead an eager step adds per collective (`any/allreduce/host`, else 0).
        gpus_per_node, gpus_per_host: the NVLink domain and the host a GPU sits in (custom
            all-reduce stays within a host; NCCL's ring crosses the NIC between domains).
        sm100: the GPU is SM100 (`epsim.cost.allreduce.is_sm100`: CustomAllReduceV2's switch
            points).
    """

    allreduce: Mapping[str, Coefficients]
    host_us: float
    gpus_per_node: int
    gpus_per_host: int
    sm100: bool = False


@dataclass(frozen=True)
class FittedRange:
    """A fitted component a step reads and the tokens per rank it was fitted on."""

    backend: str
    kind: str
    mode_path: str
    low: float
    high: float


@dataclass(frozen=True)
class Extrapolation:
    """A fitted component used outside its fitted range on one quantity (`ep_size`,
    `hidden_size`): what `Profile.warn_outside` names."""

    backend: str
    kind: str
    mode_path: str
    name: str
    value: float


@dataclass(frozen=True, eq=False)
class CostParams:
    """Every coefficient the cost model of one deployment reads (`resolve_params`).

    Attributes:
        model, cluster, deployment: the specs they were resolved for.
        time_mode: "auto", "graph" or "eager" (`CostModel`).
        profile_applies: the profile was measured on the cluster's GPU (else datasheet only).
        backend: `deployment.moe_a2a_backend`.
        num_ranks, ranks_per_node, num_nodes: EP ranks and how they sit on nodes.
        tp_size: GPUs sharing one DP group's attention (`parallel.attn_tp_size`: 1 with one
            DP group per GPU).
        kernel_modes: phase ("prefill", "decode") -> DeepEP kernel mode ("" for others).
        dedup: kernel mode -> how copies are counted ("pair", "rank", "node", "").
        transport: the backend's scale-out path over the cluster's network.
        max_nodes_per_token: group-limited routing's cap on nodes per token, or None.
        l2_bytes: the GPU's L2 cache (low-latency receive buffers spill beyond it).
        gemm: the routed experts' grouped GEMM shape.
        eager, graph: see `StepKindParams`.
        collectives, attention: see `CollectiveParams`, `AttentionParams`.
        dense: the fitted dense-MLP kernel `any/dense/graph` (dense layers, shared experts, the
            LM head and projections' GEMM rates), or None (the experts' rates, datasheet form).
        overhead: `any/step_overhead` (`base_us`, `per_layer_us`).
        token_ranges: fitted components with a token range, checked as steps are priced.
        extrapolated: fitted components whose EP or hidden size lies outside their range (one
            per quantity), warned by every CostModel built on these.
        parallel: the deployment's layout (`DeploymentSpec.parallel`).
        tp_collectives: see `TPCollectiveParams`.
        attention_ops: `any/attention_ops/graph`, the attention block's own ops (norms, RoPE,
            KV write, residual) where the profile holds its fit, else None (not charged).
        attention_block_ops: those ops' launches and bytes per token on a rank, as the engine
            runs them (`epsim.cost.attention_ops.block_ops`).
        fused_shared_experts: shared experts run inside the fused MoE kernel as experts every
            token picks (`epsim.cost.shared_experts`); 0: they run as their own dense MLP.
        fp8_gemm: the block-FP8 dense linears (projections, shared experts, dense MLP) on
            FlashInfer's trtllm GEMM (`epsim.cost.trtllm_fp8_gemm`), or None.
        shared_beside: the unfused shared experts run beside the router and routed experts on
            their own stream at up to `DUAL_STREAM_TOKENS` tokens (`epsim.cost.shared_experts`).
        dual_stream: how much of the shorter of the two branches then overlaps the longer, by
            tokens (`epsim.cost.dual_stream`); None: the ideal overlap (the longer alone).
    """

    model: ModelSpec
    cluster: ClusterSpec
    deployment: DeploymentSpec
    time_mode: str
    profile_applies: bool
    backend: str
    num_ranks: int
    ranks_per_node: int
    num_nodes: int
    tp_size: int
    kernel_modes: Mapping[str, str]
    dedup: Mapping[str, str]
    transport: TransportPath
    max_nodes_per_token: float | None
    l2_bytes: float
    gemm: ExpertGemm
    eager: StepKindParams
    graph: StepKindParams
    collectives: CollectiveParams
    attention: AttentionParams
    dense: Coefficients | None
    overhead: Coefficients
    token_ranges: tuple[FittedRange, ...]
    extrapolated: tuple[Extrapolation, ...]
    # -- parallelism beyond EP (TP attention, attention DP groups, MoE-TP) -----------------
    parallel: Parallel
    tp_collectives: TPCollectiveParams
    # -- the attention block's own ops (`epsim.cost.attention_ops`) -------------------------
    attention_ops: Coefficients | None = None
    attention_block_ops: BlockOps = BlockOps(0, 0.0)
    fused_shared_experts: int = 0
    fp8_gemm: TrtllmFp8Gemm | None = None
    shared_beside: bool = False
    dual_stream: DualStreamOverlap | None = None

    def step(self, graph: bool) -> StepKindParams:
        """The MoE layers' parameters in a CUDA-graph (`graph`) or eager step."""
        return self.graph if graph else self.eager

    def gemm_rates(self, graph: bool) -> Coefficients:
        """Rates of a step's dense GEMMs (LM head; shared experts and dense layers where no
        dense kernel fits): the fitted dense kernel's, else this step kind's experts'."""
        return self.dense or self.step(graph).experts.params
