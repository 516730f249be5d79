"""`epsim plan --fleet`: prefill and decode pools for a workload and SLO (`epsim.plan.fleet`)."""

from __future__ import annotations

import math
from pathlib import Path

from epsim.commands.emit import fleet_emit
from epsim.commands.output import Report, json_safe, wants_progress
from epsim.plan.fleet import size_fleet


def _ms(value) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.1f} ms"


def pool_line(role: str, option, verified: dict | None) -> str:
    if option is None:
        return f"{role:10s} none"
    sim = ""
    if verified:
        key = "tpot_ms.p99" if role == "decode" else "ttft_ms.p99"
        keeps = "keeps up" if verified.get("keep_up.ok") == 1.0 else "does not keep up"
        sim = f"; simulated {key[:4].upper()} p99 {_ms(verified.get(key))}, {keeps}"
        shares = [verified.get(f"provenance.{k}_share") for k in ("measured", "extrapolated",
                                                                   "datasheet")]
        if all(isinstance(v, float) and v == v for v in shares):
            sim += (f"; step time {100 * shares[0]:.0f} % measured, {100 * shares[1]:.0f} % "
                    f"extrapolated, {100 * shares[2]:.0f} % datasheet")
    what = "TPOT" if role == "decode" else "TTFT"
    return (f"{role:10s} {option.describe()} = {option.num_gpus} GPUs (screen: up to "
            f"{option.max_rate_per_s:.1f} req/s per instance, {what} {_ms(option.latency_ms)}{sim})")


def fleet_lines(fleet, scenario: str) -> list[str]:
    kv = fleet.kv
    lines = [
        f"fleet      {scenario}: {fleet.rate_per_s:g} req/s; SLO TTFT p99 <= {fleet.ttft_p99_ms:g} ms, "
        f"TPOT p99 <= {fleet.tpot_p99_ms:g} ms",
        pool_line("prefill", fleet.prefill, fleet.verified.get("prefill")),
        pool_line("decode", fleet.decode, fleet.verified.get("decode")),
        f"kv         {kv.bytes_per_request / 2**20:.0f} MiB per request over {kv.path} at "
        f"{kv.gbps:.1f} GB/s + {kv.latency_us:.0f} us = {kv.transfer_us * 1e-3:.2f} ms ({kv.source})",
        f"total      {fleet.num_gpus} GPUs",
    ]
    if fleet.meets_slo is None:
        lines.append("verified   no (--no-verify): the screen's answer, steady-state means")
    else:
        lines.append(f"verified   {'meets' if fleet.meets_slo else 'MISSES'} the SLO by simulation "
                     f"after {fleet.rounds} round(s): request TTFT p99 "
                     f"{_ms(fleet.request_ttft_p99_ms)} (prefill p99 + KV transfer + decode p99)")
    return lines


def run(args):
    fleet = size_fleet(args.scenario, args.sweep, args.constraint, kv_path=args.kv_transfer,
                       verify=not args.no_verify, executor=args.executor, workers=args.workers,
                       ray_address=args.ray_address, out=args.out, overrides=args.overrides,
                       profile=args.profile, progress=wants_progress(args))
    lines = fleet_lines(fleet, args.scenario)
    files = [] if args.out is None else [Path(args.out) / "fleet.json", Path(args.out) / "pools.csv"]
    error = None if fleet.meets_slo is not False else (
        f"the sized fleet misses the SLO by simulation after {fleet.rounds} rounds")
    data = json_safe({"scenario": args.scenario, **fleet.as_dict()})
    if getattr(args, "emit", None):
        emitted, data["sglang"], emit_error = fleet_emit(args, fleet)
        lines += emitted
        error = error or emit_error
    return Report(data, lines, files=files, error=error)
