"""The columns of a plan's results table: metrics from a run's summary, and columns derived
from the scenario alone (GPUs, nodes, cost, memory per GPU).

Metric names are the summary's keys, nested ones joined by dots (`tpot_ms.p99`), so a
constraint reads like the summary.json it comes from. The memory columns are a planning
estimate, not a simulation output: weights as the model's parameter counts times the weight
dtype, KV cache for `max_running_requests` requests at mean input + output length.
"""

from __future__ import annotations

import math
from typing import Any

from epsim.cost.attention import kv_share
from epsim.plan.resilience import RESILIENCE_COLUMNS, resilience_columns
from epsim.sim.steady import initial_running_per_rank
from epsim.profile import load_profile
from epsim.spec.workload import STEADY

GIB = float(1 << 30)

_SCALARS = (
    "throughput_tokens_per_s_per_gpu", "input_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
    "requests_per_s", "prefill_step_frac", "busy_frac", "stall_us_total",
    "imbalance_max_over_mean", "rank_load_max_over_mean", "num_steps", "num_measured_steps",
)
_LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "step_ms")
_STATS = ("p50", "p90", "p99", "mean", "count")
_REQUESTS = ("arrived", "measured", "finished")
_BREAKDOWN = ("attention", "dispatch", "experts", "combine", "shared_experts", "block_ops", "dense",
              "overhead", "extra")
_LAYER_MEANS = ("attention_us", "dispatch_us", "experts_us", "combine_us", "block_ops_us", "layer_us")
# sections of a summary (eplb and elastic only when the scenario enables EPLB or has failures;
# NaN otherwise); keep_up.ok and keep_up.settled are 1.0 or 0.0
_SECTIONS = {
    "keep_up": ("offered_rps", "served_rps", "served_frac", "backlog_growth_rps", "ok",
                "running_growth_rps", "settled"),
    "provenance": ("measured_share", "extrapolated_share", "datasheet_share"),
    "eplb": ("num_rebalances", "stall_us_total", "moved_bytes_total", "balancedness_after_mean"),
    "elastic": ("lost_requests", "stall_us_total"),
}

METRIC_COLUMNS: tuple[str, ...] = (
    _SCALARS + ("balancedness",)
    + tuple(f"{name}.{stat}" for name in _LATENCIES for stat in _STATS)
    + tuple(f"num_requests.{name}" for name in _REQUESTS)
    + tuple(f"time_breakdown_frac.{name}" for name in _BREAKDOWN)
    + tuple(f"{name}.mean_over_layers" for name in _LAYER_MEANS)
    + tuple(f"{section}.{name}" for section, names in _SECTIONS.items() for name in names)
)

DERIVED_COLUMNS: tuple[str, ...] = (
    "num_gpus", "num_nodes", "cost_per_hour", "expert_slots_per_gpu", "expert_weights_gib_per_gpu",
    "other_weights_gib_per_gpu", "kv_cache_gib_per_gpu", "hbm_headroom_gib",
    "initial_running_per_rank",
) + RESILIENCE_COLUMNS

# computed from a row once its metrics are known
COST_COLUMNS: tuple[str, ...] = ("cost_per_million_output_tokens",)


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


def summary_metrics(summary: dict) -> dict[str, float]:
    """`METRIC_COLUMNS` -> value from an `epsim.report.summarize` dict (NaN where the run has
    none, e.g. TPOT when no measured request finished)."""
    row = {name: _number(summary.get(name)) for name in _SCALARS}
    imbalance = row["imbalance_max_over_mean"]
    row["balancedness"] = 1.0 / imbalance if imbalance > 0 else float("nan")
    for name in _LATENCIES:
        stats = summary.get(name) or {}
        row.update({f"{name}.{stat}": _number(stats.get(stat)) for stat in _STATS})
    requests = summary.get("num_requests") or {}
    row.update({f"num_requests.{name}": _number(requests.get(name)) for name in _REQUESTS})
    breakdown = summary.get("time_breakdown_frac") or {}
    row.update({f"time_breakdown_frac.{name}": _number(breakdown.get(name, 0.0)) for name in _BREAKDOWN})
    for name in _LAYER_MEANS:
        values = summary.get(name) or []
        row[f"{name}.mean_over_layers"] = sum(values) / len(values) if values else float("nan")
    for section, names in _SECTIONS.items():
        values = summary.get(section) or {}
        row.update({f"{section}.{name}": _number(values.get(name)) for name in names})
    return row


def mean_length(spec) -> float:
    """Mean of a request-length spec (tokens); a lognormal's `mean` ignoring its `max` clip."""
    if spec.kind == "fixed":
        return float(spec.value)
    if spec.kind == "uniform":
        return (spec.low + spec.high) / 2.0
    if spec.kind == "lognormal":
        return float(spec.mean)
    return float("nan")


