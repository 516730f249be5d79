"""The live EPLB bench: rebalance time against bytes moved, the P2P bandwidth next to it, and
outputs equal to the single-device block's through rebalances and a masked rank.

    python -m live.bench.eplb --out DIR [--quick] [--budget-s 85]

One spawn of 2 ranks (NCCL on GPUs; gloo and tiny shapes with --quick) runs, in order:

1. `p2p`: bidirectional `batch_isend_irecv` bandwidth at every per-rank size the sweep moves
   (`p2p_copy` records; the parent also records the cuda:0 -> cuda:1 copy of
   `live.bench.suite_parts.part_p2p_copy`, GPU only).
2. `sweep`: for Qwen3-30B-A3B's and Qwen3-235B-A22B's expert sizes (9.44 MB and 37.75 MB in
   BF16), rank 0 and rank 1 swap k experts in each of n layers, k x n from 1 expert to every
   slot of 4 layers, layer by layer and as one chunk; 5 timed rebalances each (`rebalance`
   records, every slot checked bitwise against its expert afterwards).
3. `equality`: `torch`, then `mooncake`, through three manager rebalances from recorded loads
   (`deepseek` in one chunk; `sticky` and `deepseek_global` layer by layer, a forward between
   chunks) against the single-device block (`equality` records); last, `mooncake` with rank 1
   masked.

Writes eplb_records.jsonl (epsim.records), eplb.log and eplb_summary.json into --out. Exit 1
if a check failed.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from epsim.records import MeasurementRecord, read_records, write_records
from live.backends import backend_class
from live.bench.checks import DTYPES, tolerance
from live.bench.eplb_checks import EplbCase, scenarios_worker
from live.bench.provenance import collect
from live.bench.run import log_to
from live.bench.suite_parts import SuiteContext, part_p2p_copy
from live.config import MoeConfig
from live.dist import apply_safe_env, rank_device, run_ranks
from live.eplb.result import rebalance_record
from live.eplb.updater import ExpertWeightUpdater
from live.errors import BackendUnavailableError
from live.model import Qwen3MoeModel
from live.timing import summarize_us
from live.weights import fused_names, random_weights

log = logging.getLogger("live.bench.eplb")

# (model, hidden, intermediate): 3 x H x I x 2 bytes per expert in BF16
GPU_SHAPES = (("Qwen3-30B-A3B", 2048, 768), ("Qwen3-235B-A22B", 4096, 1536))
QUICK_SHAPES = (("tiny-64", 64, 32), ("tiny-128", 128, 64))


@dataclass(frozen=True)
class SweepCase:
    """Rebalances that swap `k` experts between rank 0 and 1 in `layers` layers.

    Attributes:
        sizes: (k, layers, layers_per_chunk) per point.
    """

    model: str
    hidden_size: int
    moe_intermediate_size: int
    num_experts: int
    num_layers: int
    sizes: tuple[tuple[int, int, int], ...]
    dtype: str
    device: str
    num_iters: int = 5
    num_warmup: int = 1


def sweep_cases(quick: bool) -> list[SweepCase]:
    if quick:
        sizes = ((1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1), (8, 2, 1), (8, 2, 2))
        return [SweepCase(name, h, i, 16, 2, sizes, "float32", "cpu", 3, 1)
                for name, h, i in QUICK_SHAPES]
    sizes = ((1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1), (16, 1, 1), (16, 4, 1), (16, 4, 4))
    return [SweepCase(name, h, i, 32, 4, sizes, "bfloat16", "cuda") for name, h, i in GPU_SHAPES]


def equality_cases(quick: bool) -> list:
    """(backend, EplbCase) for the equality part: EP 2, 16 slots per rank so one rank can hold
    every expert when the other is masked; rank 1's experts live only there (reloaded then)."""
    rows = np.r_[np.arange(8), np.arange(8), np.arange(8, 16), np.arange(8, 16)]
    if quick:
        cfg = MoeConfig(hidden_size=64, moe_intermediate_size=32, num_experts=16, top_k=4,
                        num_layers=2)
        base = EplbCase(cfg, "torch", (24, 17), np.tile(rows, (2, 1)), label="quick")
    else:
        cfg = MoeConfig(hidden_size=2048, moe_intermediate_size=768, num_experts=16, top_k=4,
                        num_layers=2)
        base = EplbCase(cfg, "torch", (64, 48), np.tile(rows, (2, 1)), dtype="bfloat16",
                        device="cuda")
    return [replace(base, backend=b, label=f"{b}/rebalances") for b in ("torch", "mooncake")]


