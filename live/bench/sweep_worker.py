"""What each EP rank runs for `live.bench.sweep`: every point of a case, timed stage by stage.

Per point (backend, shape, dispatch dtype, skew, tokens per rank) and iteration:

1. an *isolated* forward: the ranks wait for each other (device sync + barrier) before each
   stage, so dispatch, experts and combine are each timed from a common start and no stage
   absorbs another rank's lateness — what the simulator's bulk-synchronous layer composes;
2. the *whole layer*: one ordinary forward, as it runs in a model (`moe_layer` record);
3. on CUDA, the grouped GEMM alone launched ahead behind `torch.cuda._sleep` (device time
   without host launch overhead, kept as `extra.device_us` of the `experts` record);
4. with `graph`, whole forwards *launched ahead*: the ranks align on the device (an
   all-reduce), the GPU sleeps while the host enqueues the forward, and CUDA events time each
   stage on the device alone — what a CUDA-graph replay pays, without the eager host path.
   These become records with `mode: graph`; an iteration whose launch outlasted the sleep (a
   host sync inside, e.g. `torch`'s split sizes) is discarded, and a point without enough
   valid iterations has no graph records.

A record's time is the median over iterations of the slowest rank's time; counts come from
the dispatch itself (`DispatchStats`). Rank 0 appends records to the file as they are made.

Host overhead on the GPU machine drifts between slow and fast states that last longer than a
point (medians of neighbouring points differ by up to ~30% while each point's p10-p90 is tight),
so with `num_passes > 1` the grid is swept several times, each pass in its own shuffled token
order, and every record carries `extra.pass`; `epsim.calibrate.inputs.merge_passes` takes the
median over passes.

The timers and fences are `live.bench.stage_timing`'s; the records of a point are shaped by
`live.bench.sweep_records`; the grid is `epsim.calibrate.grid`.
"""

from __future__ import annotations

import gc
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from epsim import vocab
from epsim.records import MeasurementRecord
from epsim.routing import skew_from_dict
from live.backends import BackendSpec, make_backend
from live.bench.checks import DTYPES
from live.bench.stage_timing import (STAGES, IsolatingTimer, device_experts_us, fence,
                                     launched_ahead)
from live.bench.sweep_case import BenchCase, BenchSettings
from live.bench.sweep_records import point_records
from live.dist import rank_device
from live.model import Qwen3MoeModel
from live.routing import forced_routing
from live.timing import StageTimer
from live.weights import random_weights

# Low-latency kernels lay their buffer out by (hidden, max tokens per rank); one buffer per
# process and group is kept (`live.backends.base.shared_buffer`). A point gets a group (and so
# a buffer) of its own layout, made once and kept: a buffer is never re-laid out or rebuilt.
_LAYOUT_GROUPS: dict[tuple[int, int], object] = {}


