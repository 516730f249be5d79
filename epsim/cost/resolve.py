"""resolve_params: a deployment's `CostParams` from a Profile, in one step.

Each component is looked up once (`Profile.params` over the datasheet defaults of its formula
module; `epsim.cost.timing.stage_timing` for where a stage's device time and host overhead
come from) and the result frozen. Equal inputs give the same object, so the screen and the
engine of one run, and every user of one deployment, share one resolution.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import numpy as np

from epsim import vocab
from epsim.cost.allreduce import ALGORITHMS as ALLREDUCE_ALGORITHMS
from epsim.cost.allreduce import allreduce_defaults, is_sm100
from epsim.cost.attention import attention_defaults, attention_heads, overhead_defaults
from epsim.cost.attention_ops import (DEFAULT_ENGINE, ENGINES, FP8_BMM_FORMATS,
                                      attention_ops_defaults, block_ops)
from epsim.cost.block_ops import block_ops_defaults, launches
from epsim.cost.block_ops import PARTS as BLOCK_OPS_PARTS
from epsim.cost.block_ops_parts import block_ops_parts, fused_moe_fit, topk_in_fit
from epsim.cost.comm import (collective_defaults, combine_bytes_per_copy, comm_defaults,
                             dedup_for, dispatch_bytes_per_copy, l2_bytes)
from epsim.cost.fitted_ranges import extrapolated, token_ranges, used_components
from epsim.cost.experts import ExpertGemm, experts_defaults, model_gemm, num_sms
from epsim.cost.flash import FA2_GRIDS, FlashGrids, attention_kernel_defaults, component_grids
from epsim.cost.layout import layout_defaults
from epsim.cost import trtllm_fp8_gemm
from epsim.cost.mla import Q_B_FP8_FORMAT, MlaParams, mla_defaults
from epsim.cost.mla_bmm import bmm_defaults
from epsim.cost.moe import layer_defaults
from epsim.cost.params import (AttentionParams, Coefficients, CollectiveParams, CostParams,
                               StageParams, StepKindParams,
                               TPCollectiveParams)
from epsim.cost import served_tiles
from epsim.cost.normal_runner import layout_rate_scale
from epsim.cost.masked_runner import MaskedExpertGemm, masked_gemm
from epsim.cost.quant import (SM_STREAM_FORMATS, TRITON_MOE_GPUS, absolute, gemm_defaults,
                              layout_kb, quant_expert_gemm, remote_slot_bytes)
from epsim.cost.dual_stream import dual_stream_overlap
from epsim.cost.shared_experts import fused_shared_experts, shared_beside
from epsim.cost.timing import TIME_MODES, StageTiming, stage_timing
from epsim.cost.traffic import max_nodes_per_token
from epsim.cost.transport import transport_path
from epsim.cost.trtllm_fp8_gemm import TrtllmFp8Gemm
from epsim.default_profile import default_profile
from epsim.eplb.placement import ranks_per_node
from epsim.errors import SpecError
from epsim.profile import (GRAPH, QUANTISED_DISPATCH, Component, Profile, component_key,
                           decode_kv_kind, format_kind, kv_kind, mode_path)
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import ModelSpec
from epsim.spec.quant import kv_bytes_per_element, served_model

BF16_FORMATS = ("bf16", "fp16")      # experts priced by the BF16 components


class ProfileHardwareWarning(UserWarning):
    """The profile was measured on another GPU than the cluster's; its fits are not used."""


_RESOLVED: dict[tuple[str, ...], CostParams] = {}
_MAX_RESOLVED = 32


