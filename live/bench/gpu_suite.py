"""The GPU suite: equality and per-backend timings on 2 GPUs, as measurement records.

Run on the GPU machine in one call (scripts/gpu_suite.sh), or as a CPU dry run with gloo and
tiny shapes (`python -m live.bench.gpu_suite --quick --out DIR`). Parts:

0. p2p_copy: reference cuda:0 -> cuda:1 copy bandwidth (GPU only).
1. hf_equality: our block vs transformers' `Qwen3MoeSparseMoeBlock` on one device
   (bf16 on GPU with `_experts_implementation="grouped_mm"` and "eager"; fp32 on CPU).
2. ep_torch: `none` and `torch` at EP 2 over NCCL (gloo in --quick): equality with the
   single-device block (router and hot-set skew with redundant experts), then timings.
3. ep_mooncake: `mooncake` at EP 2: equality, then timings (skipped with the reason on CPU).
4. ep_deepep: `deepep` at EP 2 where a DeepEP build imports (scripts/build_deepep.sh), else
   recorded as skipped with the reason.
5. weight_cache_ipc: the IPC weight-cache load path from a spawned producer (CUDA IPC on GPU,
   shared memory on CPU), checked against the checkpoint path.

Every part runs in try/except: a failure is logged and the suite goes on. Output in --out:
records.jsonl (epsim.records.MeasurementRecord), suite.log, summary.json. Exit code 1 if any
part failed.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import time
import traceback
from dataclasses import replace

import numpy as np
import torch

from epsim.records import MeasurementRecord, write_records
from live.backends import DeepEPBackend, MooncakeBackend
from live.bench.checks import EqualityCase, equality_worker, tolerance
from live.bench.provenance import collect
from live.bench.run import log_to
from live.bench.suite_parts import (PartFailed, SuiteContext, part_hf_equality, part_p2p_copy,
                                    part_weight_cache_ipc, record)
from live.bench.suite_timing import TimingCase, timing_worker
from live.config import MoeConfig
from live.dist import apply_safe_env, run_ranks
from live.errors import BackendUnavailableError

log = logging.getLogger("live.bench.gpu_suite")


def redundant_placement(config: MoeConfig, world_size: int, num_redundant: int, seed: int = 0):
    """[layers, experts + redundant]: identity plus `num_redundant` extra replicas of random
    experts, shuffled so replicas land on other ranks than their originals."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(config.num_layers):
        extra = rng.choice(config.num_experts, num_redundant, replace=False)
        rows.append(rng.permutation(np.concatenate([np.arange(config.num_experts), extra])))
    placement = np.array(rows)
    assert placement.shape[1] % world_size == 0
    return placement


# -- parts ---------------------------------------------------------------------------------
def suite_worker(rank: int, world_size: int, group, equality: list[EqualityCase],
                 timing: list[TimingCase], provenance: dict, deadline: float) -> dict:
    """On each rank: equality cases (each may fail alone), then timings."""
    results = []
    for case in equality:
        try:
            results.append({"label": case.label, **equality_worker(rank, world_size, group, case)})
        except Exception as exc:  # noqa: BLE001 - reported, the next case runs
            results.append({"label": case.label, "error": f"{type(exc).__name__}: {exc}"})
        gc.collect()                      # models hold device memory through reference cycles
    timed = timing_worker(rank, world_size, group, timing, provenance, deadline)
    return {"equality": results, **timed}