def initial_per_rank(scenario, profile_path: str | None = None) -> int:
    """Decode requests per rank a point's run starts with: `workload.initial_running_per_rank`,
    "steady" resolved as the engine resolves it (the screen's steady batch, with the point's
    profile: `profile_path`, else the scenario's)."""
    per_rank = scenario.workload.initial_running_per_rank
    if per_rank != STEADY:                  # no profile to load
        return per_rank
    if profile_path is None and scenario.profile:
        profile_path = str(scenario.resolve_path(scenario.profile))
    return initial_running_per_rank(scenario, load_profile(profile_path, shared=True))


def derived_columns(scenario, profile_path: str | None = None) -> dict[str, float]:
    """`DERIVED_COLUMNS` of one validated scenario (`profile_path`: the point's profile, for
    a "steady" start).

    One serving instance uses `tp_size` GPUs (`epsim.spec.parallel`). Per GPU it holds
    `(experts + redundant) / ep_size` expert slots of every MoE layer (each a 1/moe_tp_size
    share), and 1/attn_tp_size of the attention, embeddings, shared experts and dense layers
    (a full copy with one GPU per DP group); the KV cache of its DP group's requests, its
    share of the KV heads (`epsim.cost.attention.kv_share`: all of MLA's latent); weights in
    the served formats, the KV cache in `kv_cache_dtype`.
    """
    m, c, d, w = scenario.served_model, scenario.cluster, scenario.deployment, scenario.workload
    par = d.parallel
    num_gpus = par.num_gpus
    gpus_per_node = c.gpus_per_node_resolved
    slots = (m.num_experts + d.ep_num_redundant_experts) / d.ep_size
    expert_bytes = slots * m.num_moe_layers * m.expert_bytes / par.moe_tp_size
    dense_params = (m.attention_params * m.num_layers
                    + m.num_shared_experts * m.expert_params * m.num_moe_layers
                    + m.num_dense_layers * 3 * m.hidden_size * m.intermediate_size)
    embedding_bytes = 2.0 * m.vocab_size * m.hidden_size * 2.0   # embedding + LM head, BF16
    other_bytes = dense_params * m.dense_weight_bytes_per_param + embedding_bytes
    context = mean_length(w.input_len) + mean_length(w.output_len)
    kv_bytes = (d.max_running_requests * context * m.kv_bytes_per_token(d.kv_cache_dtype)
                * m.num_layers)
    if par.attn_tp_size > 1:        # one DP group's requests, heads split over its GPUs
        other_bytes /= par.attn_tp_size
        kv_bytes = kv_bytes * kv_share(m, par.attn_tp_size)
    used = (expert_bytes + other_bytes + kv_bytes) / GIB
    return {
        "num_gpus": float(num_gpus),
        "num_nodes": float(math.ceil(num_gpus / gpus_per_node)),
        "cost_per_hour": num_gpus * c.price_per_gpu_hour,
        "expert_slots_per_gpu": slots,
        "expert_weights_gib_per_gpu": expert_bytes / GIB,
        "other_weights_gib_per_gpu": other_bytes / GIB,
        "kv_cache_gib_per_gpu": kv_bytes / GIB,
        "hbm_headroom_gib": c.hardware.hbm_gib - used,
        # requests per rank running at t=0 (`--warm-start` sets it from the screen; "steady"
        # resolved: `initial_per_rank`)
        "initial_running_per_rank": float(initial_per_rank(scenario, profile_path)),
        # with EPLB or a stated failure rate (`epsim.plan.resilience`); NaN otherwise
        **_resilience(scenario, profile_path),
    }


def _resilience(scenario, profile_path: str | None) -> dict[str, float]:
    d = scenario.deployment
    if not (d.enable_eplb or d.failures_per_gpu_hour > 0):
        return {name: math.nan for name in RESILIENCE_COLUMNS}
    if profile_path is None and scenario.profile:
        profile_path = str(scenario.resolve_path(scenario.profile))
    return resilience_columns(scenario, load_profile(profile_path, shared=True))


def cost_columns(row: dict) -> dict[str, float]:
    """Cost per million output tokens: `cost_per_hour / (output tokens/s x 3600) x 1e6`
    (NaN without a price or without output)."""
    tokens_per_hour = row.get("output_tokens_per_s_per_gpu", math.nan) * row["num_gpus"] * 3600.0
    price = row["cost_per_hour"]
    ok = price > 0 and tokens_per_hour > 0
    return {"cost_per_million_output_tokens": price / tokens_per_hour * 1e6 if ok else math.nan}