def resolve_params(model: ModelSpec, cluster: ClusterSpec, deployment: DeploymentSpec,
                   profile: Profile | None = None, time_mode: str = "auto",
                   engine: str = DEFAULT_ENGINE) -> CostParams:
    """The `CostParams` of a deployment under `profile` (None: the default profile of the
    cluster's GPU, `epsim.default_profile`), served by `engine` (`epsim.cost.attention_ops`:
    which kernels its attention block runs; a deployment's is SGLang, the live bench's
    transformers).

    Resolved once per content: equal specs, profile (by its JSON and path) and time mode give
    the same object, remembered for the last few, so a run's screen and engine, a sweep's
    repeats and every `CostModel` of one deployment read one resolution. A profile measured on
    another GPU type is not applied (`profile_applies` False: datasheet defaults). The model
    is priced in the formats the deployment serves it in (`deployment.quantization`,
    `epsim.spec.quant.served_model`: `CostParams.model`).

    Raises:
        SpecError: `time_mode` not one of TIME_MODES, `engine` not one of ENGINES;
            PlacementError: EP ranks that are not a
            whole number of nodes.
    """
    if time_mode not in TIME_MODES:
        raise SpecError(f"mode ({time_mode!r}) must be one of {list(TIME_MODES)}")
    if engine not in ENGINES:
        raise SpecError(f"engine ({engine!r}) must be one of {list(ENGINES)}")
    profile = profile if profile is not None else default_profile(cluster.gpu)
    key = (model.model_dump_json(), cluster.model_dump_json(), deployment.model_dump_json(),
           time_mode, engine, profile.path, profile.model_dump_json())
    found = _RESOLVED.get(key)
    if found is None:
        if len(_RESOLVED) >= _MAX_RESOLVED:
            _RESOLVED.clear()
        served = served_model(model, deployment.quantization)
        found = _RESOLVED[key] = _Resolver(served, cluster, deployment, profile,
                                                   engine).resolve(time_mode)
    return found


def _frozen(params: dict[str, float]) -> Coefficients:
    return MappingProxyType(params)