def _equality_records(ctx: SuiteContext, cases: list[EqualityCase], per_rank: list[dict],
                      problems: list[str]) -> list[dict]:
    """One `equality` record per case that ran; cases that raised go to `problems`."""
    out = []
    for i, case in enumerate(cases):
        results = [r["equality"][i] for r in per_rank]
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            log.error("equality %s: %s", case.label, errors[0])
            problems.append(f"equality {case.label}: {errors[0]}")
            continue
        err = max(r["max_abs_err"] for r in results)
        ref_max = max(r["ref_max_abs"] for r in results)
        conserved = all(r["conserve_min"] == r["conserve_max"] == case.config.top_k for r in results)
        total_pairs = sum(r["conserve_pairs"] for r in results)
        pairs_ok = total_pairs == sum(case.tokens_per_rank) * case.config.top_k
        passed = err <= tolerance(case.dtype, ref_max) and conserved and pairs_ok
        log.info("equality %s: max|EP - single| = %.3g (ref max %.3g), combined = top_k: %s, "
                 "dispatched pairs %d = tokens x top_k: %s -> %s", case.label, err, ref_max,
                 conserved, total_pairs, pairs_ok, "PASS" if passed else "FAIL")
        stats = [r["stats"][0] for r in results]
        out.append(record(ctx, kind="equality", backend=case.backend, ep_size=len(results),
                           num_tokens_per_rank=max(case.tokens_per_rank), value=err,
                           num_physical_experts=(case.config.num_experts if case.placement is None
                                                 else int(case.placement.shape[1])),
                           skew=case.skew or {"kind": "router"}, seed=case.seed,
                           recv_tokens_per_rank=[float(sum(s["recv_tokens_from_rank"])) for s in stats],
                           send_tokens_per_rank=[float(sum(s["send_tokens_to_rank"])) for s in stats],
                           expert_tokens_per_rank=[float(sum(s["local_expert_tokens"])) for s in stats],
                           extra={"check": "ep_vs_single_device", "label": case.label,
                                  "ref_max_abs": ref_max, "conserved": conserved,
                                  "pairs_ok": pairs_ok, "passed": passed, "dtype": case.dtype,
                                  "tokens_per_rank": list(case.tokens_per_rank)}))
    return out


def _ep_part(ctx: SuiteContext, backends: list[str], token_counts: tuple[int, ...],
             fp8: bool = False) -> list[dict]:
    """Equality of each backend at EP `world_size`, then its timings (bf16; also FP8 dispatch
    where the backend casts on the fly), all in one spawn of the ranks."""
    cfg, ws = ctx.config, ctx.world_size
    if not ctx.quick and torch.cuda.device_count() < ws:
        raise RuntimeError(f"{ws} GPUs needed; {torch.cuda.device_count()} visible")
    tokens = (16, 12) if ctx.quick else (256, 192)
    tokens = tuple(tokens[r % 2] for r in range(ws))
    base = EqualityCase(cfg, backends[0], tokens, dtype=ctx.dtype, device=ctx.device, seed=3)
    placement = redundant_placement(cfg, ws, num_redundant=ws)
    equality = []
    for backend in backends:
        equality.append(replace(base, backend=backend, label=f"{backend}/router"))
        equality.append(replace(base, backend=backend, skew=ctx.hotset, placement=placement,
                                load="checkpoint", label=f"{backend}/hotset+redundant"))
    iters = (3, 1) if ctx.quick else (20, 3)
    timing = [TimingCase(cfg, backend, token_counts, skews=({"kind": "uniform"}, ctx.hotset),
                         model="" if ctx.quick else "Qwen3-235B-A22B", dtype=ctx.dtype,
                         device=ctx.device, num_iters=iters[0], num_warmup=iters[1])
              for backend in backends]
    if fp8:
        timing += [replace(case, dispatch_dtype="fp8", skews=({"kind": "uniform"},))
                   for case in timing]
    per_rank = run_ranks(suite_worker, ws, ctx.dist_backend,
                         (equality, timing, ctx.provenance, ctx.deadline - 20),
                         timeout_s=max(30.0, ctx.remaining_s() - 5))
    problems: list[str] = []
    records = _equality_records(ctx, equality, per_rank, problems)
    for error in per_rank[0]["errors"]:
        log.error("timing %s: %s", error["backend"], error["error"])
        problems.append(f"timing {error['backend']}: {error['error']}")
    records += per_rank[0]["records"]
    by_key: dict[tuple, dict[str, float]] = {}
    for r in per_rank[0]["records"]:
        if r["skew"].get("kind") == "uniform":
            key = (r["backend"], r["dispatch_dtype"], r["num_tokens_per_rank"])
            by_key.setdefault(key, {})[r["kind"]] = r["median_us"]
    for (backend, dispatch_dtype, tokens), kinds in by_key.items():
        log.info("timing %s %s tokens/rank=%d (uniform, median us): %s", backend,
                 dispatch_dtype or ctx.dtype, tokens,
                 ", ".join(f"{kind} {us:.0f}" for kind, us in kinds.items()))
    log.info("timings: %d records (%s)", len(per_rank[0]["records"]), ", ".join(backends))
    if problems:
        raise PartFailed("; ".join(problems), records)
    return records