# -- on every rank -------------------------------------------------------------------------------
def p2p_bandwidth(group, sizes_bytes, device: torch.device, provenance: dict,
                  num_iters: int = 5) -> list[dict]:
    """Both ranks send `size` bytes to each other at once (`batch_isend_irecv`); per-direction
    GB/s, as a rebalance that swaps experts sees the link. Rank 0 returns the records."""
    rank, peer = dist.get_rank(group), 1 - dist.get_rank(group)
    out = []
    for size in sorted(set(int(s) for s in sizes_bytes)):
        send = torch.empty(size, dtype=torch.uint8, device=device)
        recv = torch.empty_like(send)
        samples = []
        for it in range(num_iters + 1):
            dist.barrier(group=group)
            start = time.perf_counter()
            ops = [dist.P2POp(dist.isend, send, dist.get_global_rank(group, peer), group),
                   dist.P2POp(dist.irecv, recv, dist.get_global_rank(group, peer), group)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if it:
                samples.append((time.perf_counter() - start) * 1e6)
        slowest = _slowest(samples, group, device)
        if rank == 0:
            stats = summarize_us(slowest)
            out.append(dict(kind="p2p_copy", backend="p2p", ep_size=2, num_tokens_per_rank=0,
                            hidden_size=0, bytes=float(size), num_iters=num_iters, **stats,
                            extra={"transport": f"torch.distributed batch_isend_irecv "
                                                f"({dist.get_backend(group)})",
                                   "direction": "bidirectional, bytes per direction",
                                   "gbps": size / (stats["median_us"] * 1e3)},
                            provenance=provenance))
        del send, recv
    return out


def _slowest(samples: list[float], group, device: torch.device) -> list[float]:
    """Per iteration, the slower rank's time (both ranks' samples, element-wise max)."""
    table = torch.tensor(samples, dtype=torch.float64,
                         device=device if dist.get_backend(group) == "nccl" else "cpu")
    dist.all_reduce(table, op=dist.ReduceOp.MAX, group=group)
    return table.cpu().tolist()


def sweep(group, case: SweepCase, provenance: dict) -> tuple[list[dict], list[int]]:
    """Rebalance records of one expert shape (rank 0) and the per-rank bytes moved."""
    cfg = MoeConfig(hidden_size=case.hidden_size, moe_intermediate_size=case.moe_intermediate_size,
                    num_experts=case.num_experts, top_k=min(8, case.num_experts),
                    num_layers=case.num_layers)
    dtype = DTYPES[case.dtype]
    device = rank_device(case.device)
    weights = random_weights(cfg, range(cfg.num_layers), seed=7, dtype=dtype, device=device)
    for tensor in weights.values():
        dist.broadcast(tensor, src=dist.get_global_rank(group, 0), group=group)
    model = Qwen3MoeModel(cfg, backend="torch", group=group, dtype=dtype, device=device)
    model.load_weight_cache(weights)
    updater = ExpertWeightUpdater(model)
    rank, slots = model.backend.rank, model.placement.slots_per_rank
    base = model.placement.physical_to_logical.copy()
    records, sizes = [], []
    for swaps, layers, chunk in case.sizes:
        target = base.copy()
        target[:layers, :swaps], target[:layers, slots:slots + swaps] = \
            base[:layers, slots:slots + swaps], base[:layers, :swaps]
        updater.layers_per_chunk = chunk
        results = []
        for it in range(case.num_warmup + case.num_iters):
            result = updater.apply(target if it % 2 == 0 else base)
            if it >= case.num_warmup:
                results.append(result)
        verified = True
        descriptor = model.routed_experts_weights_of_layer
        for layer in model.layer_ids:                   # every slot holds its expert, bitwise
            experts = model.placement.local_slots(rank)[layer]
            for tensor, name in zip(descriptor[layer], fused_names(layer)[1:]):
                verified &= bool(torch.equal(tensor, weights[name][torch.tensor(experts.tolist())]))
        ok = torch.tensor([int(verified)], device=device if device.type == "cuda" else "cpu")
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=group)
        sizes.append(swaps * layers * updater.expert_bytes())
        records.append(rebalance_record(
            results, model, provenance, model=case.model,
            extra={"swaps_per_layer": swaps, "layers_moved": layers, "verified": bool(ok.item()),
                   "passed": bool(ok.item()), "dtype": case.dtype}))
    del model, updater, weights
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return (records if rank == 0 else []), sizes