class _Resolver:
    """The lookups of one resolution: a component's coefficients over its defaults, a stage's
    timing, a fitted single-GPU kernel; all datasheet where the profile does not apply."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, deployment: DeploymentSpec,
                 profile: Profile, engine: str = DEFAULT_ENGINE):
        self.model, self.cluster, self.deployment, self.profile = model, cluster, deployment, profile
        self.engine = engine
        self.backend = deployment.moe_a2a_backend
        self.applies = profile.hardware == cluster.gpu or not profile.components

    def coefficients(self, backend: str, kind: str, mode: str,
                     defaults: Coefficients) -> dict[str, float]:
        if not self.applies:
            return dict(defaults)
        return self.profile.params(backend, kind, mode, defaults=defaults)

    def timing(self, backend: str, kind: str, mode_path: str, eager: bool,
               device_owner: str | None = None) -> StageTiming:
        if not self.applies:
            return StageTiming(kind, eager, "", mode_path, False)
        return stage_timing(self.profile, backend, kind, mode_path, eager, device_owner)

    def kernel(self, kind: str) -> Coefficients | None:
        """Parameters of a fitted single-GPU kernel component `any/<kind>/graph`, or None."""
        if not self.applies or self.profile.resolve("any", kind, GRAPH) is None:
            return None
        hw = self.cluster.hardware
        defaults = (attention_ops_defaults(hw) if kind == "attention_ops"
                    else attention_kernel_defaults(hw) if kind.startswith("attention")
                    else experts_defaults(hw, self.model.weight_dtype))
        return _frozen(self.profile.params("any", kind, GRAPH, defaults=defaults))

    def _attention_grids(self) -> FlashGrids:
        """The CTA grids of the kernel the fitted GQA prefill kernel timed (its op tables,
        `component_grids`); FA2's where none is fitted."""
        found = self.profile.resolve("any", "attention_prefill", GRAPH) if self.applies else None
        return component_grids(found[1].tables) if found else FA2_GRIDS

    def resolve(self, time_mode: str) -> CostParams:
        m, c, d = self.model, self.cluster, self.deployment
        backend, hw = self.backend, c.hardware
        par = d.parallel
        num_ranks = d.ep_size
        # an EP rank is `moe_tp_size` GPUs (MoE-TP, `none` backend): fewer EP ranks per node
        per_node = ranks_per_node(num_ranks, max(c.gpus_per_node_resolved // par.moe_tp_size, 1))
        tp_size = par.attn_tp_size
        modes = vocab.DEEPEP_MODES if backend == "deepep" else ("",)
        dedup = {mode: dedup_for(backend, mode) for mode in modes}
        steps = self._steps(modes, dedup)
        eager, graph = steps[True], steps[False]
        allreduce = self.coefficients("none", "allreduce", "", collective_defaults(c))
        allgather = self.coefficients("none", "allgather", "", allreduce)
        # the GPU counts the `none` all-reduce fit was measured on: an eager reduce over others
        # is the all-reduce model's (`epsim.cost.tp.none_collectives_us`), not this fit's
        measured = self._exact(component_key("none", "allreduce", ""))
        reduce_gpus = tuple(measured.valid_range.get("ep_size", (1.0, float("inf")))) \
            if measured is not None and measured.source == "fit" else ()
        measured_reduce = bool(reduce_gpus) and reduce_gpus[0] <= par.tp_size <= reduce_gpus[-1]
        # (the rule of `epsim.cost.tp.measured_none_reduce`, before `CostParams` exists)
        used = used_components(eager, graph, backend == "none" and par.tp_size > 1
                               and measured_reduce) if self.applies else []
        # single-GPU kernels measured device-only (`any/dense/graph`, `any/attention_*/graph`):
        # dense MLPs (dense layers, shared experts) with the experts' physics, attention as
        # its projections (a dense GEMM) plus the fitted decode and prefill kernels; None:
        # the datasheet rooflines of section 5 of docs/model.md
        dense = self.kernel("dense")
        fp8_gemm = self._fp8_gemm(graph)
        fused = fused_shared_experts(m, d, self.engine, par.ep_size)
        beside = shared_beside(m, d, self.engine, fused)
        return CostParams(
            model=m, cluster=c, deployment=d, time_mode=time_mode, profile_applies=self.applies,
            backend=backend, num_ranks=num_ranks, ranks_per_node=per_node,
            num_nodes=num_ranks // per_node, tp_size=tp_size,
            kernel_modes=MappingProxyType({phase: d.deepep_mode_for(phase) if backend == "deepep"
                                           else "" for phase in ("prefill", "decode")}),
            dedup=MappingProxyType(dedup),
            # the scale-out path of this backend over the cluster's network (a separate term:
            # fabric latency and host-proxy messages, added where ranks span nodes)
            transport=transport_path(backend, c.network_resolved.kind),
            max_nodes_per_token=max_nodes_per_token(m, num_ranks // per_node),
            l2_bytes=l2_bytes(c.gpu), gemm=self._experts_gemm(par.moe_tp_size), eager=eager,
            graph=graph,
            collectives=CollectiveParams(_frozen(allreduce), _frozen(allgather), reduce_gpus),
            attention=AttentionParams(
                _frozen(self.coefficients("any", "attention", "", attention_defaults(hw))),
                self.kernel("attention_decode"), self.kernel("attention_prefill"),
                attention_heads(m, tp_size), dense or eager.experts.params, d.kv_cache_dtype,
                self._mla(tp_size, fp8_gemm), self._attention_grids()),
            dense=dense,
            overhead=_frozen(self.coefficients("any", "step_overhead", "", overhead_defaults())),
            token_ranges=token_ranges(self.profile, used),
            extrapolated=extrapolated(self.profile, used, num_ranks, m.hidden_size),
            parallel=par, tp_collectives=self._tp_collectives(),
            attention_ops=self.kernel("attention_ops"),
            attention_block_ops=block_ops(m, self.engine, tp_size,
                                          d.enable_flashinfer_allreduce_fusion
                                          and not d.enable_dp_attention),
            fused_shared_experts=fused, fp8_gemm=fp8_gemm, shared_beside=beside,
            # measured on one GPU, a ratio: whatever the cluster's GPU (`epsim.cost.dual_stream`)
            dual_stream=dual_stream_overlap(par.tp_size) if beside else None)

    def _fp8_gemm(self, graph: StepKindParams) -> TrtllmFp8Gemm | None:
        """The block-FP8 dense linears on FlashInfer's trtllm GEMM (`epsim.cost.trtllm_fp8_gemm`)
        where the deployment names it and the dense weights are block-FP8: its tile model on the
        cluster's GPU (SMs, datasheet HBM, L2); else None (the profile's block-FP8 GEMM fit,
        DeepGEMM's)."""
        m = self.model
        if (self.deployment.fp8_gemm_backend != "flashinfer_trtllm"
                or (m.dense_weight_dtype or m.weight_dtype) != trtllm_fp8_gemm.FORMAT
                or m.weight_dtype != trtllm_fp8_gemm.FORMAT):
            return None
        gpu = self.cluster.gpu
        return TrtllmFp8Gemm(num_sms(gpu), self.cluster.hardware.hbm_gbps, l2_bytes(gpu))

    # -- quantised experts and MLA attention (`epsim.cost.quant`, `epsim.cost.mla`) -----------
    @property
    def quantised_experts(self) -> bool:
        """The routed experts are served in a format other than BF16 (`weight_dtype` after
        `served_model`), so their own components price them."""
        return self.model.weight_dtype not in BF16_FORMATS

    def _experts_gemm(self, moe_tp_size: int) -> ExpertGemm:
        """The routed experts' grouped GEMM: BF16 (`model_gemm`) or a quantised format's
        (`quant_expert_gemm`: its bytes, activation quantisation, scale blocks), one MoE-TP
        GPU's share of the intermediate size."""
        m, c = self.model, self.cluster
        if not self.quantised_experts:
            return model_gemm(m, c.gpu, moe_tp_size)
        gemm = quant_expert_gemm(m.hidden_size, m.moe_intermediate_size // moe_tp_size,
                                 m.weight_dtype, num_sms(c.gpu), m.top_k,
                                 input_quantised=self.deployment.dispatch_dtype in QUANTISED_DISPATCH)
        # Hopper's Triton fused MoE (the `none` backend) streams its block-FP8 weights at the
        # busiest SM's slices, as its fit read them (`ExpertGemm.sm_stream`)
        triton = (self.backend == "none" and c.gpu in TRITON_MOE_GPUS
                  and m.weight_dtype in SM_STREAM_FORMATS)
        return replace(gemm, sm_stream=True) if triton else gemm

    def _masked_gemm(self, timing: StageTiming) -> ExpertGemm | None:
        """DeepGEMM's masked grouped GEMM over a rank's local experts (`epsim.cost.masked_runner`)
        where the experts stage is DeepEP low-latency's fitted runner on a format DeepGEMM runs
        there; None otherwise."""
        if not timing.key.startswith("deepep/") or not timing.key.endswith("/low_latency"):
            return None
        m, d = self.model, self.deployment
        local = (m.num_experts + d.ep_num_redundant_experts) // d.parallel.ep_size
        gemm = masked_gemm(self._experts_gemm(d.parallel.moe_tp_size), self.cluster.gpu,
                           m.weight_dtype, local)
        return gemm if isinstance(gemm, MaskedExpertGemm) else None

    def _exact(self, key: str) -> Component | None:
        """The profile's component of exactly `key` (no fallback to another kernel's fit)."""
        return self.profile.components.get(key) if self.applies else None

    def _quant_experts(self, eager: bool, timing: StageTiming
                       ) -> tuple[StageTiming, dict[str, float], float, float]:
        """(timing, rates, layout bytes per received token, remote-slot bytes) of quantised
        experts in an eager or CUDA-graph step: DeepEP's own MoE runner where its tables were
        fitted (`deepep/experts_<format>/graph/low_latency` in a CUDA-graph decode step,
        `.../normal` eager, with its layout work), else the fused MoE kernel
        (`any/experts_<format>/graph`; with the `none` backend over every slot of the group,
        `StageParams.remote_slot_bytes`), else datasheet efficiencies; fractions of the
        cluster's GPU's datasheet, as rates (`epsim.cost.quant.absolute`). An eager step keeps
        the experts stage's host overhead."""
        m, hw = self.model, self.cluster.hardware
        fmt, kind = m.weight_dtype, format_kind("experts", m.weight_dtype)
        inter = m.moe_intermediate_size // self.deployment.parallel.moe_tp_size   # its share
        remote = remote_slot_bytes(m.hidden_size, inter, fmt, m.top_k, self.cluster.gpu) \
            if self.backend == "none" else 0.0
        candidates = [("any", GRAPH)]
        if self.backend == "deepep":
            candidates.insert(0, ("deepep", "normal" if eager else f"{GRAPH}/low_latency"))
        for owner, path in candidates:
            key = component_key(owner, kind, path)
            comp = self._exact(key)
            if comp is not None:
                layout = layout_kb(1.0, m.hidden_size, fmt) * 1e3 if path == "normal" else 0.0
                # priced at the experts' HBM rate (`received_layout_us`): bytes scaled so a
                # fitted `layout_ratio` gives its own rate (`EXPERT_LAYOUT_TERMS`)
                layout *= layout_rate_scale({**gemm_defaults(), **comp.params})
                return (replace(timing, key=key, mode_path=path, device_only=True),
                        absolute({**gemm_defaults(), **comp.params}, hw, fmt), layout, remote)
        return (replace(timing, key="", mode_path=GRAPH, device_only=True),
                absolute(gemm_defaults(), hw, fmt), 0.0, remote)

    def _fraction_params(self, kind: str, defaults: dict[str, float]
                         ) -> tuple[Coefficients, str]:
        """(parameters over `defaults`, key or "" for datasheet) of `any/<kind>/graph`."""
        key = component_key("any", kind, GRAPH)
        comp = self._exact(key)
        return _frozen({**defaults, **(comp.params if comp else {})}), key if comp else ""

    def _mla(self, tp_size: int, fp8_gemm: TrtllmFp8Gemm | None = None) -> MlaParams | None:
        """An MLA model's layer on one rank (`epsim.cost.mla`): the decode and prefill kernels
        for the deployment's KV-cache dtype, the absorbed BMMs (FP8 for per-tensor FP8
        checkpoints, else BF16) and the projections in the dense weights' format (or FlashInfer's
        trtllm block-FP8 GEMM, `fp8_gemm`), each its fit or datasheet efficiencies;
        None for GQA (and DeepSeek sparse attention, which epsim does not price)."""
        m, c = self.model, self.cluster
        if m.attention != "mla":
            return None
        dense = m.dense_weight_dtype or m.weight_dtype
        # FP8 BMMs only for a per-tensor/channel FP8 checkpoint: SGLang dequantises a 128 x 128
        # block-FP8 `kv_b_proj` (DeepSeek-V3/R1, Kimi-K2) to BF16 at load (`FP8_BMM_FORMATS`)
        bmm = "fp8" if dense in FP8_BMM_FORMATS else "bf16"
        kv = kv_kind(self.deployment.kv_cache_dtype)
        decode, decode_key = self._fraction_params(
            format_kind("mla_decode", decode_kv_kind(self.deployment.kv_cache_dtype, c.gpu)),
            mla_defaults())
        prefill, prefill_key = self._fraction_params(format_kind("mla_prefill", kv),
                                                     mla_defaults())
        bmms, bmm_key = self._fraction_params(format_kind("mla_bmm", bmm), bmm_defaults())
        gemm, gemm_key = self._fraction_params(format_kind("gemm", dense), gemm_defaults())
        # SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN: an NVFP4 checkpoint's BF16 q_b_proj quantised to
        # block-FP8 at load, on the block-FP8 GEMM (`epsim.cost.mla`)
        q_b = q_b_key = None
        if self.deployment.nvfp4_fp8_q_b and m.weight_dtype == "nvfp4" and dense == "bf16":
            q_b, q_b_key = self._fraction_params(format_kind("gemm", Q_B_FP8_FORMAT),
                                                 gemm_defaults())
        keys = {"decode": decode_key, "prefill": prefill_key, "bmm": bmm_key,
                "projections": gemm_key}
        if q_b is not None:
            keys["q_b"] = q_b_key
        return MlaParams(
            decode, prefill, bmms, gemm, bmm, dense,
            MappingProxyType(keys),
            c.hardware, num_sms(c.gpu), max(m.num_attention_heads // tp_size, 1), m.hidden_size,
            m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim,
            kv_bytes_per_element(self.deployment.kv_cache_dtype),
            # SGLang runs an MLA prefill per head (MHA, `MHA_CHUNKED_KV`) on its fa3 and
            # trtllm_mla backends alike; Hopper's kernel fit (timed absorbed by AIC's collector)
            # gives the efficiencies the per-head work runs at
            absorbed_prefill=False, fp8_gemm=fp8_gemm,
            q_b_gemm=q_b, one_kv_split=self.deployment.mla_kv_splits == "one")

    def _tp_collectives(self) -> TPCollectiveParams:
        """SGLang's all-reduce by algorithm (`any/allreduce/graph/<algorithm>`, device time over
        the datasheet defaults of `epsim.cost.allreduce`) and the host overhead an eager step
        adds per collective (`any/allreduce/host`, else none)."""
        c = self.cluster
        defaults = allreduce_defaults(c)
        algos = {a: _frozen(self.coefficients("any", "allreduce", f"{GRAPH}/{a}", defaults[a]))
                 for a in ALLREDUCE_ALGORITHMS}
        host = self.coefficients("any", "allreduce", "host", {"base_us": 0.0})["base_us"]
        per_node = c.gpus_per_node_resolved
        return TPCollectiveParams(MappingProxyType(algos), host, per_node,
                                  min(c.hardware.gpus_per_host or per_node, per_node),
                                  is_sm100(c.hardware))

    def _steps(self, modes: tuple[str, ...],
               dedup: dict[str, str]) -> dict[bool, StepKindParams]:
        """{eager: StepKindParams} for eager (True) and CUDA-graph (False) steps.

        Each stage in an eager step and in a CUDA-graph step (`epsim.cost.timing`): decode
        steps SGLang replays as CUDA graphs (batches up to cuda_graph_max_bs) pay device time
        only; eager steps add the host overhead, fitted on its own, to the device time. Where
        no device-only timing exists (`torch`) the eager component serves both.

        One cost path per stage (docs/model.md, section 4): the experts are the kernel model
        (`any/experts[/graph]`) whatever the backend, an eager step adding the backend's host
        overhead; the backend's own layout work is its own term where measured; at EP 1 no
        a2a backend runs (no dispatch, combine, layout or sync)."""
        m, d, backend, hw = self.model, self.deployment, self.backend, self.cluster.hardware
        dtype = d.dispatch_dtype
        one_gpu = d.parallel.tp_size == 1      # EP 1 without MoE-TP: the MoE on one GPU
        comm: dict[bool, dict[str, dict[str, StageParams]]] = {
            e: {"dispatch": {}, "combine": {}} for e in (True, False)}
        for kind in ("dispatch", "combine") if backend != "none" and not one_gpu else ():
            for mode in modes:
                path = mode_path(mode, kind, dtype)
                defaults = comm_defaults(backend, mode, self.cluster)
                size = (dispatch_bytes_per_copy(m.hidden_size, dtype, m.top_k, dedup[mode])
                        if kind == "dispatch" else combine_bytes_per_copy(m.hidden_size))
                for eager in (True, False):
                    t = self.timing(backend, kind, path, eager)
                    comm[eager][kind][mode] = StageParams(
                        t, _frozen(self.coefficients(backend, kind, t.mode_path, defaults)), size)
        # the experts: the kernel model's device time (`any/experts[/graph]`) for every
        # backend; an eager step adds the backend's own host overhead (`<backend>/experts/host`)
        path = mode_path("", "experts", dtype)
        timing = {e: self.timing(backend, "experts", path, e, device_owner="any")
                  for e in (True, False)}
        experts = self.coefficients("any", "experts", path, experts_defaults(hw, m.weight_dtype))
        experts_params = {e: self.coefficients("any", "experts", timing[e].mode_path, experts)
                          for e in (True, False)}
        layout, remote = {True: 0.0, False: 0.0}, {True: 0.0, False: 0.0}
        reread = {True: 0.0, False: 0.0}
        if self.quantised_experts:     # quantised weights: their own components (`_quant_experts`)
            for eager in (True, False):
                timing[eager], experts_params[eager], layout[eager], remote[eager] = \
                    self._quant_experts(eager, timing[eager])
                # FlashInfer's TRT-LLM MoE (the fused kernel's fit on a Blackwell GPU): its
                # token tiles' weight re-reads, fitted as a share of the datasheet HBM rate
                # (a fitted 0: every re-read an L2 hit, an infinite rate, the tiles still its)
                frac = experts_params[eager].get("reread_frac")
                if timing[eager].key.startswith("any/") and frac is not None:
                    reread[eager] = hw.hbm_gbps / frac if frac > 0 else float("inf")
        # a CUDA-graph step's layer sync is its own device-only fit: an eager fit's residual
        # holds the ranks' host-side skew (each host launching at its own pace; `none` 63 µs
        # at EP 2 beside the kernel model, `torch` -108 µs of launch overlap), which a graph
        # replay has not -- the datasheet 0 where no graph fit exists
        graph_sync = self._exact(component_key(backend, "moe_layer", GRAPH))
        sync_us = {True: self.coefficients(backend, "moe_layer", "", layer_defaults())["sync_us"],
                   False: graph_sync.params["sync_us"] if graph_sync else 0.0}
        out = {}
        for eager in (True, False):
            # the block's own ops (router, permute, top-k weighting; `epsim.cost.block_ops`):
            # device time from `any/block_ops/graph`, an eager step adds `any/block_ops/host`
            block = self.timing("any", "block_ops", "", eager) if self.applies else \
                StageTiming("block_ops", eager, "", GRAPH, False)
            fused = fused_moe_fit(self._exact(timing[False].key) if timing[False].key else None)
            topk = topk_in_fit(fused, reread[False])
            # SGLang's served E 257 H200 tiles, faster than the collector's the fit timed
            served = served_tiles.applies(
                self.cluster.gpu, fused and self.cluster.gpu in TRITON_MOE_GPUS, m.weight_dtype,
                m.moe_intermediate_size // d.parallel.moe_tp_size,
                fused_shared_experts(m, d, self.engine, d.parallel.ep_size), backend,
                d.moe_served_tiles)
            parts = {mode: block_ops_parts(dedup[mode], one_gpu, fused, topk)
                     for mode in modes}
            # the host fit is per launch of the block it timed (transformers')
            all_launches = launches(BLOCK_OPS_PARTS)
            out[eager] = StepKindParams(
                graph=not eager, dispatch=MappingProxyType(comm[eager]["dispatch"]),
                combine=MappingProxyType(comm[eager]["combine"]),
                experts=StageParams(timing[eager], _frozen(experts_params[eager]),
                                    layout_bytes_per_token=layout[eager],
                                    remote_slot_bytes=remote[eager],
                                    reread_gbps=reread[eager], served_tiles=served,
                                    masked_gemm=self._masked_gemm(timing[eager])),
                block_ops=StageParams(block, _frozen(self.coefficients(
                    "any", "block_ops", block.mode_path, block_ops_defaults(hw)))),
                sync_us=0.0 if one_gpu else sync_us[eager],
                host_rows=MappingProxyType({mode: _host_row(comm[eager], timing[eager], mode)
                                            for mode in modes}),
                layout=MappingProxyType({} if one_gpu else self._layout(modes, eager)),
                block_ops_parts=MappingProxyType(parts),
                block_ops_host=MappingProxyType({
                    mode: block.host_us * launches(parts[mode], self.engine)
                    / all_launches for mode in modes}),
                block_ops_engine=self.engine)
        return out

    def _layout(self, modes: tuple[str, ...], eager: bool) -> dict[str, StageParams]:
        """The backend's own layout work by kernel mode, where the profile holds its fit
        (`<backend>/layout/graph[/mode][/fp8]`: device time; its host part is in the
        experts' host overhead); unmeasured modes are absent (not charged)."""
        out = {}
        if not self.applies:
            return out
        hw = self.cluster.hardware
        for mode in modes:
            path = mode_path(mode, "layout", self.deployment.dispatch_dtype, graph=True)
            found = self.profile.resolve(self.backend, "layout", path)
            if found is None or found[0].split("/")[0] != self.backend:
                continue
            t = StageTiming("layout", eager, found[0], path, True)
            out[mode] = StageParams(t, _frozen(self.profile.params(
                self.backend, "layout", path, defaults=layout_defaults(hw))))
        return out


def _host_row(comm: dict[str, dict[str, StageParams]], experts: StageTiming,
              mode: str) -> np.ndarray:
    """[3] host µs of dispatch, experts and combine in one layer (read-only)."""
    row = np.array([comm["dispatch"][mode].host_us if mode in comm["dispatch"] else 0.0,
                    experts.host_us,
                    comm["combine"][mode].host_us if mode in comm["combine"] else 0.0])
    row.flags.writeable = False
    return row
