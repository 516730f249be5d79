"""The records of one `live.bench.sweep` point: per-rank measurements
(`live.bench.sweep_worker.measure_point` on every rank) shaped into
`epsim.records.MeasurementRecord` dicts — the slowest rank's time per iteration, median over
iterations; counts from the dispatch itself; `mode: graph` records from the forwards launched
ahead."""

from __future__ import annotations

import numpy as np

from epsim import vocab
from live.bench.stage_timing import STAGES
from live.bench.sweep_case import BenchCase, BenchSettings
from live.timing import summarize_us


def _link_counts(stats: list[dict], key: str) -> list[float]:
    """[ranks] copies each rank exchanged with *other* ranks (its own copies cross no link)."""
    return [float(sum(v for peer, v in enumerate(s[key]) if peer != rank))
            for rank, s in enumerate(stats)]


def point_records(case: BenchCase, skew_desc: dict, tokens: int, per_rank: list[dict],
                  settings: BenchSettings, provenance: dict, num_physical: int) -> list[dict]:
    """The dispatch, experts, combine and moe_layer record dicts of one point (all ranks)."""
    cfg = case.config
    stats = [r["stats"] for r in per_rank]
    deepep_class = vocab.is_deepep_class(case.backend)
    extra = {"dtype": settings.dtype, "forward": "deepep" if deepep_class else "normal",
             "timer": "cuda_events" if settings.device == "cuda" else "perf_counter",
             "timing": "isolated stages (sync + barrier before each); moe_layer: one forward",
             "recv_tokens_from_rank": [s["recv_tokens_from_rank"] for s in stats],
             "send_tokens_to_rank": [s["send_tokens_to_rank"] for s in stats]}
    common = dict(
        backend=case.backend, mode="", ep_size=len(per_rank), num_tokens_per_rank=tokens,
        hidden_size=cfg.hidden_size, moe_intermediate_size=cfg.moe_intermediate_size,
        num_experts=cfg.num_experts, num_physical_experts=num_physical, top_k=cfg.top_k,
        model=case.model, dispatch_dtype=case.dispatch_dtype if settings.dtype == "bfloat16" else "",
        skew=skew_desc, seed=settings.seed, num_layers=1, num_iters=settings.num_iters,
        recv_tokens_per_rank=_link_counts(stats, "recv_tokens_from_rank"),
        send_tokens_per_rank=_link_counts(stats, "send_tokens_to_rank"),
        expert_tokens_per_rank=[float(sum(s["local_expert_tokens"])) for s in stats],
        local_expert_tokens=[[float(v) for v in s["local_expert_tokens"]] for s in stats],
        provenance=provenance)
    out = []
    for stage in STAGES if per_rank[0]["layer"] else ():
        samples = np.array([r["isolated"][stage] for r in per_rank])     # [ranks, iters]
        in_layer = np.array([r["in_layer"][stage] for r in per_rank])
        rec_extra = dict(extra, in_layer_per_rank_median_us=np.median(in_layer, axis=1).tolist())
        if not deepep_class:
            rec_extra["op"] = "all_gather" if stage == "dispatch" else (
                "all_reduce" if stage == "combine" else "local_experts")
        if stage == "experts" and per_rank[0]["device_us"]:
            device = np.array([r["device_us"] for r in per_rank])         # [ranks, iters]
            slowest = device.max(axis=0)
            if np.isfinite(slowest).any():
                rec_extra["device_us"] = float(np.nanmedian(slowest))
                rec_extra["device_note"] = ("grouped GEMM alone on the measured counts, launched "
                                            "behind a GPU sleep: no host overhead")
            rec_extra["launch_us"] = float(np.nanmedian([r["launch_us"] for r in per_rank]))
        out.append(dict(common, kind=stage, extra=rec_extra, **summarize_us(samples.max(axis=0)),
                        per_rank_median_us=np.median(samples, axis=1).tolist()))
    if per_rank[0]["layer"]:
        layer = np.array([r["layer"] for r in per_rank])
        out.append(dict(common, kind="moe_layer", extra=dict(extra, timing="one forward"),
                        **summarize_us(layer.max(axis=0)),
                        per_rank_median_us=np.median(layer, axis=1).tolist()))
    else:          # graph-only runs time no eager forward
        out = []
    if "graph" in per_rank[0]:
        out += _graph_records(common, extra, per_rank)
    return out


def _graph_records(common: dict, extra: dict, per_rank: list[dict]) -> list[dict]:
    """`mode: graph` records of one point: each stage's device time, slowest rank per
    iteration, median over the valid iterations (none if fewer than half are valid)."""
    out = []
    launch = np.array([r["graph"]["launch_us"] for r in per_rank])          # [ranks, iters]
    for kind, name in (("dispatch", "dispatch"), ("experts", "experts"), ("combine", "combine"),
                       ("moe_layer", "layer")):
        samples = np.array([r["graph"][name] for r in per_rank])           # [ranks, iters]
        slowest = samples.max(axis=0)                  # NaN where any rank's launch was late
        valid = slowest[np.isfinite(slowest)]
        if len(valid) < max(1, samples.shape[1] // 2):
            return []
        out.append(dict(common, kind=kind, mode="graph", num_iters=len(valid),
                        extra=dict(extra, timing=("device only: launched ahead behind a GPU "
                                                  "sleep after an all-reduce (a CUDA graph "
                                                  "replay's time, no host launch); stages "
                                                  "between device barriers, moe_layer plain"),
                                   launch_us=float(np.median(launch)),
                                   valid_iters=int(len(valid))),
                        **summarize_us(valid),
                        per_rank_median_us=np.nanmedian(samples, axis=1).tolist()))
    return out
