"""`epsim cost`: one MoE layer's predicted dispatch, expert and combine time.

Nodes = EP size / GPUs per node of the cluster's GPU; every rank holds `tokens_per_rank`
tokens routed by the given skew (one sampled layer, from `--seed`), experts placed
contiguously without redundancy. `layer_us` = dispatch + experts + combine (no attention).
DeepEP's kernels follow SGLang's `--deepep-mode auto` unless told otherwise: normal kernels in
prefill, low-latency in decode, as the scenarios run them. Several EP sizes (`--ep 8,16,32`)
or token counts (`--tokens-per-rank 1-4096`: 1, 2, 4, ... 4096) print one table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from epsim import vocab
from epsim.commands.output import Report
from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.cost.provenance import provenance
from epsim.cost.timing import stage_band
from epsim.eplb import Placement
from epsim.errors import SpecError, did_you_mean, hinted
from epsim.profile import load_profile
from epsim.routing import skew_from_dict
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.errors import validate
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import ModelSpec
from epsim.spec.network import NETWORK_KINDS
from epsim.text import duration, table
from epsim.zoo import get_hardware, get_model, model_names

MAX_POINTS = 256             # rows of one `epsim cost` table
MAX_TOKENS_PER_RANK = 10**7   # tokens of one rank in one step; SGLang's prefill chunks are ~8k-16k


def _model(name: str):
    if name in model_names():
        return get_model(name)
    if Path(name).is_file():
        return ModelSpec.from_hf_config(name)
    raise SpecError(hinted(f"--model ({name!r}) must be one of {model_names()} or a Hugging Face "
                           f"config.json file", did_you_mean(name, model_names())))


def layer_cost(model, gpu: str, backend: str, ep: int, tokens_per_rank: int, skew: str = "uniform",
               deepep_mode: str = "auto", dispatch_dtype: str = "bf16", profile=None,
               seed: int = 0, time_mode: str = "auto", phase: str | None = None,
               network: str | None = None) -> dict:
    """Predict one MoE layer; returns the numbers `epsim cost` prints.

    `time_mode` "auto" costs the layer as SGLang runs its phase: a decode step within
    `cuda_graph_max_bs` tokens per rank replays a CUDA graph (device time), others run eagerly
    (device time + host overhead); "graph" / "eager" force one. `phase` defaults to decode up
    to `cuda_graph_max_bs` tokens per rank (or with low-latency kernels), else prefill.

    Raises:
        SpecError: a value outside what the models accept (one line naming it).
    """
    if not 0 <= tokens_per_rank <= MAX_TOKENS_PER_RANK:
        raise SpecError(f"--tokens-per-rank ({tokens_per_rank:.6g}) must be >= 0 and <= "
                        f"{MAX_TOKENS_PER_RANK:.0e} (tokens one rank holds in one step)")
    if not 0 <= seed < 2**63:
        raise SpecError(f"--seed ({seed:.6g}) must be >= 0 and < 2**63")
    if ep <= 0:
        raise SpecError(f"--ep ({ep}) must be > 0")
    per_node = get_hardware(gpu).gpus_per_node
    if ep > per_node and ep % per_node:
        raise SpecError(f"--ep ({ep}) must be <= {per_node} or a multiple of {per_node} "
                        f"(GPUs per {gpu} node)")
    if model.num_experts % ep:
        raise SpecError(f"--ep ({ep}) must divide the model's experts ({model.num_experts})")
    if network is not None and network not in NETWORK_KINDS:
        raise SpecError(f"--network ({network!r}) must be one of {list(NETWORK_KINDS)}")
    cluster = validate(ClusterSpec, {"gpu": gpu, "num_nodes": max(1, ep // per_node),
                                     "network": network}, "--network")
    if backend not in vocab.A2A_BACKENDS:
        raise SpecError(hinted(f"--backend ({backend!r}) must be one of {list(vocab.A2A_BACKENDS)}",
                               did_you_mean(backend, vocab.A2A_BACKENDS)))
    deployment = validate(DeploymentSpec, {
        "ep_size": ep, "moe_a2a_backend": backend, "deepep_mode": deepep_mode,
        "dispatch_dtype": dispatch_dtype}, "--backend")
    if phase is None:
        phase = ("decode" if deepep_mode == "low_latency"
                 or tokens_per_rank <= deployment.cuda_graph_max_bs else "prefill")
    if phase not in ("prefill", "decode"):
        raise SpecError(f"--phase ({phase!r}) must be one of ['prefill', 'decode']")
    cost_model = CostModel(model, cluster, deployment, profile, time_mode=time_mode)
    profile = cost_model.profile            # the named one, else the GPU's default
    graph = cost_model.graph_step(phase, tokens_per_rank)
    mode = cost_model.mode_for(phase)          # DeepEP's kernels for the phase (auto: SGLang's rule)
    if ep > 1:                                # EP 1: nothing is dispatched
        profile.warn_outside(backend, "dispatch", mode, num_tokens_per_rank=tokens_per_rank,
                             ep_size=ep)
    skew_model = skew_from_dict(skew, 1, model.num_experts, model.top_k, seed=seed)
    rng = np.random.default_rng([seed, 0xC057])
    loads = skew_model.loads(ep * tokens_per_rank, rng)                   # [1, experts]
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, model.num_experts, ep),
                                               model.num_experts, ep, per_node))
    moe = cost_model.moe(loads, np.full(ep, float(tokens_per_rank)), tables, phase, graph=graph)
    cost_model.record_layer(moe, graph, tokens_per_rank)
    params = cost_model.params
    send = params.eager.stage("dispatch", mode)        # None for `none`: its all-gather
    tr = moe.traffic
    pairs = tr.pairs[0]
    net = cluster.network_resolved
    return {
        "model": model.name, "gpu": gpu, "backend": backend, "mode": moe.mode or None,
        "phase": phase, "time_mode": time_mode, "graph": graph,
        "time": "device" if graph else "device+host",
        "ep_size": ep, "num_nodes": cluster.num_nodes, "tokens_per_rank": tokens_per_rank,
        "dispatch_dtype": dispatch_dtype, "skew": skew, "seed": seed,
        "dispatch_us": float(moe.dispatch_us[0]), "experts_us": float(moe.experts_us[0]),
        "combine_us": float(moe.combine_us[0]), "block_ops_us": float(np.ravel(moe.block_ops_us)[0]),
        "layer_us": float(moe.layer_us[0]), "layout_us": float(np.ravel(moe.layout_us)[0]),
        "block_ops_parts": list(params.step(graph).block_ops_parts[moe.mode]),
        "max_rank_pairs": float(pairs.max()), "mean_rank_pairs": float(pairs.mean()),
        "busiest_nvl_copies": float(tr.nvl_copies[0].max()),
        "busiest_rdma_copies": float(tr.rdma_copies[0].max()),
        "network": net.kind, "network_detail": net.describe(),
        "transport": params.transport.name,
        "rdma_gbps": float((send.params if send else params.collectives.allreduce)["rdma_gbps"]),
        "profile": (profile.name or profile.path or "datasheet")
        + ("" if cost_model.profile_rule == "named" else f", {cost_model.profile_rule}"),
        **_stages(cost_model, moe, graph),
        "provenance": provenance(cost_model, of="layer time"),
    }


def _stages(cost_model, moe, graph: bool) -> dict:
    """Host overhead per stage (0 in a graph step) and p10/p90 of each stage and the layer
    (None where a part has no measured spread; the layer's band adds its parts' bands)."""
    host, band = {}, {}
    step = cost_model.params.step(graph)
    for kind, values in (("dispatch", moe.dispatch_us), ("experts", moe.experts_us),
                         ("combine", moe.combine_us)):
        stage = step.stage(kind, moe.mode)
        if stage is None:                          # `none`: no all-to-all stages
            host[kind], band[kind] = 0.0, None
            continue
        host[kind] = stage.host_us
        band[kind] = stage_band(cost_model.profile, stage.timing, float(values[0]) - host[kind],
                                graph)
    host["block_ops"] = step.block_ops_host[moe.mode]
    timing = step.block_ops.timing
    band["block_ops"] = stage_band(cost_model.profile, timing,
                                   float(np.ravel(moe.block_ops_us)[0]) - host["block_ops"], True)
    if band["block_ops"] is not None and host["block_ops"] > 0:
        # the host overhead of the parts the step adds: their share of the block's launches
        share = host["block_ops"] / timing.host_us
        band["block_ops"] = (band["block_ops"][0] + timing.host_p10_us * share,
                             band["block_ops"][1] + timing.host_p90_us * share)
    layer = None
    if all(b is not None for b in band.values()):
        layer = tuple(sum(b[i] for b in band.values()) + moe.sync_us for i in (0, 1))
    out = {"host_us": host}
    for kind, b in [*band.items(), ("layer", layer)]:
        out[f"{kind}_p10_us"] = None if b is None else float(b[0])
        out[f"{kind}_p90_us"] = None if b is None else float(b[1])
    return out


def parse_counts(text: str, flag: str, limit: int = 1024) -> list[int]:
    """`8,16,32` or `1-4096` (1, 2, 4, ... 4096: doubling from the first to the last, the last
    always included) or a mix, as a list of distinct integers in the order given.

    Raises:
        SpecError: anything but integers, commas and LO-HI ranges with LO <= HI; more than
            `limit` values.
    """
    values: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        try:
            values.append(int(part))          # a negative number too: its own rule says why
            continue
        except ValueError:
            lo, _, hi = part.partition("-")
        try:
            lo_i, hi_i = int(lo), int(hi)
        except ValueError:
            raise SpecError(f"{flag} ({text!r}) must be integers separated by commas or LO-HI "
                            f"ranges (doubling), e.g. 8,16,32 or 1-4096") from None
        if not 0 < lo_i <= hi_i:
            raise SpecError(f"{flag} range ({part}) must have 0 < LO <= HI")
        value = lo_i
        while value < hi_i and len(values) <= limit:
            values.append(value)
            value *= 2
        values.append(hi_i)
    if len(values) > limit:
        raise SpecError(f"{flag} ({text!r}) must give at most {limit} values")
    return list(dict.fromkeys(values))


def _detail_lines(result: dict) -> list[str]:
    """One point's summary: what was priced, the stages with their bands, provenance."""
    mode = f" ({result['mode']})" if result["mode"] else ""
    how = ("device time (CUDA-graph step)" if result["graph"]
           else "device time + host overhead (eager step)")
    lines = [f"{result['model']} on {result['ep_size']} x {result['gpu']} ({result['num_nodes']} "
             f"node(s)), {result['backend']}{mode}, {result['tokens_per_rank']} tokens/rank, skew "
             f"{result['skew']}, profile {result['profile']}",
             f"  time: {how}, {result['phase']} phase, --mode {result['time_mode']}"]
    if result["num_nodes"] > 1:
        lines.insert(1, f"  network {result['network_detail']}, {result['backend']} path "
                        f"{result['transport']}, {result['rdma_gbps']:.1f} GB/s per GPU achievable")
    rows = []
    for name, kind in (("dispatch", "dispatch"), ("experts", "experts"), ("combine", "combine"),
                       ("block ops", "block_ops"), ("MoE layer", "layer")):
        host = result["host_us"].get(kind, sum(result["host_us"].values()))
        rows.append([name, duration(result[f"{kind}_us"]), duration(result[f"{kind}_p10_us"]),
                     duration(result[f"{kind}_p90_us"]), duration(host)])
    lines += table(["stage", "median", "p10", "p90", "host"], rows)
    lines.append(f"  {result['provenance']['line']}")
    lines.append(f"  busiest rank: {result['max_rank_pairs']:.0f} token-expert pairs "
                 f"(mean {result['mean_rank_pairs']:.0f}); MoE layer = dispatch + experts + "
                 f"combine + block ops (no attention)")
    if result["ep_size"] == 1:
        lines.append("  EP 1: one GPU holds every expert; nothing is dispatched or combined "
                     "(no a2a backend runs)")
    if result["block_ops_parts"] == ["router"]:
        lines.append(f"  block ops: the router; {result['backend']}'s low-latency kernels lay "
                     f"rows out by expert and weight the top-k in the combine (docs/model.md)")
    if result["block_ops_parts"] == ["gate"]:
        lines.append("  block ops: the router's gate GEMM; the experts' fit (the fused Triton "
                     "MoE's aiconfigurator rows) timed the top-k, the permute and the top-k "
                     "weighting (docs/model.md)")
    if result["layout_us"] > 0:
        lines.append(f"  experts include {result['backend']}'s own layout work "
                     f"({result['layout_us']:.1f} µs, measured: docs/model.md, section 4c)")
    return lines


