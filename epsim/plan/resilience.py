"""The resilience columns of a plan: what EPLB rebalances and GPU failures cost a deployment per
hour, from the same terms the simulator stalls for, without running it.

For one scenario (its steady decode step from `epsim.sim.steady`, its skew model's drift):

- **Rebalance.** The placement of the popularity at t = 0 (the deployment's `eplb_algorithm`)
  and the one a rebalance computes after `eplb_rebalance_num_iterations` steps of drift (the
  previous placement given, as the simulator's manager does); the stall is SGLang's rebalance
  term by term (`epsim.eplb.host_terms.deployment_terms`). `rebalances_per_hour` = 3600 /
  (interval + stall); `balancedness_stale` is the old placement on the drifted popularity (what
  the last step before a rebalance runs on), `balancedness_fresh` the new one.
- **Failure** (`deployment.failures_per_gpu_hour` x `ep_size` per hour). With elastic EP (DP
  attention, redundant experts, survivors holding every expert): the dispatch timeout
  (`moe_dispatch_timeout_s`), reloads of experts no survivor held, the rebalance over the
  survivors, the timed-out forward run again (one steady decode step; the terms of
  `epsim.eplb.recovery.failure_terms`); while the rank is away (`failure_repair_s`) the
  instance serves at (ep - 1) / ep. The rejoin runs no rebalance (SGLang 0.5.12: the interval
  restarts and the next periodic rebalance, already counted, places the rank's experts); the
  survivors pause for its resynchronisation's collectives (`epsim.eplb.recovery.rejoin_terms`,
  link-model lower bounds, its host work unpriced). Without elastic EP:
  the instance is down until the rank is back and every GPU has reloaded its weights
  (`reload_gbps`). Either way the failed ranks' running requests are lost and resent by their
  clients once their timeout runs out (nothing in SGLang answers or resends them; `workload.
  retry`, `epsim.sim.retries`): the tokens they had produced (half an output on average) are
  work done again, and so is their prefill where this instance prefills (aggregated; a decode
  instance's prefill instance pays it). The clients' wait adds to those requests' latency, not
  to the instance's work.
- **Goodput** = 1 - (rebalance stall + failures x time lost per failure) / 3600, time lost per
  failure counting the interruption, the degraded capacity and the redone work in instance-
  seconds. It leaves out what the simulator has and this does not: queueing after a pause.
"""

from __future__ import annotations

import math

import numpy as np

from epsim.cost.tables import contiguous_placement
from epsim.eplb import (
    Placement, compute_placement, place_over_survivors, rebalance_cost, rebalance_params,
    refill_survivors,
)
from epsim.eplb.host_terms import (
    deployment_terms, per_op_params, shipped_host_params, tensors_per_expert,
)
from epsim.eplb.recovery import deployment_rejoin_terms, failure_terms
from epsim.errors import SpecError
from epsim.routing.skew import SkewModel
from epsim.sim.steady import steady_model, steady_state

RESILIENCE_COLUMNS: tuple[str, ...] = (
    "rebalance_stall_s", "rebalances_per_hour", "rebalance_stall_s_per_hour",
    "balancedness_fresh", "balancedness_stale", "failures_per_hour", "failure_interruption_s",
    "failure_lost_s", "goodput_frac",
)


def _nan_row() -> dict[str, float]:
    return {name: math.nan for name in RESILIENCE_COLUMNS}