def bench_worker(rank: int, world_size: int, group, quick: bool, provenance: dict,
                 deadline: float, records_path: str) -> dict:
    """Every part on this rank; rank 0 appends each part's records to `records_path` as soon as
    it has them (a run stopped later keeps them). A part that raises is reported and the next
    one runs (configuration errors raise on every rank alike, before any collective)."""
    if quick:
        torch.set_num_threads(1)
    device = rank_device("cpu" if quick else "cuda")
    errors, sizes = [], []

    def part(name: str, fn) -> None:
        if not _go(deadline, group):
            errors.append(f"{name}: skipped, time budget spent")
            return
        try:
            records = fn()
        except Exception as exc:  # noqa: BLE001 - reported; the next part runs
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return
        if rank == 0:
            _append(records, records_path)

    for case in sweep_cases(quick):
        def run_sweep(case=case):
            made, moved = sweep(group, case, provenance)
            sizes.extend(moved)
            return made
        part(f"sweep {case.model}", run_sweep)
    part("p2p", lambda: p2p_bandwidth(group, sizes, device, provenance))
    for case in equality_cases(quick):
        try:
            _check_backend(case.backend, device)
        except Exception as exc:  # noqa: BLE001 - the reason is the result (e.g. no GPU)
            errors.append(f"equality {case.backend}: unavailable: {exc}")
            continue
        steps = [("sequence", case, {})]
        if case.backend == "mooncake":                  # last: rank 1 leaves
            steps.append(("elastic", replace(case, label="mooncake/mask"),
                          {"lost_rank": 1, "how": "mask"}))
        for step in steps:
            part(f"equality {step[1].label}", lambda step=step: _equality(
                rank, world_size, group, step, provenance))
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier(group=group)                           # rank 1 waits while rank 0 serves alone
    return {"errors": errors}


def _append(records: list[dict], path: str) -> None:
    write_records([MeasurementRecord.model_validate(r) for r in records], path)


def _equality(rank, world_size, group, step, provenance) -> list[dict]:
    try:
        results = scenarios_worker(rank, world_size, group, [step], provenance)
    except Exception as exc:  # noqa: BLE001 - every rank must still reach the exchange below
        results = [{"exception": f"rank {rank}: {type(exc).__name__}: {exc}"}]
    return _equality_records(rank, world_size, group, [step], results, provenance)


def _check_backend(backend: str, device: torch.device) -> None:
    backend_class(backend).check_available(device)


def _go(deadline: float, group) -> bool:
    box = [time.time() < deadline]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
    return bool(box[0])


def _equality_records(rank, world_size, group, scenarios, results, provenance) -> list[dict]:
    """`equality` (and the manager's `rebalance`) records from every rank's results."""
    gathered = [None] * world_size
    dist.all_gather_object(gathered, results, group=group)
    failures = [g[0]["exception"] for g in gathered if "exception" in g[0]]
    if failures:                                  # raised alike on every rank
        raise RuntimeError("; ".join(failures))
    if rank != 0:
        return []
    out = []
    for i, (name, case, kwargs) in enumerate(scenarios):
        per_rank = [g[i] for g in gathered if not g[i].get("lost")]
        ref = max(r.get("ref_max", 0.0) for r in per_rank)
        if name == "sequence":
            err = max(max(r["errors"] + r["between_chunk_errors"]) for r in per_rank)
            flags = {"slots_ok": all(all(r["slots_ok"]) for r in per_rank),
                     "loads_match": all(all(r["loads_match"]) for r in per_rank),
                     "cache_intact": all(r["cache_intact"] for r in per_rank)}
            extra = {"check": "eplb_rebalances", "phases": per_rank[0]["plans"], **flags}
            out += per_rank[0]["records"]
        else:
            err = max(max(r["error"], r.get("rebalance_error", 0.0)) for r in per_rank)
            flags = {"slots_ok": all(r["slots_ok"] and r.get("rebalance_slots_ok", True)
                                     for r in per_rank),
                     "sent_to_lost": sum(r["sent_to_lost"] for r in per_rank) == 0}
            extra = {"check": "eplb_elastic_mask", "lost_rank": kwargs["lost_rank"],
                     "lost_experts": per_rank[0]["lost_experts"],
                     "reloads": per_rank[0]["reloads"], **flags}
        passed = err <= tolerance(case.dtype, ref) and all(flags.values())
        log_line = (f"equality {case.label}: max|EP - single| = {err:.3g} (ref max {ref:.3g}), "
                    f"{flags} -> {'PASS' if passed else 'FAIL'}")
        out.append(dict(kind="equality", backend=case.backend, ep_size=world_size,
                        num_tokens_per_rank=max(case.tokens_per_rank),
                        hidden_size=case.config.hidden_size,
                        moe_intermediate_size=case.config.moe_intermediate_size,
                        num_experts=case.config.num_experts,
                        num_physical_experts=int(case.placement.shape[1]),
                        top_k=case.config.top_k, num_layers=case.config.num_layers, value=err,
                        extra={**extra, "label": case.label, "ref_max_abs": ref,
                               "passed": passed, "dtype": case.dtype, "log": log_line},
                        provenance=provenance))
    return out


