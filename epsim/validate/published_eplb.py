"""Predictions of published EPLB rebalance stalls and elastic-EP recoveries, term by term.

A rebalance is priced as the serving engine runs it (`epsim.eplb.host_terms`): the host terms
from our own measurements (the shipped profile's `any/rebalance_host`, timed on a CPU by
`live.bench.eplb_host`; the per-op link latencies of `any/rebalance`, fitted on two H200),
the link bandwidths from the published cluster's datasheet. A recovery adds the configured
timeouts of `epsim.eplb.recovery`. Nothing here reads a published value.
"""

from __future__ import annotations

from functools import lru_cache

from epsim.eplb import compute_placement, rebalance_cost, rebalance_params
from epsim.eplb.host_terms import EngineRebalance, engine_rebalance
from epsim.eplb.recovery import RecoveryTerms, failure_terms
from epsim.profile import Profile
from epsim.routing import skew_from_dict
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, get_model

SEED = 0


@lru_cache(maxsize=1)
def shipped_host_params() -> tuple[dict[str, float], dict[str, float]]:
    """(`any/rebalance_host`, `any/rebalance`) of the shipped profile: our measurements."""
    from epsim.profile import default_profile_path
    profile = Profile.load(default_profile_path())
    host = profile.params("any", "rebalance_host")
    links = profile.params("any", "rebalance")
    return host, links


def _placements(model, ep: int, nodes: int, physical: int, num_layers: int, algorithm: str):
    """Placements before and after: two independent Zipf(1) popularity draws (hot experts
    move), DeepSeek's algorithm on each."""
    out = []
    for seed in (SEED, SEED + 1):
        skew = skew_from_dict({"kind": "zipf", "alpha": 1.0}, num_layers, model.num_experts,
                              model.top_k, seed=seed)
        out.append(compute_placement(algorithm, skew.popularity(), physical,
                                     model.num_expert_groups, nodes, ep))
    return out


def rebalance_terms(engine: str, algorithm: str, gpu: str, ep: int, redundant: int,
                    bytes_per_param: float, tensors_per_expert: int, window_steps: int,
                    network: str | None = None, gpus_per_node: int | None = None,
                    stat_layers: int | None = None) -> EngineRebalance:
    """One stop-the-world rebalance of DeepSeek-V3 (shapes) on `ep` GPUs, term by term."""
    model = get_model("DeepSeek-V3")
    per_node = gpus_per_node or get_hardware(gpu).gpus_per_node
    nodes = max(1, ep // per_node)
    cluster = ClusterSpec(gpu=gpu, num_nodes=nodes, network=network)
    physical = model.num_experts + redundant
    host, links = shipped_host_params()
    old, new = _placements(model, ep, nodes, physical, model.num_moe_layers, "deepseek")
    params = rebalance_params(None, cluster)
    # one op per weight tensor at the latency measured per transfer; no per-layer or fixed
    # cost of our own updater (its votes are not the engine's): the engine terms replace them
    params.update(base_us=0.0, per_layer_us=0.0,
                  nvlink_latency_us=links.get("nvlink_latency_us", params["nvlink_latency_us"])
                  * tensors_per_expert,
                  rdma_latency_us=links.get("nvlink_latency_us", params["rdma_latency_us"])
                  * tensors_per_expert)
    moves = rebalance_cost(old, new, model.expert_params * bytes_per_param, params,
                           algorithm=None, layers_per_chunk=1)
    gather_gbps = cluster.rdma_gbps_resolved if nodes > 1 else cluster.nvlink_gbps_resolved
    return engine_rebalance(
        engine, algorithm, host, num_layers=stat_layers or model.num_moe_layers,
        num_moe_layers=model.num_moe_layers, num_experts=model.num_experts, num_physical=physical,
        num_ranks=ep, num_nodes=nodes, window_steps=window_steps, gather_gbps=gather_gbps,
        gather_latency_us=links.get("nvlink_latency_us", 10.0), moves=moves)


def elastic_failure(ep: int, redundant: int, failed: int) -> RecoveryTerms:
    """A failure of `failed` ranks under SGLang + Mooncake EP, DeepSeek-V3 shapes: detection,
    repair and the EPLB rebalance over the survivors (the reference algorithm over the
    survivors' slots; no weight reload while replicas cover every expert)."""
    model = get_model("DeepSeek-V3")
    host, _ = shipped_host_params()
    from epsim.eplb.host_terms import host_us
    slots_per_rank = (model.num_experts + redundant) // ep
    survivors = ep - failed
    algorithm_us = host_us(host, "sglang_reference_global",
                           model.num_layers * survivors * slots_per_rank)
    return failure_terms(rebalance_us=algorithm_us)


def throughput_ratio(ep: int, failed: int, reference_failed: int) -> float:
    """Throughput with `failed` ranks down over that with `reference_failed` down: each DP rank
    serves its own share of requests, and the scheduler routes new ones over live ranks only."""
    return (ep - failed) / (ep - reference_failed)