def max_tokens_for(tokens: int) -> int:
    """Buffer size of a point: its batch rounded up to 8 tokens (Mooncake's FP8 dispatch needs
    ranks x max tokens divisible by 4). A buffer sized for the sweep's largest batch would make
    small batches pay for its padded rows; a deployment sizes it for its batch, so do we."""
    return -(-max(tokens, 1) // 8) * 8


def _point_backend(case: BenchCase, group, settings: BenchSettings, device: torch.device,
                   tokens: int):
    """The backend a point runs with (built on every rank alike, same order)."""
    max_tokens = max_tokens_for(tokens)
    if vocab.backend(case.backend).low_latency:
        key = (case.config.hidden_size, max_tokens)
        if key not in _LAYOUT_GROUPS:
            _LAYOUT_GROUPS[key] = dist.new_group(list(range(dist.get_world_size(group))))
        group = _LAYOUT_GROUPS[key]
    spec = BackendSpec(hidden_size=case.config.hidden_size,
                       num_physical_experts=case.config.num_experts, top_k=case.config.top_k,
                       max_tokens_per_rank=max_tokens, dtype=DTYPES[settings.dtype],
                       device=device, dispatch_dtype=case.dispatch_dtype)
    backend = make_backend(case.backend, spec, group)
    if backend.capabilities.masking:
        backend.check_active_ranks = False              # no host sync inside timed forwards
    return backend


def _build(case: BenchCase, group, settings: BenchSettings, device: torch.device):
    """The one-layer model of a case with random weights (its backend is set per point)."""
    dtype = DTYPES[settings.dtype]
    backend = _point_backend(case, group, settings, device, case.token_counts[0])
    model = Qwen3MoeModel(case.config, 0, 1, backend=backend, group=group, dtype=dtype,
                          device=device, seed=settings.seed)
    model.load_weight_cache(random_weights(case.config, [0], seed=settings.seed, dtype=dtype,
                                           device=device))
    return model


def measure_point(rank: int, group, model, case: BenchCase, skew, tokens: int,
                  settings: BenchSettings, device: torch.device) -> dict:
    """Time one point on this rank.

    Returns:
        {"isolated": {stage: [iters] us}, "layer": [iters] us, "in_layer": {stage: [iters]},
         "device_us": [iters] (CUDA only), "launch_us": [iters], "stats": DispatchStats lists}.
    """
    cfg = case.config
    block = model.block(0)
    rng = np.random.default_rng([settings.seed, rank, tokens])
    routing = forced_routing(skew, tokens, rng, layer=0, device=device)
    gen = torch.Generator(device=device).manual_seed(settings.seed + 7919 * rank + tokens)
    x = torch.randn(tokens, cfg.hidden_size, generator=gen, device=device).to(DTYPES[settings.dtype])
    isolated_timer, layer_timer = IsolatingTimer(device, group), StageTimer(device)
    out = {"isolated": {s: [] for s in STAGES}, "layer": [], "in_layer": {s: [] for s in STAGES},
           "device_us": [], "launch_us": []}
    device_only = settings.device_only and device.type == "cuda"
    rows = None
    eager_iters = settings.num_warmup + settings.num_iters if settings.eager else 0
    with torch.no_grad():
        for it in range(eager_iters):
            block(x, routing=routing, timer=isolated_timer)
            isolated = isolated_timer.stage_us()
            fence(device, group)
            block(x, routing=routing, timer=layer_timer)
            layer = layer_timer.stage_us()
            if device_only:
                counts = block.last_stats.local_expert_tokens
                if rows is None:
                    rows = torch.randn(int(counts.sum()), cfg.hidden_size, device=device,
                                       generator=gen).to(DTYPES[settings.dtype])
                try:
                    device_us, launch_us = device_experts_us(block, counts, rows)
                except Exception:  # noqa: BLE001 - an optional extra must not stop the sweep
                    device_us = launch_us = float("nan")
            if it < settings.num_warmup:
                continue
            for stage in STAGES:
                out["isolated"][stage].append(isolated.get(stage, 0.0))
                out["in_layer"][stage].append(layer.get(stage, 0.0))
            out["layer"].append(layer["total"])
            if device_only:
                out["device_us"].append(device_us)
                out["launch_us"].append(launch_us)
        if settings.graph and device.type == "cuda":
            out["graph"] = launched_ahead(block, x, routing, group, device, settings.graph_iters)
    out["stats"] = block.last_stats.to_host()
    return out


def _pin_cores(rank: int, world_size: int) -> None:
    """Pin this rank to its own share of the cores (fewer migrations, steadier host timing)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return
    share = len(cores) // world_size
    if share >= 1:
        os.sched_setaffinity(0, cores[rank * share:(rank + 1) * share])


def bench_worker(rank: int, world_size: int, group, cases: list[BenchCase],
                 settings: BenchSettings, provenance: dict, records_path: str,
                 deadline_s: float, progress: bool) -> dict:
    """Run every case on this rank; rank 0 appends records to `records_path` as it goes.

    A case that raises is reported and skipped (configuration errors raise on every rank
    before any collective). A point is started only if rank 0 expects it to end before
    `deadline_s` (a `time.time()` value), judged by the last point's duration.

    Returns:
        {"num_records", "num_points", "errors": [str], "skipped": int} (counts on rank 0).
    """
    device = rank_device(settings.device)
    if device.type == "cpu":
        torch.set_num_threads(1)       # one core per rank: threads of two ranks would fight
    total = settings.num_passes * sum(len(c.token_counts) * len(c.skews) for c in cases)
    bar = (tqdm(total=total, desc="live.bench.sweep", unit="point", mininterval=1.0)
           if rank == 0 and progress else None)
    summary = {"num_records": 0, "num_points": 0, "errors": [], "skipped": 0}
    last_point_s = 0.0
    handle = open(records_path, "a") if rank == 0 else None
    _pin_cores(rank, world_size)
    passes = [(p, case) for p in range(settings.num_passes) for case in cases]
    try:
        for pass_index, case in passes:
            points = len(case.token_counts) * len(case.skews)
            go = [time.time() + last_point_s < deadline_s]
            dist.broadcast_object_list(go, src=0, group=group)
            try:
                model = _build(case, group, settings, device) if go[0] else None
            except Exception as exc:  # noqa: BLE001 - reported, the sweep goes on
                summary["errors"].append(f"{case.label}: {type(exc).__name__}: {exc}")
                model = None
            if model is None:
                summary["skipped"] += points
                if bar is not None:
                    bar.update(points)
                continue
            skews = [(d, skew_from_dict(d, 1, case.config.num_experts, case.config.top_k,
                                        seed=settings.seed)) for d in case.skews]
            # token counts outer: a point's backend layout is made once and serves every skew;
            # each pass visits them in its own order (the same on every rank)
            order = np.random.default_rng([settings.seed, 0x9A55, pass_index]).permutation(
                len(case.token_counts)) if settings.num_passes > 1 else range(len(case.token_counts))
            for tokens in (case.token_counts[i] for i in order):
                for skew_desc, skew in skews:
                    if bar is not None:
                        bar.update(1)
                    go = [time.time() + last_point_s < deadline_s]
                    dist.broadcast_object_list(go, src=0, group=group)
                    if not go[0]:
                        summary["skipped"] += 1
                        continue
                    start = time.time()
                    try:
                        model.block(0).backend = _point_backend(case, group, settings, device,
                                                                tokens)
                        mine = measure_point(rank, group, model, case, skew, tokens, settings,
                                             device)
                    except Exception as exc:  # noqa: BLE001 - reported; the next point runs
                        # (errors before a collective, e.g. a kernel's shape limit, hit every
                        # rank alike, so the ranks stay in step)
                        summary["errors"].append(f"{case.label} {skew_desc.get('kind')} "
                                                 f"T={tokens}: {type(exc).__name__}: {exc}")
                        continue
                    gathered = [None] * world_size
                    dist.all_gather_object(gathered, mine, group=group)
                    if rank == 0:
                        for rec in point_records(case, skew.descriptor(), tokens, gathered,
                                                 settings, provenance, model.placement.num_physical):
                            if settings.num_passes > 1:
                                rec["extra"]["pass"] = pass_index
                            handle.write(MeasurementRecord.model_validate(rec).to_json() + "\n")
                            summary["num_records"] += 1
                        handle.flush()
                    summary["num_points"] += 1
                    last_point_s = time.time() - start
            del model
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    finally:
        if handle is not None:
            handle.close()
        if bar is not None:
            bar.close()
    return summary
