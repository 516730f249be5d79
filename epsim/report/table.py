"""A finished run's stdout table (`format_table`): what `epsim simulate` prints and the app shows,
from the summary `epsim.report.summary.summarize` makes."""

from __future__ import annotations

import numpy as np

from epsim.report.benchmark import bench_line, kv_line
from epsim.report.serving import requests_line
from epsim.spec.workload import STEADY
from epsim.text import duration, number, size, table


def _start_text(summary: dict) -> str:
    """What the run started from, where it did not start empty."""
    per_rank = summary.get("initial_running_per_rank", 0)
    if not per_rank:
        return ""
    steady = summary["scenario"]["workload"].get("initial_running_per_rank") == STEADY
    return (f"; started with {per_rank} running per rank"
            + (" (steady: the screen's steady batch)" if steady else ""))


def _tp_text(d: dict, num_gpus: int) -> str:
    """`, TP 8 (DP 2)`-style layout text where the instance is not one DP-attention GPU per
    EP rank (`epsim.spec.parallel`); "" where it is."""
    dp = d.get("dp_size") or (num_gpus if d["enable_dp_attention"] else 1)
    if num_gpus == d["ep_size"] and dp == num_gpus:
        return ""
    return f", TP {num_gpus}" + (f" (attention DP {dp})" if dp > 1 else "")


def format_table(summary: dict) -> str:
    """The stdout summary: throughput, latency percentiles, where a step's time goes."""
    s = summary
    sc = s["scenario"]
    d = sc["deployment"]
    lines = [
        f"scenario   {sc['name']}: {sc['model']['name']} on {s['num_gpus']} x {sc['cluster']['gpu']} "
        f"(EP {d['ep_size']}{_tp_text(d, s['num_gpus'])}, {d['moe_a2a_backend']}, disaggregation "
        f"{d['disaggregation_mode']})",
        *([f"network    {s['network']['kind']}: {s['network']['nics_per_node']} x "
           f"{s['network']['nic_gbit_per_s']:g} Gb/s per node ({s['network']['nic_gbps_per_gpu']:g} "
           f"GB/s per GPU), {d['moe_a2a_backend']} over {s['network']['transport']} (datasheet)"]
          if s.get("network", {}).get("spans_nodes") else []),
        f"simulated  {s['sim_seconds']:g} s ({s['num_steps']} steps) in {s['wall_seconds']:.2f} s wall; "
        f"profile {s['profile']['name'] or s['profile']['path'] or '-'}",
        f"requests   {requests_line(s)}" + _start_text(s),
        f"throughput {s['throughput_tokens_per_s_per_gpu']:.1f} tokens/s/GPU "
        f"(input {s['input_tokens_per_s_per_gpu']:.1f}, output {s['output_tokens_per_s_per_gpu']:.1f})",
        *([kv_line(s["kv_cache"])] if s.get("kv_cache") else []),
        "",
        f"keep-up    {s['keep_up']['verdict']}",
        "",
    ]
    notes = s.get("latency_notes", {})
    names = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "step_ms")
    lines += table(["latency (ms)", "p50", "p90", "p99", "mean", "count", ""],
                   [[name[:-3], *(s[name][k] for k in ("p50", "p90", "p99", "mean")),
                     s[name].get("count"), f"({notes[name]})" if name in notes else ""]
                    for name in names], indent="")
    if s.get("bench_serving"):
        lines += ["", bench_line(s["bench_serving"])]
        if s["bench_serving"].get("accept_source"):
            lines.append(f"acceptance     {s['bench_serving']['accept_source']}")
    mean = {k: float(np.mean(s[k])) if s[k] else 0.0 for k in
            ("attention_us", "dispatch_us", "experts_us", "combine_us", "block_ops_us", "layer_us")
            if k in s}
    lines += [
        "",
        "MoE layer (mean)     " + "  ".join(f"{k[:-3]} {duration(v)}" for k, v in mean.items()),
        "step time share      " + "  ".join(f"{k} {v * 100:.1f}%" for k, v in
                                            s["time_breakdown_frac"].items() if v > 0.0005),
        f"provenance           {s['provenance']['line']}" if s.get("provenance") else "",
        f"imbalance            max/mean pairs per rank {s['imbalance_max_over_mean']:.3f} "
        f"(per step), {s['rank_load_max_over_mean']:.3f} (mean load); balancedness "
        f"{s['balancedness']:.3f}",
    ]
    if "eplb" in s:
        e = s["eplb"]
        before, after = e["balancedness_before_mean"], e["balancedness_after_mean"]
        lines.append(f"EPLB                 {e['num_rebalances']} rebalances, stall "
                     f"{duration(e['stall_us_total'])}, spread {duration(e['spread_us_total'])}, "
                     f"moved {size(e['moved_bytes_total'])}"
                     + (f"; window balancedness {number(before)} -> {number(after)}"
                        if before is not None else "")
                     + (f"; {e['note']}" if e.get("note") else ""))
    if "elastic" in s:
        e = s["elastic"]
        fails = [ev for ev in e["events"] if ev["kind"] == "failure"]
        lines.append(f"elastic EP           {len(fails)} failure(s), {e['recovery']} recovery, "
                     f"{e['lost_requests']} requests lost ({s['num_requests']['resent']} resent), "
                     f"stall {duration(e['stall_us_total'])}")
    return "\n".join(lines)
