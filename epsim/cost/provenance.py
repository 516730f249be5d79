"""Provenance of a prediction: which profile component gave each part of the time, and how
far to trust it.

Every part a `CostModel` costs is tagged
  fitted        a component fitted on measurements, used inside its fitted range;
  extrapolated  a fitted component used outside it (`axes` names how: EP size, hidden size,
                tokens per rank, RDMA bandwidth, another kernel);
  datasheet     no measurement: datasheet figures times stated efficiencies;
with the share of step time it covers (from a `Ledger` of the steps costed, `epsim.cost.ledger`)
and, where the profile stores spreads, the p10/p90 band ratios. Device time and host overhead are
separate entries (`time`: "device", "host", or "device+host" for an eager-timed component).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from epsim.cost.comm import per_message
from epsim.cost.dual_stream import provenance_lines as dual_stream_lines
from epsim.cost.ledger import COLUMN, Ledger
from epsim.cost.scheduler_host import scheduler_host
from epsim.cost.shared_experts import DUAL_STREAM_TOKENS
from epsim.cost.timing import band_ratios
from epsim.cost.trtllm_fp8_gemm import PROVENANCE as FP8_GEMM
from epsim.cost.tp import ALLREDUCE_KEY, measured_none_reduce
from epsim.default_profile import profile_label

TAGS = ("fitted", "extrapolated", "datasheet")
# the power-capped clock's part (`epsim.cost.sustained`): our own record, not a profile's component
SUSTAINED_KEY = "epsim.cost.sustained"
# what two-batch overlap leaves unpriced where exchanges run on a communication stream beside
# the other micro-batch's compute (`epsim.cost.tbo`, docs/model.md "Two-batch overlap")
BESIDE_EXCHANGES = ("two-batch overlap: beside the other micro-batch's exchanges on a "
                    "communication stream, only the SMs DeepEP normal's kernels hold are priced, "
                    "not the rest of the slowdown of the two at once (unmeasured)")


@dataclass(frozen=True)
class ComponentUse:
    """One part of the time and where it came from.

    Attributes:
        part: "attention", "dispatch", "experts", "combine", "shared_experts", "dense",
            "overhead", "sync", "network" (the fabric's part of dispatch and combine),
            "block_ops" (the block's router, permute and weighting, `epsim.cost.block_ops`),
            "layout" (the backend's own work around the grouped GEMM, `epsim.cost.layout`),
            "attention_ops" (the attention block's norms, RoPE, KV write and residual,
            `epsim.cost.attention_ops`), "forward_host" (the eager prefill forward's host time
            beyond its device time, `epsim.cost.forward_host`), "sustained_clock" (what the
            power-capped clock adds to a prefill's device compute, `epsim.cost.sustained`).
        time: "device", "host", or "device+host" (an eager-timed component).
        key: profile key used ("" for datasheet defaults); `label` names it for people.
        tag: one of TAGS; `axes`: why extrapolated (empty otherwise).
        share: its fraction of the summed step time.
        p10_ratio, p90_ratio: measured/predicted band of the component (None: no measured band).
        steps: "graph", "eager" or "graph+eager": the step kinds it was used in.
        profile: the profile that gave the component (a default profile's filled parts name
            the one they came from, `epsim.default_profile`); "" for datasheet values.
        data_source: where its data came from: "aiconfigurator", "epsim records" or
            "datasheet" (`Profile.data_source`).
    """

    part: str
    time: str
    key: str
    tag: str
    axes: tuple[str, ...]
    share: float
    p10_ratio: float | None
    p90_ratio: float | None
    steps: str
    profile: str = ""
    data_source: str = "datasheet"

    @property
    def label(self) -> str:
        return self.key or f"datasheet {self.part}"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["axes"] = list(self.axes)
        return d


def _outside(component, values: dict[str, tuple[float, float]]) -> list[str]:
    """Axes on which the values used (name -> (lo, hi)) leave the component's fitted range
    (`Component.outside`, the one fitted-range check, at both ends)."""
    out = []
    for name, (lo, hi) in values.items():
        if hi > 0:
            for axis in component.outside(**{name: hi}) + component.outside(**{name: lo}):
                if axis not in out:
                    out.append(axis)
    return out


def _tag(profile, key: str, values: dict[str, tuple[float, float]],
         extra_axes: list[str]) -> tuple[str, tuple[str, ...], float | None, float | None]:
    comp = profile.components.get(key) if key else None
    if comp is None or comp.source == "datasheet":
        return "datasheet", tuple(extra_axes), None, None
    axes = _outside(comp, values) + extra_axes if comp.source == "fit" else extra_axes
    band = band_ratios(comp)
    return ("extrapolated" if axes else "fitted", tuple(axes),
            band[0] if band else None, band[1] if band else None)


def component_uses(cost_model, ledger: Ledger) -> list[ComponentUse]:
    """Every part the ledger's steps spent time on, with its component and tag, largest first."""
    cm, params = cost_model, cost_model.params
    profile = cm.profile
    applies = params.profile_applies
    total = ledger.total_us or 1.0
    ep = {"ep_size": (params.num_ranks, params.num_ranks)}
    hidden = {"hidden_size": (cm.model.hidden_size, cm.model.hidden_size)}
    acc: dict[tuple[str, str, str], dict] = {}

    def use(part, time, key, us, graph, values, extra=()):
        if us <= 0:
            return
        key = key if applies else ""
        entry = acc.setdefault((part, time, key), {"us": 0.0, "steps": set(), "values": {},
                                                   "extra": set()})
        entry["us"] += us
        entry["steps"].add("graph" if graph else "eager")
        for name, (lo, hi) in values.items():
            old = entry["values"].get(name)
            entry["values"][name] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
        entry["extra"].update(extra)

    experts_key = ""
    for (graph, mode), row in ledger.sums.items():
        lo, hi = ledger.tokens[(graph, mode)]
        values = {**hidden, "num_tokens_per_rank": (lo, hi)}     # experts: per-rank work
        comm_values = {**ep, **values}
        eager = not graph
        # the compute times were measured alone; here they run beside an exchange
        beside = ([BESIDE_EXCHANGES] if cm.deployment.enable_two_batch_overlap
                  and params.num_ranks > 1 and not per_message(params.dedup.get(mode, ""))
                  else [])
        for kind in ("dispatch", "combine", "experts"):
            # across nodes, a stage whose own fit saw one node prices the NIC by the datasheet
            own = params.step(graph).stage(kind, mode) if kind != "experts" else None
            rdma = ([] if params.num_nodes <= 1 or (
                own is not None and own.timing.key and applies
                and "rdma_gbps" in profile.components.get(own.timing.key).params)
                else ["RDMA bandwidth datasheet (no fit saw more than one node)"])
            us, host = row[COLUMN[kind]], row[COLUMN[f"{kind}_host"]]
            if params.backend == "none" and kind != "experts":
                key = "none/allgather" if kind == "dispatch" else "none/allreduce"
                if key not in profile.components and kind == "dispatch":
                    key = "none/allreduce"
                if kind == "combine" and (graph or not measured_none_reduce(params)):
                    key = ALLREDUCE_KEY           # the all-reduce model's (`epsim.cost.tp`)
                use(kind, "device+host", key if key in profile.components else "", us, graph,
                    comm_values, rdma)
                continue
            stage = params.step(graph).stage(kind, mode)
            if stage is None:                          # EP 1: nothing crosses a GPU
                continue
            t = stage.timing
            extra = list(rdma if kind != "experts" else beside)
            if kind == "dispatch" and cm.deployment.dispatch_dtype == "nvfp4":
                # no table times DeepEP's NVFP4 dispatch: the FP8 fit at NVFP4's bytes
                extra.append("dispatch_dtype nvfp4: the fp8 dispatch fit at NVFP4 bytes")
            if not eager and not t.device_only and t.key:
                extra.append("eager-timed component used for a graph step (host included)")
            own = row[COLUMN["layout"]] if kind == "experts" else 0.0
            use(kind, "device+host" if t.key and not t.device_only else "device", t.key,
                us - host - own, graph, values if kind == "experts" else comm_values, extra)
            if host > 0:
                use(kind, "host", t.host_key, host, graph, {})
            if kind == "experts":
                experts_key = t.key
        step = params.step(graph)
        layout = step.layout.get(mode)                  # the backend's own layout work
        if layout is not None:
            use("layout", "device", layout.timing.key, row[COLUMN["layout"]], graph, comm_values)
        block = step.block_ops.timing
        us, host = row[COLUMN["block_ops"]], row[COLUMN["block_ops_host"]]
        # the permute and weighting, where added, are the live block's torch ops
        torch_ops = (["permute and weighting as the live block's torch ops (docs/model.md 4a)"]
                     if block.key and params.num_ranks > 1
                     and "permute" in step.block_ops_parts.get(mode, ()) else [])
        use("block_ops", "device", block.key, us - host, graph, values, torch_ops)
        if host > 0:
            use("block_ops", "host", block.host_key, host, graph, {})
        mla = cm.model.attention == "mla"
        ops = row[COLUMN["attention_ops"]]
        if params.attention.mla is not None:     # MLA's own kernel, BMMs and projections
            keys = params.attention.mla.keys
            trtllm = params.fp8_gemm is not None      # the projections on its own kernel
            parts = [f"MLA {part}: {keys[part] or 'datasheet'}" for part in keys
                     if part != "decode" and not (trtllm and part == "projections")]
            if trtllm:
                parts.append(f"MLA projections on FlashInfer's trtllm GEMM: {FP8_GEMM}")
            if params.attention.mla.one_kv_split:
                parts.append("MLA decode as cutlass_mla's one key split: a CTA pair a sequence "
                             "at the fit's per-SM rates (no cutlass_mla table)")
            use("attention", "device", keys["decode"], row[COLUMN["attention"]] - ops, graph, {},
                parts + beside)
        elif params.attention.kernels is not None:
            use("attention", "device", "any/attention_decode/graph",
                row[COLUMN["attention"]] - ops, graph, {}, beside)
        else:
            use("attention", "device", "any/attention" if "any/attention" in profile.components
                else "", row[COLUMN["attention"]] - ops, graph, {}, beside)
        use("attention_ops", "device", "any/attention_ops/graph", ops, graph,
            {**hidden, "num_tokens_per_rank": (lo, hi)},
            ["MLA block's ops costed with the GQA block's fit"] if mla else [])
        if params.fp8_gemm is not None:        # FlashInfer's trtllm block-FP8 GEMM: its tile
            gemm, gemm_key = [FP8_GEMM], ""     # model, no profile component (counted datasheet)
        elif params.dense is not None:
            gemm, gemm_key = [], "any/dense/graph"
        else:
            gemm = ["dense GEMM costed with the experts fit's bandwidth and FLOP rate"]
            gemm_key = experts_key
        # SGLang's dual stream (<= DUAL_STREAM_TOKENS tokens: the ledger's range, capped there)
        dual = (dual_stream_lines(params.dual_stream, lo, min(hi, DUAL_STREAM_TOKENS))
                if params.shared_beside and lo <= DUAL_STREAM_TOKENS else [])
        use("shared_experts", "device", gemm_key, row[COLUMN["shared_experts"]], graph, hidden,
            gemm + dual)
        use("dense", "device", gemm_key, row[COLUMN["dense"]], graph, hidden, gemm)
        host = scheduler_host(params)
        use("overhead", "host", "any/step_overhead" if "any/step_overhead" in profile.components
            else "", row[COLUMN["overhead"]], graph, {},
            [f"with the scheduler's host time SGLang's loop without overlap exposes: "
             f"{host.launches} eager launches ({host.launches_us:.0f} us: ops at "
             f"{host.launch_us:.1f} us ({host.source}), {host.uploads} uploads and "
             f"{host.readbacks} read-backs at the GPU host's any/serving_host) + the "
             f"DP gather's {host.gather_us:.0f} us + gloo collectives {host.gloo_us:.0f} us "
             f"({host.gloo_source or 'none'}; between nodes extrapolated) a step, and "
             f"{host.request_us:.1f} us a decoding request (the loop's per-request Python, "
             f"timed on our VM: benchmarks/spec_request_host.py)"] if host.exposed else [])
        fh = cm.forward_host
        if fh is not None:
            use("forward_host", "host", "any/block_ops/host"
                if "any/block_ops/host" in profile.components else "",
                row[COLUMN["forward_host"]], graph, {},
                [f"SGLang's eager prefill forward outlasting its device time: "
                 f"{fh.moe_layer_launches} launches a MoE layer, {fh.dense_layer_launches} a dense "
                 f"layer, {fh.forward_launches} a forward (counted, epsim.cost.forward_host) at "
                 f"{fh.launch_us:.1f} us ({fh.source})"])
        sc = cm.sustained
        if sc is not None:
            use("sustained_clock", "device", SUSTAINED_KEY, row[COLUMN["sustained_clock"]], graph,
                {}, [] if sc.measured else [f"sustained clock {sc.source}"])
        use("network", "device", "", row[COLUMN["network"]], graph, {},
            [f"{params.transport.name} over the cluster's network: fabric latency and proxy "
             f"messages"])
        sync_key = f"{params.backend}/moe_layer" + ("/graph" if graph else "")
        if sync_key not in profile.components:
            sync_key = f"{params.backend}/moe_layer"
        use("sync", "device" if graph else "device+host", sync_key, abs(row[COLUMN["sync"]]), graph,
            comm_values)
    out = []
    for (part, time, key), e in acc.items():
        if key == SUSTAINED_KEY:        # our own record, not a profile component
            axes = tuple(sorted(e["extra"]))
            out.append(ComponentUse(part, time, key, "extrapolated" if axes else "fitted", axes,
                                    e["us"] / total, None, None, "+".join(sorted(e["steps"])),
                                    "", "epsim records"))
            continue
        tag, axes, p10, p90 = _tag(profile, key, e["values"], sorted(e["extra"]))
        comp = profile.components.get(key) if key else None
        out.append(ComponentUse(part, time, key, tag, axes, e["us"] / total, p10, p90,
                                "+".join(sorted(e["steps"])),
                                (comp.profile or profile.name) if comp else "",
                                profile.data_source(key) if key else "datasheet"))
    return sorted(out, key=lambda u: (-u.share, u.part, u.time))


_NAMES = {"attention": "attention", "dispatch": "dispatch", "combine": "combine",
          "experts": "experts", "shared_experts": "shared experts", "dense": "dense layers",
          "overhead": "step overhead", "sync": "layer sync", "network": "network",
          "block_ops": "block ops", "layout": "backend layout", "attention_ops": "attention ops",
          "forward_host": "prefill forward host", "sustained_clock": "sustained clock"}


def summarize(uses: list[ComponentUse], of: str = "step time") -> dict:
    """Shares by tag, the datasheet parts, and the one line the CLI prints:
    `measured: 62 % of step time (extrapolated: 20 %); datasheet: attention, RDMA`."""
    share = {tag: sum(u.share for u in uses if u.tag == tag) for tag in TAGS}
    datasheet = sorted({_NAMES[u.part] + (" host" if u.time == "host" and u.part != "overhead"
                                          else "") for u in uses if u.tag == "datasheet"})
    if any("RDMA" in a for u in uses for a in u.axes):
        datasheet.append("RDMA")
    extrapolated = sorted({_NAMES[u.part] for u in uses if u.tag == "extrapolated"})
    line = f"measured: {share['fitted'] * 100:.0f} % of {of} in fitted range"
    if extrapolated:
        line += (f", {share['extrapolated'] * 100:.0f} % extrapolated "
                 f"({', '.join(extrapolated)})")
    line += "; datasheet: " + (f"{share['datasheet'] * 100:.0f} % ({', '.join(datasheet)})"
                               if datasheet else "none")
    return {"measured_share": share["fitted"], "extrapolated_share": share["extrapolated"],
            "datasheet_share": share["datasheet"], "datasheet": datasheet,
            "extrapolated": extrapolated, "line": line}


def provenance(cost_model, ledger: Ledger | None = None, of: str = "step time") -> dict:
    """The provenance block of `summary.json` and `epsim cost --json`: the profile (`profile`,
    and `profile_rule`: whether it was named or is the cluster's default,
    `epsim.default_profile`), `components` (every ComponentUse as a dict, each with its profile
    and data source), the shares by tag and by data source, the datasheet parts and the CLI
    line."""
    uses = component_uses(cost_model, ledger or cost_model.ledger)
    summary = summarize(uses, of)
    prof = cost_model.profile
    label = profile_label(prof) if cost_model.params.profile_applies else \
        f"datasheet-{cost_model.cluster.gpu} ({profile_label(prof)} is {prof.hardware}'s)"
    by_source: dict[str, float] = {}
    for u in uses:
        by_source[u.data_source] = by_source.get(u.data_source, 0.0) + u.share
    sources = "; ".join(f"{name} {share * 100:.0f} %" for name, share in
                        sorted(by_source.items(), key=lambda kv: -kv[1]))
    summary["line"] = f"profile {label}: {sources}. {summary['line']}"
    return {"time_mode": cost_model.params.time_mode, "profile": label,
            "profile_rule": cost_model.profile_rule, "data_sources": by_source, **summary,
            "components": [u.as_dict() for u in uses]}


def part_bands(prov: dict, mean_us: dict[str, float]) -> dict[str, dict]:
    """p10/p90 next to predicted times: per part (`mean_us`: part -> predicted µs), the band
    of the device-time component that gave most of it (None where it has no measured spread,
    e.g. a datasheet part), its tag and key."""
    uses = prov.get("components", [])
    out = {}
    for part, us in mean_us.items():
        mine = [u for u in uses if u["part"] == part and u["time"] != "host"]
        if not mine:
            continue
        top = max(mine, key=lambda u: u["share"])
        lo, hi = top["p10_ratio"], top["p90_ratio"]
        out[part] = {"mean_us": us, "p10_us": us * lo if lo else None,
                     "p90_us": us * hi if hi else None, "tag": top["tag"],
                     "component": top["key"] or "datasheet"}
    return out
