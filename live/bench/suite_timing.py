"""Per-backend timings of the MoE block on spawned EP ranks, as MeasurementRecords.

Each iteration runs the block once on forced routing (drawn from `epsim.routing`, so the skew
is the simulator's), with a StageTimer marking dispatch, experts and combine (CUDA events
between the stages on GPU). Ranks line up with a barrier before each iteration; a record's
time is the median over iterations of the slowest rank's time.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from epsim.routing import skew_from_dict
from live.bench.checks import DTYPES
from live.config import MoeConfig
from live.dist import rank_device
from live.model import Qwen3MoeModel
from live.routing import forced_routing
from live.timing import StageTimer, summarize_us
from live.weights import random_weights

# block stage -> record kind, per forward path
STAGE_KINDS = {True: {"dispatch": "dispatch", "experts": "experts", "combine": "combine",
                      "total": "moe_layer"},
               False: {"dispatch": "dispatch", "experts": "experts", "combine": "allreduce",
                       "total": "moe_layer"}}


@dataclass(frozen=True)
class TimingCase:
    """One backend timed at several token counts and skews on one model shape."""

    config: MoeConfig
    backend: str
    token_counts: tuple[int, ...]
    skews: tuple[dict, ...] = ({"kind": "uniform"},)
    model: str = ""
    dtype: str = "bfloat16"
    device: str = "cuda"
    dispatch_dtype: str = "bf16"
    deepep_mode: str = "normal"
    num_iters: int = 20
    num_warmup: int = 3
    seed: int = 0


def _sync(device: torch.device, group) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier(group=group)


def _records(case: TimingCase, tokens: int, skew: dict, per_rank: list[dict], deepep: bool,
             provenance: dict, placement) -> list[dict]:
    """Record dicts (epsim.records.MeasurementRecord fields) from all ranks' samples."""
    ep_size = len(per_rank)
    cfg = case.config
    stats = [r["stats"] for r in per_rank]
    common = dict(
        backend=case.backend, mode=case.deepep_mode if case.backend == "deepep" else "",
        ep_size=ep_size, num_tokens_per_rank=tokens, hidden_size=cfg.hidden_size,
        moe_intermediate_size=cfg.moe_intermediate_size, num_experts=cfg.num_experts,
        num_physical_experts=placement.num_physical, top_k=cfg.top_k, model=case.model,
        dispatch_dtype=case.dispatch_dtype if case.dtype == "bfloat16" else "",
        skew=skew, seed=case.seed, num_layers=1, num_iters=case.num_iters,
        recv_tokens_per_rank=[float(sum(s["recv_tokens_from_rank"])) for s in stats],
        send_tokens_per_rank=[float(sum(s["send_tokens_to_rank"])) for s in stats],
        expert_tokens_per_rank=[float(sum(s["local_expert_tokens"])) for s in stats],
        local_expert_tokens=[[float(v) for v in s["local_expert_tokens"]] for s in stats],
        extra={"dtype": case.dtype, "forward": "deepep" if deepep else "normal",
               "recv_tokens_from_rank": [s["recv_tokens_from_rank"] for s in stats],
               # eager forward: stage gaps include host launch overhead; "experts" includes
               # grouping rows by slot and packing for combine around the grouped GEMMs
               "timer": "cuda_events" if case.device == "cuda" else "perf_counter"},
        provenance=provenance)
    out = []
    for stage, kind in STAGE_KINDS[deepep].items():
        samples = np.array([r["stage_us"][stage] for r in per_rank])      # [ranks, iters]
        slowest = samples.max(axis=0)                                      # [iters]
        record = dict(common, kind=kind, **summarize_us(slowest),
                      per_rank_median_us=np.median(samples, axis=1).tolist())
        if not deepep and stage == "dispatch":
            record["extra"] = dict(common["extra"], op="all_gather")
        out.append(record)
    return out


def timing_worker(rank: int, world_size: int, group, cases: list[TimingCase], provenance: dict,
                  deadline_s: float = float("inf")) -> dict:
    """Time every case on this rank. Rank 0 returns the record dicts and per-case errors.

    A case that raises is reported and skipped (all ranks raise together for configuration
    errors, which are checked before any collective). Cases not started by `deadline_s`
    (a `time.time()` value, decided by rank 0) are skipped.
    """
    records, errors = [], []
    for case in cases:
        go = [time.time() < deadline_s]
        dist.broadcast_object_list(go, src=0, group=group)
        if not go[0]:
            errors.append({"backend": case.backend, "error": f"{case.dispatch_dtype}: skipped, "
                                                             f"time budget spent"})
            continue
        try:
            records += _time_case(rank, group, case, provenance)
        except Exception as exc:  # noqa: BLE001 - reported, the suite goes on
            errors.append({"backend": case.backend,
                           "error": f"{case.dispatch_dtype}: {type(exc).__name__}: {exc}"})
        gc.collect()                      # free the case's model before the next one
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return {"records": records if rank == 0 else [], "errors": errors}


def _time_case(rank: int, group, case: TimingCase, provenance: dict) -> list[dict]:
    cfg, dtype = case.config, DTYPES[case.dtype]
    device = rank_device(case.device)
    model = Qwen3MoeModel(cfg, 0, 1, backend=case.backend, group=group, dtype=dtype,
                          device=device, max_tokens_per_rank=max(case.token_counts),
                          dispatch_dtype=case.dispatch_dtype, deepep_mode=case.deepep_mode,
                          seed=case.seed)
    model.load_weight_cache(random_weights(cfg, [0], seed=case.seed, dtype=dtype, device=device))
    block = model.block(0)
    if model.backend.capabilities.masking:
        model.backend.check_active_ranks = False      # no host sync inside timed iterations
    deepep = block.backend.capabilities.deepep_class
    timer = StageTimer(device)
    out = []
    for skew_desc in case.skews:
        skew = skew_from_dict(skew_desc, cfg.num_layers, cfg.num_experts, cfg.top_k, seed=case.seed)
        for tokens in case.token_counts:
            rng = np.random.default_rng([case.seed, rank, tokens])
            routing = forced_routing(skew, tokens, rng, layer=0, device=device)
            gen = torch.Generator(device=device).manual_seed(case.seed + rank)
            x = torch.randn(tokens, cfg.hidden_size, generator=gen, device=device).to(dtype)
            samples: dict[str, list[float]] = {}
            with torch.no_grad():
                for it in range(case.num_warmup + case.num_iters):
                    _sync(device, group)
                    block(x, routing=routing, timer=timer)
                    if it >= case.num_warmup:
                        for stage, value in timer.stage_us().items():
                            samples.setdefault(stage, []).append(value)
            mine = {"stage_us": samples, "stats": block.last_stats.to_host()}
            gathered = [None] * dist.get_world_size(group)
            dist.all_gather_object(gathered, mine, group=group)
            if rank == 0:
                out += _records(case, tokens, skew.descriptor(), gathered, deepep, provenance,
                                model.placement)
    return out
