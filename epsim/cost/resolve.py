"""resolve_params: a deployment's `CostParams` from a Profile, in one step.

Each component is looked up once (`Profile.params` over the datasheet defaults of its formula
module; `epsim.cost.timing.stage_timing` for where a stage's device time and host overhead
come from) and the result frozen. Equal inputs give the same object, so the screen and the
engine of one run, and every user of one deployment, share one resolution.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from epsim import vocab
from epsim.cost.allreduce import ALGORITHMS as ALLREDUCE_ALGORITHMS
from epsim.cost.allreduce import allreduce_defaults
from epsim.cost.attention import attention_defaults, attention_heads, overhead_defaults
from epsim.cost.attention_ops import attention_ops_defaults, model_bytes_per_token
from epsim.cost.block_ops import KERNELS as BLOCK_OPS_KERNELS
from epsim.cost.block_ops import PARTS as BLOCK_OPS_PARTS
from epsim.cost.block_ops import block_ops_defaults
from epsim.cost.comm import (collective_defaults, combine_bytes_per_copy, comm_defaults,
                             dedup_for, dispatch_bytes_per_copy, l2_bytes)
from epsim.cost.experts import experts_defaults, model_gemm
from epsim.cost.flash import attention_kernel_defaults
from epsim.cost.layout import layout_defaults
from epsim.cost.moe import layer_defaults
from epsim.cost.params import (AttentionParams, Coefficients, CollectiveParams, CostParams,
                               Extrapolation, FittedRange, StageParams, StepKindParams,
                               TPCollectiveParams)
from epsim.cost.timing import TIME_MODES, StageTiming, stage_timing
from epsim.cost.transport import transport_path
from epsim.eplb.placement import ranks_per_node
from epsim.errors import SpecError
from epsim.profile import GRAPH, Profile, load_profile, mode_path
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import ModelSpec
from epsim.spec.quant import served_model


class ProfileHardwareWarning(UserWarning):
    """The profile was measured on another GPU than the cluster's; its fits are not used."""


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


_RESOLVED: dict[tuple[str, ...], CostParams] = {}
_MAX_RESOLVED = 32


def resolve_params(model: ModelSpec, cluster: ClusterSpec, deployment: DeploymentSpec,
                   profile: Profile | None = None, time_mode: str = "auto") -> CostParams:
    """The `CostParams` of a deployment under `profile` (None: the shipped one).

    Resolved once per content: equal specs, profile (by its JSON and path) and time mode give
    the same object, remembered for the last few, so a run's screen and engine, a sweep's
    repeats and every `CostModel` of one deployment read one resolution. A profile measured on
    another GPU type is not applied (`profile_applies` False: datasheet defaults). The model
    is priced in the formats the deployment serves it in (`deployment.quantization`,
    `epsim.spec.quant.served_model`: `CostParams.model`).

    Raises:
        SpecError: `time_mode` not one of TIME_MODES; PlacementError: EP ranks that are not a
            whole number of nodes.
    """
    if time_mode not in TIME_MODES:
        raise SpecError(f"mode ({time_mode!r}) must be one of {list(TIME_MODES)}")
    profile = profile if profile is not None else load_profile(shared=True)
    key = (model.model_dump_json(), cluster.model_dump_json(), deployment.model_dump_json(),
           time_mode, profile.path, profile.model_dump_json())
    found = _RESOLVED.get(key)
    if found is None:
        if len(_RESOLVED) >= _MAX_RESOLVED:
            _RESOLVED.clear()
        served = served_model(model, deployment.quantization)
        found = _RESOLVED[key] = _Resolver(served, cluster, deployment, profile).resolve(time_mode)
    return found


def _frozen(params: dict[str, float]) -> Coefficients:
    return MappingProxyType(params)