def _instance_nodes(scenario) -> int:
    d, c = scenario.deployment, scenario.cluster
    return max(1, d.ep_size // min(c.gpus_per_node_resolved, d.ep_size))


def rebalance_columns(scenario, profile, step_s: float) -> tuple[dict[str, float], object]:
    """The rebalance columns and the placement a rebalance leaves (None without EPLB)."""
    m, d, w = scenario.model, scenario.deployment, scenario.workload
    nodes = _instance_nodes(scenario)
    skew = SkewModel(w.skew, m.num_moe_layers, m.num_experts, m.top_k, seed=scenario.seed,
                     base_dir=scenario.base_dir)
    interval_s = d.eplb_rebalance_num_iterations * step_s
    before = np.array(skew.popularity(0.0))
    after = np.array(skew.popularity(interval_s))
    physical = m.num_experts + d.ep_num_redundant_experts
    old = compute_placement(d.eplb_algorithm, before, physical, m.num_expert_groups, nodes, d.ep_size)
    if not d.enable_eplb:
        bal = float(old.balancedness(after, d.ep_dispatch_algorithm).mean())
        return {"rebalance_stall_s": 0.0, "rebalances_per_hour": 0.0,
                "rebalance_stall_s_per_hour": 0.0, "balancedness_fresh": bal,
                "balancedness_stale": bal}, None
    new = compute_placement(d.eplb_algorithm, after, physical, m.num_expert_groups, nodes,
                            d.ep_size, previous=old)
    links, host = _links_and_host(scenario, profile)
    moves = rebalance_cost(old, new, m.expert_bytes,
                           per_op_params(links, tensors_per_expert(m.weight_dtype)),
                           algorithm=None, layers_per_chunk=1)
    stall_s = deployment_terms(host, links, m, d, nodes, moves.chunk_us).stall_us * 1e-6
    per_hour = 3600.0 / (interval_s + stall_s)
    return {"rebalance_stall_s": stall_s, "rebalances_per_hour": per_hour,
            "rebalance_stall_s_per_hour": per_hour * stall_s,
            "balancedness_fresh": float(new.balancedness(after, d.ep_dispatch_algorithm).mean()),
            "balancedness_stale": float(old.balancedness(after, d.ep_dispatch_algorithm).mean())}, new


def _links_and_host(scenario, profile):
    links = rebalance_params(profile, scenario.cluster)
    host = profile.params("any", "rebalance_host") if profile is not None else {}
    return links, host or shipped_host_params()


def elastic_possible(scenario) -> bool:
    """SGLang's elastic EP can serve through one failed rank: DP attention, and the survivors'
    slots can hold every expert (`epsim.spec.scenario`'s load-time rule)."""
    m, d = scenario.model, scenario.deployment
    slots = (m.num_experts + d.ep_num_redundant_experts) // d.ep_size
    return (d.enable_dp_attention and d.elastic_recovery == "replicas"
            and d.ep_num_redundant_experts > 0 and (d.ep_size - 1) * slots >= m.num_experts)


def failure_seconds(scenario, profile, placement, steady) -> tuple[float, float]:
    """(interruption s, instance-seconds lost) of one GPU failure (module doc)."""
    m, c, d = scenario.model, scenario.cluster, scenario.deployment
    reload_bytes_per_s = d.reload_gbps * 1e9
    # a lost request had produced half its output on average (the steady model's mean length)
    model = steady_model(scenario, profile)
    redone_tokens = steady.running_per_rank * model.output_len / 2.0
    # per failed rank, instance-seconds of decoding its lost output again and prefilling its
    # lost prompts again (every rank prefilling a chunk per step: the instance's prefill rate)
    redo_rank_s = redone_tokens / max(steady.output_per_s, 1e-9) + \
        _reprefill_s(scenario, model, steady.running_per_rank * model.input_len)
    if not elastic_possible(scenario):
        weights = (m.num_experts + d.ep_num_redundant_experts) / d.ep_size * m.num_moe_layers * m.expert_bytes
        down_s = d.moe_dispatch_timeout_s + d.failure_repair_s + weights / reload_bytes_per_s
        return down_s, down_s + d.ep_size * redo_rank_s
    if placement is None:
        placement = Placement.on_cluster(
            contiguous_placement(m.num_moe_layers, m.num_experts, d.ep_size, d.ep_num_redundant_experts),
            m.num_experts, d.ep_size, c.gpus_per_node_resolved)
    alive = np.ones(d.ep_size, dtype=bool)
    alive[0] = False
    refilled, _ = refill_survivors(placement.with_alive(alive))
    changed = refilled.physical_to_logical != placement.physical_to_logical
    per_rank = changed.reshape(m.num_moe_layers, d.ep_size, -1).sum(axis=(0, 2))
    reload_s = float(per_rank.max()) * m.expert_bytes / reload_bytes_per_s
    rebalance_s = 0.0
    if d.enable_eplb:
        links, host = _links_and_host(scenario, profile)
        per_op = per_op_params(links, tensors_per_expert(m.weight_dtype))
        survivors = place_over_survivors("deepseek_global" if d.eplb_algorithm != "sticky" else "sticky",
                                         _mean_popularity(scenario), refilled, m.num_expert_groups)
        moves = rebalance_cost(refilled, survivors, m.expert_bytes, per_op, algorithm=None,
                               layers_per_chunk=1)
        nodes = _instance_nodes(scenario)
        rebalance_s = deployment_terms(host, links, m, d, nodes, moves.chunk_us,
                                       num_alive=d.ep_size - 1).stall_us * 1e-6
    interruption = failure_terms(rebalance_s * 1e6, reload_s * 1e6,
                                 detection=d.moe_dispatch_timeout_s * 1e6,
                                 rerun_us=steady.step_s * 1e6).interruption_us * 1e-6
    links, _ = _links_and_host(scenario, profile)
    rejoin_s = deployment_rejoin_terms(scenario, links, int(placement.logical_count.max())
                                       ).interruption_us * 1e-6
    return interruption, interruption + rejoin_s + d.failure_repair_s / d.ep_size + redo_rank_s


def _reprefill_s(scenario, model, tokens: float) -> float:
    """Instance-seconds to prefill `tokens` prompt tokens again: every DP rank prefilling a
    chunk of `chunked_prefill_size` per step (`SteadyStateModel.prefill_s`); 0 on a decode
    instance, whose prefill instance prefills them."""
    d = scenario.deployment
    if d.disaggregation_mode == "decode" or tokens <= 0:
        return 0.0
    chunk = float(d.chunked_prefill_size)
    return tokens / (model.dp * chunk) * model.prefill_s(chunk)


def _mean_popularity(scenario) -> np.ndarray:
    m, w = scenario.model, scenario.workload
    return np.array(SkewModel(w.skew, m.num_moe_layers, m.num_experts, m.top_k, seed=scenario.seed,
                              base_dir=scenario.base_dir).mean_popularity())


def resilience_columns(scenario, profile=None) -> dict[str, float]:
    """`RESILIENCE_COLUMNS` of one validated scenario (NaN where its steady state cannot be
    priced: arrivals without a mean rate)."""
    try:
        steady = steady_state(scenario, profile)
    except SpecError:
        return _nan_row()
    d = scenario.deployment
    row, placement = rebalance_columns(scenario, profile, steady.step_s)
    failures = d.failures_per_gpu_hour * d.ep_size
    interruption_s, lost_s = failure_seconds(scenario, profile, placement, steady)
    lost = row["rebalance_stall_s_per_hour"] + failures * lost_s
    row.update({"failures_per_hour": failures, "failure_interruption_s": interruption_s,
                "failure_lost_s": lost_s, "goodput_frac": max(0.0, 1.0 - lost / 3600.0)})
    return row


def serving_frac(row: dict, moe_frac: float, fresh_reference: float | None = None) -> float:
    """The share of a balanced, failure-free instance's throughput a deployment delivers per
    hour: `goodput_frac` x the balance factor 1 / ((1 - f) + f x fresh / mean). The MoE part of
    a step (dispatch, experts, combine: share `moe_frac` = f at the fresh placement) scales with
    the busiest rank, 1 / balancedness, the rest does not; balancedness is taken to decay
    linearly from `balancedness_fresh` to `balancedness_stale` over the interval (mean: their
    average). `fresh_reference`: the balancedness the share is relative to (default the row's
    own fresh one; pass one across redundancy choices)."""
    fresh = row["balancedness_fresh"] if fresh_reference is None else fresh_reference
    mean = (row["balancedness_fresh"] + row["balancedness_stale"]) / 2.0
    return row["goodput_frac"] / ((1.0 - moe_frac) + moe_frac * fresh / mean)