# -- the parent ----------------------------------------------------------------------------------
def run(out: Path, quick: bool = False, budget_s: float = 85.0) -> dict:
    """The whole bench into `out`; returns the summary (also written as eplb_summary.json)."""
    apply_safe_env()
    start = time.time()
    out.mkdir(parents=True, exist_ok=True)
    backend = "gloo" if quick else "nccl"
    provenance = collect(2, backend)
    path = out / "eplb_records.jsonl"
    path.write_text("")
    summary = {"provenance": provenance, "quick": quick, "errors": []}
    try:
        ctx = SuiteContext(out=out, quick=quick, world_size=2, deadline=start + budget_s,
                           provenance=provenance)
        _append(part_p2p_copy(ctx), str(path))
    except BackendUnavailableError as exc:
        summary["p2p_copy"] = f"unavailable: {exc}"
    try:
        per_rank = run_ranks(bench_worker, 2, backend,
                             (quick, provenance, start + budget_s - 25, str(path)),
                             timeout_s=max(60.0, budget_s + 30))
        summary["errors"] += per_rank[0]["errors"]
    except RuntimeError as exc:
        summary["errors"].append(f"ranks stopped: {exc}")
    records = [r.model_dump(by_alias=True) for r in read_records(path)]
    for record in records:
        if record["kind"] == "equality":
            log.info("%s", record["extra"]["log"])
        elif record["kind"] == "rebalance":
            log.info("rebalance %s: %.1f MB moved per rank in %.0f us (%.1f GB/s per rank)%s",
                     record.get("model") or record["extra"].get("check", ""),
                     max(record["extra"]["send_bytes_per_rank"]) / 1e6, record["median_us"],
                     record["extra"]["gbps"],
                     "" if record["extra"].get("verified", True) else " NOT VERIFIED")
        else:
            log.info("p2p %s: %.1f MB in %.0f us (%.1f GB/s)", record["extra"].get("transport", ""),
                     record["bytes"] / 1e6, record["median_us"], record["extra"]["gbps"])
    failed = [r["extra"]["log"] for r in records
              if r["kind"] == "equality" and not r["extra"]["passed"]]
    failed += [f"rebalance {r.get('model')} not verified" for r in records
               if r["kind"] == "rebalance" and not r["extra"].get("verified", True)]
    summary.update(records=len(records), failed=failed, seconds=round(time.time() - start, 1),
                   kinds={k: sum(r["kind"] == k for r in records)
                          for k in ("rebalance", "p2p_copy", "equality")})
    for error in summary["errors"]:
        log.warning("%s", error)
    (out / "eplb_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m live.bench.eplb",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "out/eplb_bench"))
    parser.add_argument("--quick", action="store_true", help="CPU dry run: gloo, tiny shapes")
    parser.add_argument("--budget-s", type=float, default=85.0,
                        help="wall-clock budget; parts that would start later are skipped")
    args = parser.parse_args(argv)
    out = log_to(args.out, "eplb")
    summary = run(out, args.quick, args.budget_s)
    log.info("done in %.0f s: %s; failed: %s", summary["seconds"], summary["kinds"],
             summary["failed"] or "none")
    hard_errors = [e for e in summary["errors"] if "unavailable" not in e]
    return 1 if summary["failed"] or hard_errors or not summary["records"] else 0


if __name__ == "__main__":
    sys.exit(main())
