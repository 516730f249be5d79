"""The columns of a plan's results table: metrics from a run's summary, and columns derived
from the scenario alone (GPUs, nodes, cost, memory per GPU).

Metric names are the summary's keys, nested ones joined by dots (`tpot_ms.p99`), so a
constraint reads like the summary.json it comes from. The memory columns are a planning
estimate, not a simulation output: weights as the model's parameter counts times the weight
dtype, KV cache for `max_running_requests` requests at mean input + output length
(`epsim.sim.memory`, which also gives the KV pool SGLang would allocate).
"""

from __future__ import annotations

import math
from typing import Any

from epsim.default_profile import default_profile
from epsim.plan.resilience import RESILIENCE_COLUMNS, resilience_columns
from epsim.plan.uncertainty import BAND_COLUMNS, step_band
from epsim.profile import load_profile
from epsim.profile import profile_path as profile_path_of
from epsim.sim.memory import GIB, kv_bytes_per_token, kv_running_limit, memory_plan
from epsim.sim.steady import initial_running_per_rank
from epsim.spec.workload import STEADY

_SCALARS = (
    "throughput_tokens_per_s_per_gpu", "input_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
    "requests_per_s", "prefill_step_frac", "busy_frac", "stall_us_total",
    "imbalance_max_over_mean", "rank_load_max_over_mean", "num_steps", "num_measured_steps",
)
_LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "step_ms")
_STATS = ("p50", "p90", "p99", "mean", "count")
_REQUESTS = ("arrived", "measured", "finished")
_BREAKDOWN = ("attention", "dispatch", "experts", "combine", "shared_experts", "block_ops", "dense",
              "overhead", "extra", "draft")
_LAYER_MEANS = ("attention_us", "dispatch_us", "experts_us", "combine_us", "block_ops_us", "layer_us")
# sections of a summary (eplb and elastic only when the scenario enables EPLB or has failures;
# NaN otherwise); keep_up.ok and keep_up.settled are 1.0 or 0.0
_SECTIONS = {
    "keep_up": ("offered_rps", "served_rps", "served_frac", "backlog_growth_rps", "ok",
                "running_growth_rps", "settled"),
    "provenance": ("measured_share", "extrapolated_share", "datasheet_share"),
    # how often the KV pool held a waiting request back (`epsim.sim.kv_pool`)
    "kv_cache": ("held_frac", "overflow_steps", "peak_used_frac"),
    "eplb": ("num_rebalances", "stall_us_total", "moved_bytes_total", "balancedness_after_mean"),
    "elastic": ("lost_requests", "stall_us_total"),
    # the run as sglang.bench_serving reports it (`epsim.report.benchmark`)
    "bench_serving": ("completed", "request_throughput", "output_throughput", "concurrency",
                      *(f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2e_latency")
                        for stat in ("mean", "median", "p99")),
                      "p95_itl_ms", "max_itl_ms", "accept_length"),
}

METRIC_COLUMNS: tuple[str, ...] = (
    _SCALARS + ("balancedness",)
    + tuple(f"{name}.{stat}" for name in _LATENCIES for stat in _STATS)
    + tuple(f"num_requests.{name}" for name in _REQUESTS)
    + tuple(f"time_breakdown_frac.{name}" for name in _BREAKDOWN)
    + tuple(f"{name}.mean_over_layers" for name in _LAYER_MEANS)
    + tuple(f"{section}.{name}" for section, names in _SECTIONS.items() for name in names)
    + BAND_COLUMNS
)