def _table_lines(results: list[dict]) -> list[str]:
    """Several points: one row each (EP size, tokens per rank, phase and kernels, the stages,
    the layer's band, the measured share)."""
    first = results[0]
    lines = [f"{first['model']} on {first['gpu']}, {first['backend']}, skew {first['skew']}, "
             f"profile {first['profile']}; MoE layer = dispatch + experts + combine + block ops "
             f"(no attention); time: graph = device time, eager = device + host"]
    rows = [[r["ep_size"], r["tokens_per_rank"], r["phase"] + (f" {r['mode']}" if r["mode"] else ""),
             "graph" if r["graph"] else "eager", duration(r["dispatch_us"]), duration(r["experts_us"]),
             duration(r["combine_us"]), duration(r["block_ops_us"]), duration(r["layer_us"]),
             f"{duration(r['layer_p10_us'])} - {duration(r['layer_p90_us'])}"
             if r["layer_p10_us"] is not None else "-",
             f"{100 * r['provenance']['measured_share']:.0f} %"] for r in results]
    lines += table(["EP", "tokens/rank", "phase", "time", "dispatch", "experts", "combine",
                    "block ops", "layer", "layer p10 - p90", "measured"], rows)
    return lines


def run(args):
    model = _model(args.model)
    # the named profile, else each point's GPU default (`epsim.default_profile`, resolved once)
    profile = load_profile(args.profile) if args.profile else None
    eps = parse_counts(args.ep, "--ep", limit=64)
    tokens = parse_counts(args.tokens_per_rank, "--tokens-per-rank", limit=64)
    if len(eps) * len(tokens) > MAX_POINTS:
        raise SpecError(f"--ep x --tokens-per-rank ({len(eps)} x {len(tokens)} points) must be at "
                        f"most {MAX_POINTS} points")
    results = [layer_cost(model, args.cluster, args.backend, ep, t, skew=args.skew,
                          deepep_mode=args.deepep_mode, dispatch_dtype=args.dispatch_dtype,
                          profile=profile, seed=args.seed, time_mode=args.mode, phase=args.phase,
                          network=args.network)
               for ep in eps for t in tokens]
    if len(results) == 1:
        return Report(results[0], _detail_lines(results[0]))
    return Report({"points": results}, _table_lines(results))
