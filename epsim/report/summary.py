"""A finished run as numbers: `summary.json`, `timeseries.csv` and the stdout table.

Latency statistics cover requests that arrive at or after `warmup_s` (requests running at
t=0 are left out); throughput and per-layer means cover steps that start at or after it.
TPOT of a request is `(finish - first token) / (output tokens - 1)`; requests unfinished at
the end are left out of TPOT (which biases it toward shorter requests, as any finite run).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from epsim.sim.metrics import STEP_COLUMNS, SimResult

PERCENTILES = (50, 90, 99)


def percentiles(values: np.ndarray) -> dict[str, float | int | None]:
    """`{"p50", "p90", "p99", "mean", "count"}` of the finite values (None when there are none)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {**{f"p{q}": None for q in PERCENTILES}, "mean": None, "count": 0}
    qs = np.percentile(values, PERCENTILES)
    return {**{f"p{q}": float(v) for q, v in zip(PERCENTILES, qs)},
            "mean": float(values.mean()), "count": int(values.size)}


def request_latencies_ms(result: SimResult) -> dict[str, np.ndarray]:
    """Per-request TTFT, TPOT and end-to-end latency (ms) of the measured requests."""
    measured = ~result.is_initial & (result.arrival_s >= result.warmup_s)
    arrival = result.arrival_s[measured]
    first = result.first_token_s[measured]
    finish = result.finish_s[measured]
    out = result.output_len[measured].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / (out - 1), np.nan)
    return {"ttft_ms": (first - arrival) * 1e3, "tpot_ms": tpot * 1e3, "e2e_ms": (finish - arrival) * 1e3}


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
    num_measured = int((~result.is_initial & (result.arrival_s >= result.warmup_s)).sum())
    finished = np.isfinite(result.finish_s) & ~result.is_initial & (result.arrival_s >= result.warmup_s)
    busy_us = float(steps["step_us"][measured].sum())
    stall_us = float(sum(s[1] for s in result.stalls if s[0] >= warm_us))
    parts = ("attention_us", "dispatch_us", "experts_us", "combine_us", "shared_experts_us",
             "dense_us", "overhead_us", "extra_us")
    breakdown = {name[:-3]: (float(steps[name][measured].sum()) / busy_us if busy_us else 0.0)
                 for name in parts}
    layer = {name: [float(v) for v in values] for name, values in result.layer_mean_us.items()}
    rank_load = result.rank_pairs_mean
    return {
        "scenario": result.scenario.model_dump(mode="json"),
        "profile": result.profile_info,
        "seed": result.seed,
        "sim_seconds": result.duration_s,
        "warmup_s": result.warmup_s,
        "wall_seconds": result.wall_seconds,
        "num_gpus": result.num_gpus,
        "num_steps": int(steps["step_us"].shape[0]),
        "num_measured_steps": int(measured.sum()),
        "num_requests": {"arrived": int((~result.is_initial).sum()), "measured": num_measured,
                         "finished": int(finished.sum())},
        "throughput_tokens_per_s_per_gpu": processed / per_gpu_s,
        "input_tokens_per_s_per_gpu": prefill / per_gpu_s,
        "output_tokens_per_s_per_gpu": output / per_gpu_s,
        "requests_per_s": float(finished.sum()) / window_s,
        "ttft_ms": percentiles(lat["ttft_ms"]),
        "tpot_ms": percentiles(lat["tpot_ms"]),
        "e2e_ms": percentiles(lat["e2e_ms"]),
        "step_ms": percentiles(steps["step_us"][measured] * 1e-3),
        "prefill_step_frac": float(steps["is_prefill"][measured].mean()) if measured.any() else 0.0,
        "busy_frac": busy_us / (window_s * 1e6),
        "stall_us_total": stall_us,
        "time_breakdown_frac": breakdown,
        "imbalance_max_over_mean": float(steps["imbalance"][measured].mean()) if measured.any() else 1.0,
        "rank_load_max_over_mean": float(rank_load.max() / rank_load.mean()) if rank_load.mean() > 0 else 1.0,
        "rank_load_pairs_mean": [float(v) for v in rank_load],
        **{name: layer[name] for name in ("attention_us", "dispatch_us", "experts_us", "combine_us",
                                           "layer_us")},
    }


def write_summary(summary: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(summary, indent=1) + "\n")


def write_timeseries(result: SimResult, path: str | Path) -> None:
    """One CSV row per step: `t_s` (step start) and every `STEP_COLUMNS` value."""
    steps = result.steps
    columns = [name for name in STEP_COLUMNS if name != "start_us"]
    with Path(path).open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["t_s", *columns])
        t_s = steps["start_us"] * 1e-6
        table = np.column_stack([t_s] + [steps[name] for name in columns]) if len(t_s) else []
        for row in table:
            writer.writerow([f"{v:.9g}" for v in row])


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def format_table(summary: dict) -> str:
    """The stdout summary: throughput, latency percentiles, where a step's time goes."""
    s = summary
    sc = s["scenario"]
    d = sc["deployment"]
    lines = [
        f"scenario   {sc['name']}: {sc['model']['name']} on {d['ep_size']} x {sc['cluster']['gpu']} "
        f"(EP {d['ep_size']}, {d['moe_a2a_backend']}, disaggregation {d['disaggregation_mode']})",
        f"simulated  {s['sim_seconds']:g} s ({s['num_steps']} steps) in {s['wall_seconds']:.2f} s wall; "
        f"profile {s['profile']['name'] or s['profile']['path'] or '-'}",
        f"requests   {s['num_requests']['measured']} measured, {s['num_requests']['finished']} finished "
        f"({s['requests_per_s']:.1f}/s)",
        f"throughput {s['throughput_tokens_per_s_per_gpu']:.1f} tokens/s/GPU "
        f"(input {s['input_tokens_per_s_per_gpu']:.1f}, output {s['output_tokens_per_s_per_gpu']:.1f})",
        "",
        f"{'latency (ms)':<14}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}",
    ]
    for name in ("ttft_ms", "tpot_ms", "e2e_ms", "step_ms"):
        p = s[name]
        lines.append(f"{name[:-3]:<14}{_fmt(p['p50']):>10}{_fmt(p['p90']):>10}{_fmt(p['p99']):>10}"
                     f"{_fmt(p['mean']):>10}")
    mean = {k: float(np.mean(s[k])) if s[k] else 0.0 for k in
            ("attention_us", "dispatch_us", "experts_us", "combine_us", "layer_us")}
    lines += [
        "",
        f"MoE layer (mean us)  attention {mean['attention_us']:.1f}  dispatch {mean['dispatch_us']:.1f}  "
        f"experts {mean['experts_us']:.1f}  combine {mean['combine_us']:.1f}  layer {mean['layer_us']:.1f}",
        "step time share      " + "  ".join(f"{k} {v * 100:.1f}%" for k, v in
                                            s["time_breakdown_frac"].items() if v > 0.0005),
        f"imbalance            max/mean pairs per rank {s['imbalance_max_over_mean']:.3f} "
        f"(per step), {s['rank_load_max_over_mean']:.3f} (mean load)",
    ]
    return "\n".join(lines)