class _Resolver:
    """The lookups of one resolution: a component's coefficients over its defaults, a stage's
    timing, a fitted single-GPU kernel; all datasheet where the profile does not apply."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, deployment: DeploymentSpec,
                 profile: Profile):
        self.model, self.cluster, self.deployment, self.profile = model, cluster, deployment, profile
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
        # single-GPU kernels measured device-only (`any/dense/graph`, `any/attention_*/graph`):
        # dense MLPs (dense layers, shared experts) with the experts' physics, attention as
        # its projections (a dense GEMM) plus the fitted decode and prefill kernels; None:
        # the datasheet rooflines of section 5 of docs/model.md
        dense = self.kernel("dense")
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
            l2_bytes=l2_bytes(c.gpu), gemm=model_gemm(m, c.gpu, par.moe_tp_size), eager=eager,
            graph=graph,
            collectives=CollectiveParams(_frozen(allreduce), _frozen(allgather)),
            attention=AttentionParams(
                _frozen(self.coefficients("any", "attention", "", attention_defaults(hw))),
                self.kernel("attention_decode"), self.kernel("attention_prefill"),
                attention_heads(m, tp_size), dense or eager.experts.params, d.kv_cache_dtype),
            dense=dense,
            overhead=_frozen(self.coefficients("any", "step_overhead", "", overhead_defaults())),
            token_ranges=self._token_ranges(eager, graph),
            extrapolated=self._extrapolated(eager, graph, num_ranks),
            parallel=par, tp_collectives=self._tp_collectives(),
            attention_ops=self.kernel("attention_ops"),
            attention_ops_bytes=model_bytes_per_token(m, tp_size))

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
                                  min(c.hardware.gpus_per_host or per_node, per_node))

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
        sync = self.coefficients(backend, "moe_layer", "", layer_defaults())["sync_us"]
        sync_us = {True: sync,
                   False: self.coefficients(backend, "moe_layer", GRAPH, {"sync_us": sync})["sync_us"]}
        out = {}
        for eager in (True, False):
            # the block's own ops (router, permute, top-k weighting; `epsim.cost.block_ops`):
            # device time from `any/block_ops/graph`, an eager step adds `any/block_ops/host`
            block = self.timing("any", "block_ops", "", eager) if self.applies else \
                StageTiming("block_ops", eager, "", GRAPH, False)
            parts = {mode: self._block_ops_parts(dedup[mode], one_gpu) for mode in modes}
            all_launches = sum(BLOCK_OPS_KERNELS.values())
            out[eager] = StepKindParams(
                graph=not eager, dispatch=MappingProxyType(comm[eager]["dispatch"]),
                combine=MappingProxyType(comm[eager]["combine"]),
                experts=StageParams(timing[eager], _frozen(experts_params[eager])),
                block_ops=StageParams(block, _frozen(self.coefficients(
                    "any", "block_ops", block.mode_path, block_ops_defaults(hw)))),
                sync_us=0.0 if one_gpu else sync_us[eager],
                host_rows=MappingProxyType({mode: _host_row(comm[eager], timing[eager], mode)
                                            for mode in modes}),
                layout=MappingProxyType({} if one_gpu else self._layout(modes, eager)),
                block_ops_parts=MappingProxyType(parts),
                block_ops_host=MappingProxyType({
                    mode: block.host_us * sum(BLOCK_OPS_KERNELS[p] for p in parts[mode])
                    / all_launches for mode in modes}))
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

    @staticmethod
    def _block_ops_parts(dedup: str, one_gpu: bool) -> tuple[str, ...]:
        """The block ops a step adds (docs/model.md, "The block's own ops"): the router
        always; the permute and the top-k weighting unless the backend's kernels do them --
        low-latency (`pair`-copy) kernels write each copy into its expert's rows and weight the
        top-k outputs inside their combine. At EP 1 no backend runs: all three."""
        return ("router",) if dedup == "pair" and not one_gpu else BLOCK_OPS_PARTS

    def _used(self, eager: StepKindParams, graph: StepKindParams) -> list[tuple[str, str, str]]:
        """(backend, kind, mode path) of the fitted components the steps read, in the order
        the warnings name them: dispatch, then combine, by kernel mode, eager before graph;
        then the experts; the `none` backend's all-reduce last."""
        if not self.applies:
            return []
        steps = (eager, graph)
        timings = [k.stage(kind, mode).timing for kind in ("dispatch", "combine")
                   for mode in eager.dispatch for k in steps]
        timings += [k.experts.timing for k in steps]
        timings += [stage.timing for k in steps for stage in k.layout.values()]
        # the owner of the component each timing read (the experts: `any`, the kernel model)
        used = list(dict.fromkeys((t.key.split("/")[0], t.kind, t.mode_path)
                                  for t in timings if t.key))
        if self.backend == "none" and self.deployment.parallel.tp_size > 1:
            used.append(("none", "allreduce", ""))
        return used

    def _token_ranges(self, eager: StepKindParams,
                      graph: StepKindParams) -> tuple[FittedRange, ...]:
        out = []
        for backend, kind, mode in self._used(eager, graph):
            comp = self.profile.component(backend, kind, mode)
            if comp is not None and comp.source == "fit" and "num_tokens_per_rank" in comp.valid_range:
                out.append(FittedRange(backend, kind, mode, *comp.valid_range["num_tokens_per_rank"]))
        return tuple(out)

    def _extrapolated(self, eager: StepKindParams, graph: StepKindParams,
                      num_ranks: int) -> tuple[Extrapolation, ...]:
        out, seen = [], set()
        for backend, kind, mode in self._used(eager, graph):
            comp = self.profile.component(backend, kind, mode)
            if comp is None or comp.source != "fit":
                continue
            for name, value in (("ep_size", num_ranks), ("hidden_size", self.model.hidden_size)):
                if name not in seen and comp.outside(**{name: value}):
                    out.append(Extrapolation(backend, kind, mode, name, value))
                    seen.add(name)                    # one warning per quantity, not per part
        return tuple(out)


def _host_row(comm: dict[str, dict[str, StageParams]], experts: StageTiming,
              mode: str) -> np.ndarray:
    """[3] host µs of dispatch, experts and combine in one layer (read-only)."""
    row = np.array([comm["dispatch"][mode].host_us if mode in comm["dispatch"] else 0.0,
                    experts.host_us,
                    comm["combine"][mode].host_us if mode in comm["combine"] else 0.0])
    row.flags.writeable = False
    return row