DERIVED_COLUMNS: tuple[str, ...] = (
    "num_gpus", "num_instances", "num_nodes", "cost_per_hour", "expert_slots_per_gpu",
    "expert_weights_gib_per_gpu",
    "other_weights_gib_per_gpu", "kv_cache_gib_per_gpu", "hbm_headroom_gib",
    "mem_fraction_static", "kv_pool_gib_per_gpu", "max_total_num_tokens", "kv_running_limit",
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
    # the step time's p10-p90 band (`epsim.plan.uncertainty`), carried to the SLO's metrics
    row.update(step_band((summary.get("provenance") or {}).get("components") or []))
    return row


def mean_length(spec) -> float:
    """Mean of a request-length spec (tokens); a lognormal's `mean` ignoring its `max` clip."""
    return spec.mean_tokens


def initial_per_rank(scenario, profile_path: str | None = None) -> int:
    """Decode requests per rank a point's run starts with: `workload.initial_running_per_rank`,
    "steady" resolved as the engine resolves it (the screen's steady batch, with the point's
    profile: `profile_path`, else the scenario's)."""
    per_rank = scenario.workload.initial_running_per_rank
    if per_rank != STEADY:                  # no profile to load
        return per_rank
    return initial_running_per_rank(scenario, _profile(scenario, profile_path))


def _profile(scenario, profile_path: str | None):
    """The point's profile: `profile_path`, else the scenario's (a file or a shipped name),
    else its GPU's default (`epsim.default_profile`), as the engine picks it."""
    if profile_path is None and scenario.profile:
        profile_path = str(profile_path_of(scenario.profile, scenario.base_dir))
    return load_profile(profile_path, shared=True) if profile_path else \
        default_profile(scenario.cluster.gpu)


def derived_columns(scenario, profile_path: str | None = None) -> dict[str, float]:
    """`DERIVED_COLUMNS` of one validated scenario (`profile_path`: the point's profile, for
    a "steady" start).

    One serving instance uses `tp_size` GPUs (`epsim.spec.parallel`), `num_instances` of them
    `num_gpus`; one GPU's memory is `epsim.sim.memory`'s (the layout and the served formats
    included): `(experts + redundant) / ep_size` expert slots of every MoE layer (each a
    1/moe_tp_size share), 1/attn_tp_size of the rest of the weights (a full copy with one GPU
    per DP group), the speculative draft's layer. `kv_cache_gib_per_gpu` is the KV of
    `max_running_requests` requests at mean input + output length (the GPU's share of its DP
    group's, in `kv_cache_dtype`), `hbm_headroom_gib` the HBM (GiB) left after weights and that
    KV; `kv_pool_gib_per_gpu` and `max_total_num_tokens` the pool SGLang would allocate,
    `kv_running_limit` the requests of mean context it holds.
    """
    m, c, d, w = scenario.model, scenario.cluster, scenario.deployment, scenario.workload
    num_gpus = d.num_gpus * d.num_instances          # every instance sharing the workload
    gpus_per_node = c.gpus_per_node_resolved
    plan = memory_plan(scenario)
    context = mean_length(w.input_len) + mean_length(w.output_len)
    kv_gib = d.max_running_requests * context * kv_bytes_per_token(m, d) / GIB
    return {
        "num_gpus": float(num_gpus),
        "num_instances": float(d.num_instances),
        "num_nodes": float(math.ceil(num_gpus / gpus_per_node)),
        "cost_per_hour": num_gpus * c.price_per_gpu_hour,
        "expert_slots_per_gpu": (m.num_experts + d.ep_num_redundant_experts) / d.ep_size,
        "expert_weights_gib_per_gpu": plan.expert_weights_gib,
        "other_weights_gib_per_gpu": plan.other_weights_gib + plan.draft_weights_gib,
        "kv_cache_gib_per_gpu": kv_gib,
        "hbm_headroom_gib": plan.hbm_gib - plan.weights_gib - kv_gib,
        "mem_fraction_static": plan.mem_fraction_static,
        "kv_pool_gib_per_gpu": plan.kv_pool_gib,
        "max_total_num_tokens": float(plan.max_total_num_tokens),
        "kv_running_limit": float(kv_running_limit(plan.max_total_num_tokens, context,
                                                   d.num_reserved_decode_tokens)),
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
    return resilience_columns(scenario, _profile(scenario, profile_path))


def cost_columns(row: dict) -> dict[str, float]:
    """Cost per million output tokens: `cost_per_hour / (output tokens/s x 3600) x 1e6`
    (NaN without a price or without output)."""
    tokens_per_hour = row.get("output_tokens_per_s_per_gpu", math.nan) * row["num_gpus"] * 3600.0
    price = row["cost_per_hour"]
    ok = price > 0 and tokens_per_hour > 0
    return {"cost_per_million_output_tokens": price / tokens_per_hour * 1e6 if ok else math.nan}


# -- names for people ---------------------------------------------------------------------
ACRONYMS = {"tpot": "TPOT", "ttft": "TTFT", "itl": "ITL", "e2e": "end-to-end", "hbm": "HBM",
            "ep": "EP", "gpu": "GPU", "gpus": "GPUs", "eplb": "EPLB", "moe": "MoE", "a2a": "all-to-all",
            "dp": "DP", "tbo": "two-batch overlap", "slo": "SLO"}
UNITS = {"ms": "ms", "s": "s", "us": "µs", "gb": "GB", "gib": "GiB", "gbps": "GB/s", "pct": "%", "rps": "req/s",
         "frac": "share"}
PREFIXES = ("deployment.", "workload.", "cluster.", "model.")


def column_label(name: str) -> str:
    """A column name for people: `tpot_ms.p99` -> `TPOT p99 (ms)`,
    `throughput_tokens_per_s_per_gpu` -> `throughput tokens/s per GPU`, `num_gpus` -> `GPUs`,
    `deployment.ep_size` -> `EP size`; names with spaces are left as they are."""
    if " " in name:
        return name
    for prefix in PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
    name = name.replace("rate_per_s", "rate_rps")     # an arrival rate is requests per second
    words = name.replace(".", "_").split("_")
    stat = words.pop() if len(words) > 1 and (words[-1] in ("mean", "max", "min")
                                              or (words[-1][:1] == "p" and words[-1][1:].isdigit())) else ""
    unit = UNITS[words.pop()] if len(words) > 1 and words[-1] in UNITS else ""
    if len(words) > 1 and words[0] == "num":
        words = words[1:]
    text = " ".join(ACRONYMS.get(w, w) for w in words).replace(" per s", "/s")
    return text + (f" {stat}" if stat else "") + (f" ({unit})" if unit else "")
