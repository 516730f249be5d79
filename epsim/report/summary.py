"""A finished run as numbers: `summary.json`, `timeseries.csv` and the stdout table.

The measurement window runs from `warmup_s` to the end; throughput and per-layer means cover
the steps that start in it. Latencies, as a user feels them:

- TTFT: every request arriving in the window that got its first token.
- TPOT: per request active in the window, finished or not (those running at t=0 too), the mean
  of its inter-token gaps that ended in the window (`epsim.sim.token_gaps`), every stall it
  lived through (EPLB stop-the-world, a failure's reload) included.
- ITL: every inter-token gap that ended in the window, each token once (per step, the mean
  gap of the requests it emitted for; exact when a step's requests had their previous token
  at the same time, as in decode).
- end-to-end: requests arriving in the window that finished in it.

A statistic with no sample shows `-`, and `latency_notes` says why. `keep_up` says whether
the instance serves its offered load (`epsim.report.keep_up`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from epsim.cost.provenance import part_bands
from epsim.cost.transport import transport_path
from epsim.io.write import replacing_file, write_text
from epsim.report.benchmark import bench_serving
from epsim.report.keep_up import keep_up
from epsim.report.serving import label_saturated, serving
from epsim.sim.metrics import STEP_COLUMNS, SimResult

PERCENTILES = (50, 90, 99)


def percentiles(values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float | int | None]:
    """`{"p50", "p90", "p99", "mean", "count"}` of the finite values (None when there are none).

    Args:
        weights: [values] how many samples each value stands for (None: one each); `count` is
            then their sum and the percentiles are of the expanded samples.
    """
    values = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(values)
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        keep &= weights > 0
    values = values[keep]
    if values.size == 0:
        return {**{f"p{q}": None for q in PERCENTILES}, "mean": None, "count": 0}
    if weights is None:
        qs = np.percentile(values, PERCENTILES)
        return {**{f"p{q}": float(v) for q, v in zip(PERCENTILES, qs)},
                "mean": float(values.mean()), "count": int(values.size)}
    weights = weights[keep]
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    upper = np.cumsum(weights)                            # sample k lies in (upper - w, upper]
    total = upper[-1]
    qs = [values[min(int(np.searchsorted(upper, q / 100.0 * total)), values.size - 1)]
          for q in PERCENTILES]
    return {**{f"p{q}": float(v) for q, v in zip(PERCENTILES, qs)},
            "mean": float((values * weights).sum() / total), "count": int(round(total))}


def tpot_ms(result: SimResult) -> np.ndarray:
    """[requests with a gap in the window] mean inter-token gap (ms), stalls included."""
    gaps = result.window_gaps
    if gaps is None:
        return np.zeros(0)
    has = gaps.count >= 1
    return gaps.span_s[has] / gaps.count[has] * 1e3


def superseded(result: SimResult) -> np.ndarray:
    """[requests] bool: lost sends whose clients resent them (`epsim.sim.retries`); the resend,
    timed from the first send, stands for the request."""
    out = np.zeros_like(result.is_initial)
    if result.retry_of is not None:
        out[result.retry_of[result.retry_of >= 0]] = True
    return out


def request_latencies_ms(result: SimResult) -> dict[str, np.ndarray]:
    """Per-request TTFT and end-to-end latency (ms) of the requests arriving in the window
    (NaN where none yet; a resent request by its resend), and TPOT (ms) of every request with
    an inter-token gap in it."""
    measured = ~result.is_initial & ~superseded(result) & (result.arrival_s >= result.warmup_s)
    arrival = result.arrival_s[measured]
    first = result.first_token_s[measured]
    finish = result.finish_s[measured]
    return {"ttft_ms": (first - arrival) * 1e3, "tpot_ms": tpot_ms(result),
            "e2e_ms": (finish - arrival) * 1e3}


def itl_ms(result: SimResult) -> dict[str, float | int | None]:
    """Percentiles of the inter-token gaps (ms) closed by the steps starting in the window."""
    steps = result.steps
    measured = steps["start_us"] >= result.warmup_s * 1e6
    return percentiles(steps["itl_mean_us"][measured] * 1e-3, steps["itl_count"][measured])


def latency_notes(summary: dict, result: SimResult) -> dict[str, str]:
    """Why a latency statistic has no value: `{name: reason}` for each empty one."""
    window_s = result.duration_s - result.warmup_s
    steps = result.steps
    in_window = steps["start_us"] >= result.warmup_s * 1e6
    if not in_window.any():
        reason = (f"no step started in the {window_s:g}-s window (shorter than one step, or "
                  f"nothing to run)")
        return {name: reason for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
                if not summary[name]["count"]}
    notes = {}
    n = summary["num_requests"]
    if not summary["ttft_ms"]["count"]:
        notes["ttft_ms"] = ("no request arrived in the window" if not n["measured"] else
                            f"none of the {n['measured']} requests arriving in the window was "
                            f"admitted and got its first token")
    if not summary["tpot_ms"]["count"]:
        notes["tpot_ms"] = notes["itl_ms"] = ("no request produced two tokens in the window "
                                              "(prefill-only instance, or nothing admitted)")
    if not summary["e2e_ms"]["count"]:
        notes["e2e_ms"] = (f"none of the {n['measured']} requests arriving in the window finished "
                           f"within it (outputs outlast the {window_s:g}-s window; TPOT counts "
                           f"unfinished requests)")
    return notes


def latency_windows(result: SimResult, window_s: float) -> dict[str, np.ndarray]:
    """Latency over simulated time, per window of `window_s` (NaN where a window has none).

    Returns:
        `t_s` (window centres), `step_ms` (mean step time of steps starting in the window),
        `ttft_ms` (mean TTFT of requests arriving in it), `tpot_ms` (mean inter-token gap of
        the tokens emitted in it, stalls included), `balancedness` (mean per-step
        balancedness), `[windows]` each. All requests count (warm-up and those running at t=0
        too), to show the whole run.
    """
    if not window_s > 0:
        raise ValueError(f"window_s ({window_s}) must be > 0")
    num = max(1, int(np.ceil(result.duration_s / window_s - 1e-9)))
    edges = np.arange(num + 1) * window_s

    def mean_by(times: np.ndarray, values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        weights = np.ones_like(values) if weights is None else weights
        ok = np.isfinite(times) & np.isfinite(values) & (weights > 0)
        which = np.clip((times[ok] / window_s).astype(np.int64), 0, num - 1)
        sums = np.bincount(which, values[ok] * weights[ok], minlength=num)
        counts = np.bincount(which, weights[ok], minlength=num)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.where(counts > 0, counts, 1), np.nan)

    steps = result.steps
    start_s = steps["start_us"] * 1e-6
    end_s = start_s + steps["step_us"] * 1e-6
    arrived = np.where(result.is_initial, np.nan, result.arrival_s)        # t=0 requests have no TTFT
    return {"t_s": (edges[:-1] + edges[1:]) / 2,
            "step_ms": mean_by(start_s, steps["step_us"] * 1e-3),
            "ttft_ms": mean_by(arrived, (result.first_token_s - result.arrival_s) * 1e3),
            "tpot_ms": mean_by(end_s, steps["itl_mean_us"] * 1e-3, steps["itl_count"]),
            "balancedness": mean_by(start_s, steps["balancedness"])}


def summarize(result: SimResult) -> dict:
    """The run's summary (everything in it is a function of scenario, profile and seed,
    except `wall_seconds`)."""
    steps = result.steps
    warm_us = result.warmup_s * 1e6
    measured = steps["start_us"] >= warm_us
    window_s = result.duration_s - result.warmup_s
    per_gpu_s = window_s * result.num_gpus
    prefill = float(steps["prefill_tokens"][measured].sum())
    output = float(steps["output_tokens"][measured].sum())
    processed = float(steps["num_tokens"][measured].sum())
    lat = request_latencies_ms(result)
    # a client's resend of a lost request is the same request: counted once, finished if it did
    resend = result.retry_of >= 0 if result.retry_of is not None else np.zeros_like(result.is_initial)
    replaced = superseded(result)                    # lost sends their clients resent
    num_measured = int((~result.is_initial & ~resend & (result.arrival_s >= result.warmup_s)).sum())
    finished = np.isfinite(result.finish_s) & ~result.is_initial & (result.arrival_s >= result.warmup_s)
    busy_us = float(steps["step_us"][measured].sum())
    stall_us = float(sum(s[1] for s in result.stalls if s[0] >= warm_us))
    parts = ("attention_us", "dispatch_us", "experts_us", "combine_us", "shared_experts_us",
             "block_ops_us", "dense_us", "overhead_us", "extra_us", "draft_us")
    breakdown = {name[:-3]: (float(steps[name][measured].sum()) / busy_us if busy_us else 0.0)
                 for name in parts}
    layer = {name: [float(v) for v in values] for name, values in result.layer_mean_us.items()}
    rank_load = result.rank_pairs_mean
    lost = result.lost if result.lost is not None else np.zeros_like(result.is_initial)
    ttft = percentiles(lat["ttft_ms"])
    scenario = result.scenario.model_dump(mode="json")
    summary = {
        "scenario": scenario,
        "network": network_info(result.scenario),
        "profile": {k: v for k, v in result.profile_info.items() if k != "provenance"},
        # which component gave each part of the time: fitted / extrapolated / datasheet, with
        # the share of step time each covers and its p10/p90 band (epsim.cost.provenance)
        "provenance": result.profile_info.get("provenance", {}),
        # the mean MoE-layer parts with the p10/p90 of the component behind each
        "layer_bands_us": part_bands(result.profile_info.get("provenance", {}), {
            part: float(np.mean(result.layer_mean_us[f"{part}_us"]))
            for part in ("attention", "dispatch", "experts", "combine", "block_ops")
            if f"{part}_us" in result.layer_mean_us}),
        "seed": result.seed,
        "sim_seconds": result.duration_s,
        "warmup_s": result.warmup_s,
        "wall_seconds": result.wall_seconds,
        "num_gpus": result.num_gpus,
        # instances sharing the workload (xPyD's side, or replicas); the numbers are one's
        "num_instances": result.scenario.deployment.num_instances,
        "num_steps": int(steps["step_us"].shape[0]),
        "num_measured_steps": int(measured.sum()),
        "num_requests": {"arrived": int((~result.is_initial & ~resend).sum()), "measured": num_measured,
                         "finished": int(finished.sum()), "lost": int(lost.sum()),
                         "resent": int(resend.sum())},
        # decode requests per rank running at t=0 ("steady" resolved to the screen's batch)
        "initial_running_per_rank": int(result.initial_running_per_rank),
        "throughput_tokens_per_s_per_gpu": processed / per_gpu_s,
        "input_tokens_per_s_per_gpu": prefill / per_gpu_s,
        "output_tokens_per_s_per_gpu": output / per_gpu_s,
        "requests_per_s": float(finished.sum()) / window_s,
        "keep_up": label_saturated(keep_up(
            result.arrival_s, result.first_token_s, result.is_initial | replaced, lost, result.warmup_s,
            result.duration_s, ttft["p99"], step_start_s=steps["start_us"] * 1e-6,
            num_running=steps["num_running"],
            clients=getattr(result.scenario.one_instance().workload.arrivals, "clients", None)),
            scenario),
        # one GPU's memory and how its KV pool bound admission (`epsim.sim.memory`, `.kv_pool`)
        "kv_cache": result.kv_cache,
        # the same run as sglang.bench_serving would report it (`epsim.report.benchmark`)
        "bench_serving": bench_serving(result),
        "ttft_ms": ttft,
        "tpot_ms": percentiles(lat["tpot_ms"]),
        "itl_ms": itl_ms(result),
        "e2e_ms": percentiles(lat["e2e_ms"]),
        "step_ms": percentiles(steps["step_us"][measured] * 1e-3),
        "prefill_step_frac": float(steps["is_prefill"][measured].mean()) if measured.any() else 0.0,
        "busy_frac": busy_us / (window_s * 1e6),
        "stall_us_total": stall_us,
        "time_breakdown_frac": breakdown,
        "imbalance_max_over_mean": float(steps["imbalance"][measured].mean()) if measured.any() else 1.0,
        "balancedness": float(steps["balancedness"][measured].mean()) if measured.any() else 1.0,
        "rank_load_max_over_mean": float(rank_load.max() / rank_load.mean()) if rank_load.mean() > 0 else 1.0,
        "rank_load_pairs_mean": [float(v) for v in rank_load],
        **{name: layer[name] for name in ("attention_us", "dispatch_us", "experts_us", "combine_us",
                                           "block_ops_us", "layer_us")},
        **_eplb_and_elastic(result),
    }
    summary["latency_notes"] = latency_notes(summary, result)
    # offered, served and finished, defined once (`epsim.report.serving`)
    summary["serving"] = serving(summary)
    return summary


def _eplb_and_elastic(result: SimResult) -> dict:
    """`eplb` (rebalances: totals and every event) and `elastic` (failures) sections, present
    when the scenario enables them."""
    d = result.scenario.deployment
    out = {}
    if d.enable_eplb:
        events = result.rebalances
        out["eplb"] = {
            "init_expert_location": d.init_expert_location,
            "note": _no_rebalance_note(result),
            "num_rebalances": len(events),
            "stall_us_total": float(sum(e["stall_us"] for e in events)),
            "spread_us_total": float(sum(e["spread_us"] for e in events)),
            "moved_bytes_total": float(sum(e["moved_bytes"] for e in events)),
            "balancedness_before_mean": (float(np.mean([e["balancedness_before"] for e in events]))
                                         if events else None),
            "balancedness_after_mean": (float(np.mean([e["balancedness_after"] for e in events]))
                                        if events else None),
            "rebalances": events,
        }
    if d.failures:
        events = result.elastic_events
        out["elastic"] = {
            "recovery": d.elastic_recovery,
            "lost_requests": int(sum(e["lost_requests"] for e in events)),
            "stall_us_total": float(sum(e["stall_us"] for e in events)),
            "events": events,
        }
    return out


def _no_rebalance_note(result: SimResult) -> str | None:
    """Why no rebalance happened (in the run, or in its measurement window); None if one did."""
    d = result.scenario.deployment
    events = result.rebalances
    start = f"the placement stayed as init_expert_location ({d.init_expert_location}) made it"
    if not events:
        passes = int(result.steps["step_us"].shape[0])
        if passes < d.eplb_rebalance_num_iterations:
            return (f"no rebalance: the run's {passes} forward passes are fewer than "
                    f"eplb_rebalance_num_iterations ({d.eplb_rebalance_num_iterations}); {start}")
        return f"no rebalance: no expert load was recorded; {start}"
    if not any(e["at_s"] >= result.warmup_s for e in events):
        return (f"no rebalance in the measurement window: {len(events)} during the "
                f"{result.warmup_s:g} s warm-up")
    return None


def write_summary(summary: dict, path: str | Path) -> Path:
    """`summary.json`, written atomically (`epsim.io.write`); returns its path."""
    return write_text(path, json.dumps(summary, indent=1) + "\n")


def write_timeseries(result: SimResult, path: str | Path) -> Path:
    """One CSV row per step: `t_s` (step start) and every `STEP_COLUMNS` value (atomically);
    returns its path."""
    steps = result.steps
    columns = [name for name in STEP_COLUMNS if name != "start_us"]
    with replacing_file(path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["t_s", *columns])
        t_s = steps["start_us"] * 1e-6
        table = np.column_stack([t_s] + [steps[name] for name in columns]) if len(t_s) else []
        for row in table:
            writer.writerow([f"{v:.9g}" for v in row])
    return Path(path)


def network_info(scenario) -> dict:
    """The cluster's scale-out network and the backend's path over it (datasheet figures)."""
    net = scenario.cluster.network_resolved
    path = transport_path(scenario.deployment.moe_a2a_backend, net.kind)
    return {"kind": net.kind, "nics_per_node": net.nics_per_node,
            "nic_gbit_per_s": net.nic_gbit_per_s, "nic_gbps_per_gpu": net.nic_gbps_per_gpu,
            "system": net.system, "transport": path.name, "latency_us": path.latency_us,
            "spans_nodes": scenario.deployment.num_gpus > scenario.cluster.gpus_per_node_resolved,
            "source": "datasheet"}
