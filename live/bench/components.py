"""live.bench.components: every single-GPU component timed on one GPU (or, with --cpu, the CPU).

Experts (grouped GEMM of the Qwen3-30B-A3B, Qwen3-235B-A22B and DeepSeek-V3 shapes, 8 to 128
local experts, 1 to 16384 tokens per rank, uniform, Zipf(1) and hot-set routing), GQA attention
(prefill over sequence lengths, decode over batch x context) and dense MLPs (DeepSeek-V3's dense
layers and shared expert) and the block's own ops (router, permute, top-k weighting: `block_ops`,
the three expert shapes, 1 to 16384 tokens), each point timed as device time, host overhead and eager time
(`live.bench.op_timing`) and written as `epsim.records` lines (`timing` says which), appended as
measured so a run stopped by its budget keeps what it measured. Communication needs two or more
GPUs: `live.bench.sweep` measures it.

    python -m live.bench.components --out DIR [--quick] [--cpu] [--passes 2] [--budget-s 400]

With `--passes N` the grid is swept N times, each pass in its own shuffled order within a
shape (records carry `extra.pass`): the spread between passes is the pass-to-pass spread.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from epsim.records import MeasurementRecord, write_records
from epsim.zoo import get_model
from live.bench.checks import DTYPES
from live.bench.component_ops import (AttentionShape, ExpertShape, MlpShape, Point, WeightCache,
                                      build_op)
from live.bench.op_timing import L2Flush, time_op
from live.bench.provenance import collect
from live.bench.run import (RunResult, add_run_options, check_counts, open_records,
                             run_one_device)
from live.dist import rank_device
from live.errors import LiveError

TOKENS = tuple(2 ** i for i in range(15))                     # 1 .. 16384 tokens per rank
EXPERT_MODELS = ("Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3")
LOCAL_EXPERTS = (8, 16, 32, 64, 128)
SKEWS = ({"kind": "uniform"},
         {"kind": "zipf", "alpha": 1.0, "shuffle_per_layer": False},
         {"kind": "hotset", "num_hot": 16, "hot_frac": 0.5, "shuffle_per_layer": False})
ATTENTION_MODELS = ("Qwen3-30B-A3B", "Qwen3-235B-A22B")      # GQA; DeepSeek-V3's MLA: see notes
PREFILL = ((1, 128), (1, 256), (1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (1, 16384),
           (4, 256), (4, 1024), (4, 4096))                    # (sequences, tokens each)
DECODE_SEQS = (1, 4, 16, 64, 256)
DECODE_CONTEXT = (512, 2048, 8192, 32768)
MAX_KV_TOKENS = 1 << 22                                       # seqs x context (8.6 GB of KV)
# the attention hold-out grid (`--grid holdout`): what the calibration grid does not reach, to
# judge the attention fits on -- a GQA shape no fit saw (Qwen3-Coder-480B-A35B: 96 query heads,
# 8 KV heads) on the whole attention grid, and decode batches above the grid's 256 sequences
HOLDOUT_SHAPES = ("Qwen3-Coder-480B-A35B",)
HOLDOUT_DECODE = tuple((b, c) for b in (1024, 2048, 4096) for c in (512, 1024))
MLP_SHAPES = (MlpShape("DeepSeek-V3/dense", 7168, 18432),
              MlpShape("DeepSeek-V3/shared_expert", 7168, 2048),
              MlpShape("h2048-i6144", 2048, 6144))
NOTES = ("communication (dispatch, combine) needs two or more GPUs: not measured here",
         "DeepSeek-V3 attention (MLA) not measured: the image has no MLA kernel; it stays datasheet")

# CPU: tiny shapes so the whole grid runs in seconds (tests, and the record format)
CPU_EXPERTS = ExpertShape("cpu-h256", 256, 128, 16, 2)
CPU_ATTENTION = AttentionShape("cpu-gqa", 8, 2, 32)
CPU_MLP = MlpShape("cpu-h256-i512", 256, 512)


@dataclass(frozen=True)
class ComponentPlan:
    points: tuple[Point, ...]
    device: str                    # "cuda" | "cpu"
    dtype: str                     # "bfloat16" | "float32"
    num_iters: int
    num_warmup: int = 3
    num_passes: int = 1
    seed: int = 0
    notes: tuple[str, ...] = ()

    @property
    def num_points(self) -> int:
        return len(self.points) * self.num_passes


@dataclass
class ComponentResult(RunResult):
    """What a component run produced (`live.bench.run.RunResult`), plus the points left out and
    why (failed, not applicable, budget spent)."""

    skipped: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return list(self.skipped)

    def summary(self) -> dict:
        return dict(super().summary(), skipped=self.skipped)

    def line(self) -> str:
        return (f"{self.num_records} records from {self.num_points} points in {self.seconds:.0f} s "
                f"on {self.provenance.get('device', '?')} ({len(self.skipped)} skipped)")


def _expert_shape(name: str) -> ExpertShape:
    spec = get_model(name)
    return ExpertShape(name, spec.hidden_size, spec.moe_intermediate_size, spec.num_experts,
                       spec.top_k)


def _attention_shape(name: str) -> AttentionShape:
    spec = get_model(name)
    return AttentionShape(name, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim)


def plan_components(device: str = "cuda", quick: bool = False, kinds: list[str] | None = None,
                    num_iters: int | None = None, num_passes: int | None = None,
                    seed: int = 0, grid: str = "calibration") -> ComponentPlan:
    """The grid, grouped by weight shape (one allocation per shape).

    Args:
        device: "cuda" (the grid above, BF16) or "cpu" (tiny shapes, float32).
        quick: a few points per component (a minute on one GPU).
        kinds: components to keep (default all): experts, attention_prefill, attention_decode,
            dense_mlp, block_ops.
        grid: "calibration" (the grid above) or "holdout" (attention only: `HOLDOUT_SHAPES` on
            the attention grid, and `HOLDOUT_DECODE` batches of every attention shape).
    Raises:
        LiveError: an unknown kind, device or grid, iterations or passes <= 0.
    """
    all_kinds = ("experts", "attention_prefill", "attention_decode", "dense_mlp", "block_ops")
    for kind in kinds or ():
        if kind not in all_kinds:
            raise LiveError(f"kind ({kind!r}) must be one of {', '.join(all_kinds)}")
    if device not in ("cuda", "cpu"):
        raise LiveError(f"device ({device!r}) must be 'cuda' or 'cpu'")
    if grid not in ("calibration", "holdout"):
        raise LiveError(f"grid ({grid!r}) must be 'calibration' or 'holdout'")
    check_counts(num_iters, num_passes)
    points: list[Point] = []
    skews = [tuple(sorted(s.items())) for s in SKEWS]
    if device == "cpu":
        hot = tuple(sorted({"kind": "hotset", "num_hot": 2, "hot_frac": 0.5,
                            "shuffle_per_layer": False}.items()))
        points += [Point("experts", CPU_EXPERTS, t, n, s) for n in (4, 16)
                   for s in (skews[0], hot) for t in (1, 4, 16, 64)]
        points += [Point("attention_prefill", CPU_ATTENTION, num_seqs=1, context_len=c)
                   for c in (16, 64)]
        points += [Point("attention_decode", CPU_ATTENTION, num_seqs=b, context_len=c)
                   for b in (1, 4) for c in (64, 256)]
        points += [Point("dense_mlp", CPU_MLP, t) for t in (1, 16, 64)]
        points += [Point("block_ops", CPU_EXPERTS, t) for t in (1, 16, 64)]
    elif grid == "holdout":
        for name in ATTENTION_MODELS + HOLDOUT_SHAPES:
            shape = _attention_shape(name)
            decode = list(HOLDOUT_DECODE)
            if name in HOLDOUT_SHAPES:
                points += [Point("attention_prefill", shape, num_seqs=b, context_len=c)
                           for b, c in PREFILL]
                decode += [(b, c) for b in DECODE_SEQS for c in DECODE_CONTEXT
                           if b * c <= MAX_KV_TOKENS]
            points += [Point("attention_decode", shape, num_seqs=b, context_len=c)
                       for b, c in decode]
    else:
        models = EXPERT_MODELS[:1] if quick else EXPERT_MODELS
        for name in models:
            shape = _expert_shape(name)
            locals_ = (8, 128) if quick else [n for n in LOCAL_EXPERTS if n <= shape.num_experts]
            for n in locals_:
                for s in (skews[::2] if quick else skews):
                    points += [Point("experts", shape, t, n, s)
                               for t in ((1, 16, 256, 4096) if quick else TOKENS)]
        for name in ATTENTION_MODELS[:1] if quick else ATTENTION_MODELS:
            shape = _attention_shape(name)
            prefill = ((1, 512), (1, 4096)) if quick else PREFILL
            points += [Point("attention_prefill", shape, num_seqs=b, context_len=c)
                       for b, c in prefill]
            decode = ((1, 2048), (64, 2048)) if quick else [
                (b, c) for b in DECODE_SEQS for c in DECODE_CONTEXT if b * c <= MAX_KV_TOKENS]
            points += [Point("attention_decode", shape, num_seqs=b, context_len=c)
                       for b, c in decode]
        for shape in MLP_SHAPES[1:2] if quick else MLP_SHAPES:
            points += [Point("dense_mlp", shape, t) for t in ((1, 64, 1024) if quick else TOKENS)]
        for name in EXPERT_MODELS[:1] if quick else EXPERT_MODELS:
            points += [Point("block_ops", _expert_shape(name), t)
                       for t in ((1, 64, 1024) if quick else TOKENS)]
    points = [p for p in points if p.kind in (kinds or all_kinds)]
    cpu = device == "cpu"
    return ComponentPlan(tuple(points), device, "float32" if cpu else "bfloat16",
                         num_iters or (5 if cpu else 20), num_warmup=1 if cpu else 3,
                         num_passes=num_passes or (1 if quick or cpu else 2), seed=seed,
                         notes=NOTES[:1] if cpu else NOTES)


def _pass_order(points: tuple[Point, ...], rng: np.random.Generator) -> list[Point]:
    """Points grouped by weight shape (groups in plan order), shuffled within each group."""
    groups: dict[tuple, list[Point]] = {}
    for point in points:
        groups.setdefault(point.weight_key, []).append(point)
    out = []
    for members in groups.values():
        out += [members[i] for i in rng.permutation(len(members))]
    return out


def run_components(plan: ComponentPlan, records_path: str | Path, budget_s: float = float("inf"),
                   progress: bool = True) -> ComponentResult:
    """Time every point of the plan, appending records to `records_path` as measured.

    Stops starting points once `budget_s` is spent (what was measured is kept); a point that
    fails is reported in `skipped` and the run goes on.
    """
    records_path = open_records(records_path)
    device = rank_device(plan.device)
    provenance = collect(1, "nccl" if plan.device == "cuda" else "gloo")
    if plan.device == "cpu":
        provenance["device"] = "1x cpu"
    result = ComponentResult(records_path, provenance=provenance)
    weights, flush = WeightCache(device, DTYPES[plan.dtype], plan.seed), L2Flush(device)
    max_local: dict = {}                     # expert shape -> the most local experts it is run with
    for point in plan.points:
        max_local[point.shape] = max(max_local.get(point.shape, 0), point.num_local)
    schedule = [(pass_id, point) for pass_id in range(plan.num_passes)
                for point in _pass_order(plan.points, np.random.default_rng([plan.seed, pass_id]))]
    start = last_print = time.time()
    for done, (pass_id, point) in enumerate(schedule):
        if time.time() - start > budget_s:
            result.skipped.append(f"{len(schedule) - done} points not started, time budget spent")
            break
        try:
            records = time_point(point, pass_id, plan, weights, max_local[point.shape], flush,
                                  provenance)
        except Exception as exc:  # noqa: BLE001 - reported; one failed point ends no run
            records = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if isinstance(records, str):
            if pass_id == 0 or records.startswith("failed"):
                result.skipped.append(f"{point.label}: {records}")
        else:
            result.num_records += write_records(records, records_path)
        result.num_points = done + 1
        if progress and (time.time() - last_print > 10 or done + 1 == len(schedule)):
            last_print = time.time()
            print(f"  [{time.time() - start:5.0f} s] pass {pass_id + 1}/{plan.num_passes}: "
                  f"{done + 1}/{plan.num_points} points ({point.label})", file=sys.stderr,
                  flush=True)
    result.seconds = time.time() - start
    return result


def time_point(point: Point, pass_id: int, plan: ComponentPlan, weights, max_local: int, flush,
               provenance: dict):
    """The records of one point (one per timing), or why it was left out (a string)."""
    op, fields = build_op(point, weights, max_local, plan.seed)
    if op is None:
        return fields["skipped"]
    with torch.no_grad():
        times = time_op(op, weights.device, plan.num_iters, plan.num_warmup, flush)
    parts = {}                 # block_ops: each sub-part timed alone, same three timings
    for name, part_op in fields.pop("parts", {}).items():
        with torch.no_grad():
            part = time_op(part_op, weights.device, plan.num_iters, plan.num_warmup, flush)
        parts[name] = part.summaries()
        if part.graph_error:
            times.graph_error = times.graph_error or f"{name}: {part.graph_error}"
    extra = dict(fields.pop("extra", {}), dtype=plan.dtype, method=times.method,
                 l2="flushed before each call" if weights.device.type == "cuda" else "",
                 **{"pass": pass_id})
    if times.graph_error:
        extra["graph_error"] = times.graph_error

    def extra_of(timing: str) -> dict:
        if not parts:
            return extra
        return dict(extra, parts={name: p[timing] for name, p in parts.items() if timing in p})
    return [MeasurementRecord(**fields, backend="local", timing=timing, dispatch_dtype="",
                              seed=plan.seed, **summary, num_iters=plan.num_iters,
                              extra=extra_of(timing), provenance=provenance)
            for timing, summary in times.summaries().items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m live.bench.components",
                                     description=__doc__.split("\n")[0])
    add_run_options(parser, "components", cpu_help="time on the CPU (tiny shapes)")
    parser.add_argument("--kinds", nargs="+", default=None,
                        help="components to time (default all): experts, attention_prefill, "
                             "attention_decode, dense_mlp, block_ops")
    parser.add_argument("--grid", choices=("calibration", "holdout"), default="calibration",
                        help="calibration: the fit grid; holdout: attention shapes and decode "
                             "batches the fit grid does not reach (to judge the fits on)")
    args = parser.parse_args(argv)
    return run_one_device("components", args, lambda: plan_components(
        "cpu" if args.cpu else "cuda", args.quick, args.kinds, args.iters, args.passes, args.seed,
        args.grid), run_components)


if __name__ == "__main__":
    sys.exit(main())