def part_ep_torch(ctx: SuiteContext) -> list[dict]:
    counts = (4, 16) if ctx.quick else (16, 64, 256, 1024)
    return _ep_part(ctx, ["torch", "none"], counts)


def part_ep_mooncake(ctx: SuiteContext) -> list[dict]:
    MooncakeBackend.check_available(torch.device(ctx.device))   # the reason where it cannot run
    return _ep_part(ctx, ["mooncake"], (16, 64, 256), fp8=True)


def part_ep_deepep(ctx: SuiteContext) -> list[dict]:
    DeepEPBackend.check_available(torch.device(ctx.device))     # the reason where it cannot run
    return _ep_part(ctx, ["deepep"], (16, 64, 256))


# (name, part, seconds it needs at least to start)
PARTS = [("p2p_copy", part_p2p_copy, 10), ("hf_equality", part_hf_equality, 20),
         ("ep_torch", part_ep_torch, 60), ("ep_mooncake", part_ep_mooncake, 60),
         ("ep_deepep", part_ep_deepep, 30), ("weight_cache_ipc", part_weight_cache_ipc, 20)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m live.bench.gpu_suite",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "out/gpu_suite"),
                        help="output folder (default: $OUT)")
    parser.add_argument("--quick", action="store_true", help="CPU dry run: gloo, tiny shapes")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=330.0,
                        help="wall-clock budget; parts that would start after it are skipped")
    parser.add_argument("--parts", default=",".join(name for name, _, _ in PARTS))
    args = parser.parse_args(argv)
    apply_safe_env()
    out = log_to(args.out, "suite", levels=True)
    ctx = SuiteContext(out=out, quick=args.quick, world_size=args.world_size,
                       deadline=time.time() + args.budget_s)
    ctx.provenance = collect(args.world_size, ctx.dist_backend)
    log.info("provenance: %s", json.dumps(ctx.provenance))
    records_path = out / "records.jsonl"
    records_path.write_text("")
    summary = {"provenance": ctx.provenance, "quick": args.quick, "parts": {}}
    wanted = set(args.parts.split(","))
    for name, part, min_s in PARTS:
        if name not in wanted:
            continue
        start = time.time()
        if ctx.remaining_s() < min_s:
            summary["parts"][name] = {"status": "skipped", "reason": "time budget spent"}
            log.warning("%s: skipped, %.0f s left", name, ctx.remaining_s())
            continue
        try:
            records = [MeasurementRecord.model_validate(r) for r in part(ctx)]
            write_records(records, records_path)
            passed = all(r.extra.get("passed", True) for r in records)
            summary["parts"][name] = {"status": "ok" if passed else "mismatch",
                                      "records": len(records), "seconds": round(time.time() - start, 1)}
        except BackendUnavailableError as exc:
            summary["parts"][name] = {"status": "unavailable", "reason": str(exc)}
        except PartFailed as exc:                 # keep what the part did measure
            write_records([MeasurementRecord.model_validate(r) for r in exc.records], records_path)
            summary["parts"][name] = {"status": "failed", "error": str(exc),
                                      "records": len(exc.records),
                                      "seconds": round(time.time() - start, 1)}
        except Exception as exc:  # noqa: BLE001 - each part fails alone
            summary["parts"][name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                                      "seconds": round(time.time() - start, 1)}
            log.error("%s: failed\n%s", name, traceback.format_exc())
        log.info("%s: %s", name, summary["parts"][name])
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    bad = [n for n, p in summary["parts"].items() if p["status"] in ("failed", "mismatch")]
    log.info("done; failed parts: %s", bad or "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
