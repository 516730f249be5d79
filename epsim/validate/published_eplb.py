"""Predictions of published EPLB rebalance stalls and elastic-EP recoveries, term by term.

A rebalance is priced as the serving engine's code runs it (`epsim.eplb.host_terms`): host terms
from our own measurements (the shipped profile's `any/rebalance_host`: CPU time of one thread,
`live.bench.eplb_host` on our CPU; the per-transfer latency of `any/rebalance`, fitted on two
H200), link bandwidths from the published cluster's datasheet, placements before and after from
two independent Zipf(1) popularity draws (the traffic's drift is not published). A recovery adds
the configured timeouts of `epsim.eplb.recovery`. Nothing here reads a published value.
"""

from __future__ import annotations

from functools import lru_cache

from epsim.cost.tables import contiguous_placement
from epsim.eplb import Placement, compute_placement, place_over_survivors, rebalance_params
from epsim.eplb.host_terms import (
    EngineRebalance, Shape, layer_moves_us, sglang_rebalance, shipped_host_params, vllm_rebalance,
)
from epsim.eplb.recovery import RecoveryTerms, failure_terms
from epsim.profile import Profile, default_profile_path
from epsim.routing import skew_from_dict
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, get_model

SEED = 0


@lru_cache(maxsize=1)
def shipped_link_params() -> dict[str, float]:
    """`any/rebalance` of the shipped profile: the per-transfer latency we fitted on H200."""
    return Profile.load(default_profile_path()).params("any", "rebalance")


def _placements(model, ep: int, nodes: int, physical: int, algorithm: str):
    """Placements before and after: two independent Zipf(1) popularity draws (hot experts
    move), the algorithm on each."""
    out = []
    for seed in (SEED, SEED + 1):
        skew = skew_from_dict({"kind": "zipf", "alpha": 1.0}, model.num_moe_layers,
                              model.num_experts, model.top_k, seed=seed)
        out.append(compute_placement(algorithm, skew.popularity(), physical,
                                     model.num_expert_groups, nodes, ep))
    return out


def _link_params(cluster: ClusterSpec, links: dict[str, float]) -> dict[str, float]:
    """The cluster's datasheet bandwidths; the per-transfer latency we measured on H200."""
    params = rebalance_params(None, cluster)
    latency = links.get("nvlink_latency_us", params["nvlink_latency_us"])
    return dict(params, nvlink_latency_us=latency, rdma_latency_us=max(latency, params["rdma_latency_us"]))


def rebalance_terms(engine: str, gpu: str, ep: int, redundant: int, bytes_per_param: float,
                    tensors_per_expert: int, window_steps: int, network: str | None = None,
                    gpus_per_node: int | None = None, version: str = "0.4.7",
                    dispatch_static: bool = True) -> EngineRebalance:
    """One stop-the-world rebalance of DeepSeek-V3 (shapes) on `ep` GPUs, term by term
    (`engine`: "sglang" | "vllm")."""
    model = get_model("DeepSeek-V3")
    per_node = gpus_per_node or get_hardware(gpu).gpus_per_node
    nodes = max(1, ep // per_node)
    cluster = ClusterSpec(gpu=gpu, num_nodes=nodes, network=network)
    physical = model.num_experts + redundant
    host, links = shipped_host_params(), shipped_link_params()
    params = _link_params(cluster, links)
    old, new = _placements(model, ep, nodes, physical, "deepseek")
    moves = layer_moves_us(old, new, model.expert_params * bytes_per_param, params,
                           tensors_per_expert)
    gather_gbps = params["rdma_gbps"] if nodes > 1 and network != "nvl72" else params["nvlink_gbps"]
    shape = Shape(num_stat_layers=model.num_layers if engine == "sglang" else model.num_moe_layers,
                  num_moe_layers=model.num_moe_layers, num_experts=model.num_experts,
                  num_physical=physical, num_ranks=ep, num_nodes=nodes,
                  num_groups=model.num_expert_groups, window_steps=window_steps)
    kw = dict(gather_gbps=gather_gbps, gather_latency_us=params["nvlink_latency_us"])
    if engine == "sglang":
        return sglang_rebalance(host, shape, moves, dispatch_static=dispatch_static,
                                version=version, **kw)
    return vllm_rebalance(host, shape, moves, **kw)


def elastic_failure(ep: int, redundant: int, failed: int, gpu: str = "H200",
                    tensors_per_expert: int = 4) -> RecoveryTerms:
    """A failure of `failed` ranks under SGLang + Mooncake EP, DeepSeek-V3 shapes in FP8:
    detection, then the EPLB rebalance over the survivors (SGLang 0.5's code: the global policy
    over the active ranks, the dispatch map, per-layer plans and weight moves from survivors;
    no reload while replicas cover every expert). The rerun of the timed-out forward is left
    out (`rerun_us` None): a decode step needs the batch, which the blog does not state."""
    model = get_model("DeepSeek-V3")
    nodes = max(1, ep // get_hardware(gpu).gpus_per_node)
    cluster = ClusterSpec(gpu=gpu, num_nodes=nodes)
    physical = model.num_experts + redundant
    host, links = shipped_host_params(), shipped_link_params()
    params = _link_params(cluster, links)
    skew = skew_from_dict({"kind": "zipf", "alpha": 1.0}, model.num_moe_layers, model.num_experts,
                          model.top_k, seed=SEED)
    weight = skew.popularity()
    # SGLang's trivial start (`--init-expert-location trivial`): every expert twice, on ranks r
    # and r + 16, so up to 16 failed ranks leave each a replica
    before = Placement.on_cluster(contiguous_placement(model.num_moe_layers, model.num_experts,
                                                       ep, redundant),
                                  model.num_experts, ep, get_hardware(gpu).gpus_per_node)
    alive = [rank >= failed for rank in range(ep)]
    after = place_over_survivors("deepseek_global", weight, before.with_alive(alive), 1)
    moves = layer_moves_us(before.with_alive(alive), after, model.expert_params, params,
                           tensors_per_expert)
    shape = Shape(num_stat_layers=model.num_layers, num_moe_layers=model.num_moe_layers,
                  num_experts=model.num_experts, num_physical=physical // ep * (ep - failed),
                  num_ranks=ep - failed, num_nodes=1, num_groups=1)
    rebalance = sglang_rebalance(host, shape, moves, gather_gbps=params["rdma_gbps"],
                                 gather_latency_us=params["nvlink_latency_us"], version="0.5")
    return failure_terms(rebalance_us=rebalance.stall_us)


def throughput_ratio(ep: int, failed: int, reference_failed: int) -> float:
    """Throughput with `failed` ranks down over that with `reference_failed` down: each DP rank
    serves its own share of requests, and the scheduler routes new ones over live ranks only."""
    return (ep - failed) / (ep - reference_failed)
