"""live.bench.sweep: the calibration sweep — dispatch, combine, expert compute and the whole MoE
layer measured over tokens per rank, model shapes, skews, backends and dispatch dtypes.

Every point runs the real Qwen3 MoE block on spawned EP ranks (NCCL, one GPU each; or gloo on
CPU) with expert choices drawn from `epsim.routing` — the simulator's own skew generator —
and becomes four `epsim.records.MeasurementRecord` lines (`dispatch`, `experts`, `combine`,
`moe_layer`) appended to the records file as soon as measured, so a run stopped by its time
budget keeps what it measured. See `live.bench.sweep_worker` for how a point is timed.

    python -m live.bench.sweep --out DIR [--quick] [--cpu] [--budget-s 300] [--eplb]

The default grid (a few minutes on 2x H200) is `epsim.calibrate.grid`'s (shapes, tokens per
rank, skews; defined once, also predicted by `epsim.validate.scaling`); `torch` in BF16,
`mooncake` in BF16 and FP8 dispatch, `none` at a few points, `deepep` where it imports.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from epsim import vocab
from epsim.calibrate.grid import (CPU_SHAPES, CPU_SKEWS, CPU_TOKENS, GPU_MODELS, GPU_TOKENS,
                                  NONE_TOKENS, SKEWS, SPLIT_ABOVE_TOKENS)
from epsim.errors import SpecError
from epsim.routing import parse_skew
from epsim.zoo import get_model
from live.backends import backend_class
from live.bench.provenance import collect
from live.bench.run import (RunResult, add_run_options, check_counts, log_to, open_records,
                            write_summary)
from live.bench.sweep_case import BenchCase, BenchSettings
from live.bench.sweep_worker import bench_worker
from live.config import MoeConfig
from live.dist import apply_safe_env, run_ranks
from live.errors import BackendUnavailableError, LiveError

log = logging.getLogger("live.bench.sweep")

# CPU (gloo) shapes: small enough for a 2-core CI (the grid's `CPU_SHAPES` as block sizes)
CPU_MODELS = {name: MoeConfig(hidden_size=s.hidden_size, moe_intermediate_size=s.moe_intermediate_size,
                              num_experts=s.num_experts, top_k=s.top_k)
              for name, s in CPU_SHAPES.items()}


@dataclass(frozen=True)
class BenchPlan:
    """Cases to run, how, and on how many ranks."""

    cases: tuple[BenchCase, ...]
    settings: BenchSettings
    world_size: int
    dist_backend: str                 # "nccl" or "gloo"
    notes: tuple[str, ...] = ()       # e.g. backends left out and why

    @property
    def num_points(self) -> int:
        return self.settings.num_passes * sum(len(c.token_counts) * len(c.skews) for c in self.cases)


@dataclass
class BenchResult(RunResult):
    """What a bench run produced (`live.bench.run.RunResult`), plus the points skipped and the
    errors (backends left out, ranks stopped)."""

    skipped: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return list(self.errors)

    def summary(self) -> dict:
        return dict(super().summary(), skipped=self.skipped, errors=self.errors)

    def line(self) -> str:
        return (f"{self.num_records} records from {self.num_points} points in {self.seconds:.0f} s "
                f"({self.skipped} skipped)")


def _zoo_config(name: str) -> MoeConfig:
    return MoeConfig.from_model_spec(get_model(name), num_layers=1)


def _available(backend: str, cpu: bool) -> str:
    """Why `backend` cannot run here ("" if it can)."""
    try:
        backend_class(backend).check_available(torch.device("cpu" if cpu else "cuda"))
    except (BackendUnavailableError, LiveError) as exc:
        return str(exc)
    return ""


def plan_sweep(backends: list[str] | None = None, models: list[str] | None = None,
               tokens: list[int] | None = None, skews: list[dict] | None = None,
               dtypes: list[str] | None = None, quick: bool = False, cpu: bool = False,
               world_size: int = 2, num_iters: int | None = None, seed: int = 0,
               num_passes: int | None = None, graph: bool = False,
               graph_only: bool = False) -> BenchPlan:
    """The sweep as cases, in priority order (what a spent budget drops comes last).

    Args:
        backends: default torch, mooncake, deepep, none (CPU: torch, none); ones that cannot
            run here are left out with a note.
        models: zoo names (GPU) or CPU shape labels; tokens, skews: the grid (defaults above).
        dtypes: dispatch dtypes; FP8 only for backends that cast on the fly (mooncake, deepep).
        quick: a small grid (GPU: one shape, 8 token counts, uniform and hot set; CPU: 7 token
            counts).
        cpu: gloo on CPU with the small CPU shapes in float32.
        num_passes: sweeps over the grid in shuffled orders (default 3 on GPU, 1 on CPU).
        graph: also time forwards launched ahead of the GPU (`mode: graph` records; CUDA only).
        graph_only: only those (no eager timings).
    Raises:
        LiveError: an unknown backend, model or dtype, tokens, iterations or passes <= 0, or
            graph timings on CPU.
    """
    if world_size < 2:
        raise LiveError(f"world_size ({world_size}) must be >= 2: one rank has nothing to "
                        f"dispatch (one GPU: python -m live.bench.components)")
    check_counts(num_iters, num_passes)
    if cpu and (graph or graph_only):
        flag = "--graph-only" if graph_only else "--graph"
        raise LiveError(f"graph timings ({flag}) must run on CUDA GPUs; this plan runs on CPU "
                        f"ranks (--cpu, or fewer GPUs visible than ranks)")
    if backends is not None:
        for name in backends:
            if name not in vocab.BACKENDS:
                raise LiveError(f"backend ({name!r}) must be one of {', '.join(vocab.A2A_BACKENDS)}")
    for d in dtypes or ():
        if d not in vocab.LIVE_DISPATCH_DTYPES:
            raise LiveError(f"dispatch dtype ({d!r}) must be one of {list(vocab.LIVE_DISPATCH_DTYPES)}")
    if tokens is not None and (not tokens or min(tokens) <= 0):
        raise LiveError(f"tokens ({tokens}) must be positive counts")
    notes = []
    if cpu:
        unknown = [m for m in models or () if m not in CPU_MODELS]
        if unknown:
            raise LiveError(f"models ({unknown}) must be among {list(CPU_MODELS)} on CPU")
        shapes = {name: CPU_MODELS[name] for name in models or CPU_MODELS}
        grid = tuple(tokens or (CPU_TOKENS[:7] if quick else CPU_TOKENS))
        skew_list = tuple(skews or CPU_SKEWS)
        wanted = backends or ["torch", "none"]
        settings = BenchSettings(device="cpu", dtype="float32",
                                 num_iters=num_iters or (10 if quick else 20), num_warmup=2,
                                 seed=seed, device_only=False, num_passes=num_passes or 1)
        none_grid = grid
    else:
        names = models or (GPU_MODELS[:1] if quick else GPU_MODELS)
        try:
            shapes = {name: _zoo_config(name) for name in names}
        except Exception as exc:  # SpecError naming the zoo's models
            raise LiveError(str(exc)) from None
        grid = tuple(tokens or ((1, 4, 8, 16, 64, 128, 256, 1024) if quick else GPU_TOKENS))
        skew_list = tuple(skews or (SKEWS[::2] if quick else SKEWS))
        wanted = backends or ["torch", "mooncake", "deepep", "none"]
        settings = BenchSettings(device="cuda", dtype="bfloat16",
                                 num_iters=num_iters or (10 if quick else 20), num_warmup=3,
                                 seed=seed, num_passes=num_passes or (1 if quick else 3),
                                 graph=graph or graph_only, eager=not graph_only)
        none_grid = tuple(t for t in grid if t in NONE_TOKENS) or grid[:: max(1, len(grid) // 4)]
    runnable = []
    for name in wanted:
        reason = _available(name, cpu)
        if reason:
            notes.append(f"{name}: not measured ({reason})")
        else:
            runnable.append(name)
    small = tuple(t for t in grid if t <= SPLIT_ABOVE_TOKENS)
    large = tuple(t for t in grid if t > SPLIT_ABOVE_TOKENS)
    # priority: the all-to-all backends, then the `none` reference, then the largest batches of
    # the low-latency backends (their biggest buffers), so a spent budget drops the least
    first, reference, last = [], [], []
    for backend in runnable:
        caps = vocab.backend(backend)
        for dtype in (dtypes or vocab.LIVE_DISPATCH_DTYPES):
            if dtype == "fp8" and (cpu or not caps.fp8_dispatch):
                continue
            for model, config in shapes.items():
                if not caps.deepep_class:
                    none_skews = tuple(s for s in skew_list if s["kind"] != "zipf")
                    reference.append(BenchCase(backend, model, config, dtype, none_grid, none_skews))
                elif caps.low_latency and large and small:
                    first.append(BenchCase(backend, model, config, dtype, small, skew_list))
                    last.append(BenchCase(backend, model, config, dtype, large, skew_list))
                else:
                    first.append(BenchCase(backend, model, config, dtype, grid, skew_list))
    cases = tuple(c for c in first + reference + last if c.token_counts and c.skews)
    return BenchPlan(cases, settings, world_size, "gloo" if cpu else "nccl", tuple(notes))


def run_bench(plan: BenchPlan, records_path: str | Path, budget_s: float = float("inf"),
              progress: bool = True) -> BenchResult:
    """Run the plan on spawned ranks, appending records to `records_path`.

    Stops starting points when `budget_s` is spent (what was measured is kept); a rank that
    fails or hangs ends the run with an error in `BenchResult.errors`, records kept.
    """
    apply_safe_env()
    records_path = open_records(records_path)
    provenance = collect(plan.world_size, plan.dist_backend)
    result = BenchResult(records_path, provenance=provenance, errors=list(plan.notes))
    start = time.time()
    deadline = start + budget_s
    # ranks stop starting points at the budget; past it plus a grace, they are stopped
    timeout_s = 60.0 + (budget_s if budget_s != float("inf") else 24 * 3600.0)
    try:
        per_rank = run_ranks(bench_worker, plan.world_size, plan.dist_backend,
                             (list(plan.cases), plan.settings, provenance, str(records_path),
                              deadline, progress), timeout_s=timeout_s)
        summary = per_rank[0]
        result.num_points, result.skipped = summary["num_points"], summary["skipped"]
        result.errors += summary["errors"]
    except RuntimeError as exc:
        result.errors.append(f"ranks stopped: {exc}")
    result.num_records = sum(1 for line in records_path.read_text().splitlines() if line.strip())
    result.seconds = time.time() - start
    return result


def run_eplb_bench(out: Path, quick: bool) -> str:
    """`python -m live.bench.eplb --out OUT` in a process of its own; returns a status line."""
    cmd = [sys.executable, "-m", "live.bench.eplb", "--out", str(out)]
    cmd += ["--quick"] if quick else []
    done = subprocess.run(cmd, check=False)
    return f"live.bench.eplb: exit code {done.returncode}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m live.bench.sweep",
                                     description=__doc__.split("\n\n")[0])
    add_run_options(parser, "bench", cpu_help="gloo on CPU (default when no GPU)")
    parser.add_argument("--gpus", type=int, default=None, help="ranks (default 2)")
    parser.add_argument("--backends", nargs="+", default=None)
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--tokens", default=None, help="comma list of tokens per rank")
    parser.add_argument("--skews", nargs="+", default=None,
                        help="uniform | zipf:ALPHA | hotset:NUM_HOT:FRAC (hot set on rank 0)")
    parser.add_argument("--dtypes", nargs="+", default=None, help="dispatch dtypes: bf16 fp8")
    parser.add_argument("--graph", action="store_true",
                        help="also time forwards launched ahead of the GPU (CUDA-graph-like, "
                             "records with mode 'graph')")
    parser.add_argument("--graph-only", action="store_true", help="only the launched-ahead timings")
    parser.add_argument("--eplb", action="store_true", help="also run live.bench.eplb into --out")
    args = parser.parse_args(argv)
    out = log_to(args.out, "bench", mode="a")
    try:
        plan = bench_plan_from_args(args)
    except LiveError as exc:
        print(f"live.bench.sweep: error: {exc}", file=sys.stderr)
        return 2
    log.info("plan: %d cases, %d points on %d ranks (%s): %s", len(plan.cases), plan.num_points,
             plan.world_size, plan.dist_backend, ", ".join(c.label for c in plan.cases))
    for note in plan.notes:
        log.info("%s", note)
    result = run_bench(plan, out / args.records_name, args.budget_s, not args.no_progress)
    log.info("bench: %s", result.line())
    for error in result.errors:
        log.warning("%s", error)
    eplb = run_eplb_bench(out, args.quick) if args.eplb else ""
    if eplb:
        log.info("%s", eplb)
    write_summary(out, "bench", dict(result.summary(), eplb=eplb, settings=asdict(plan.settings),
                                     cases=[c.label for c in plan.cases]))
    return 0 if result.num_records else 1


def bench_plan_from_args(args) -> BenchPlan:
    """A BenchPlan from parsed `live.bench.sweep` options (`epsim calibrate --live` calls
    `plan_sweep` with its own keywords)."""
    world_size = 2 if args.gpus is None else args.gpus
    if world_size < 2:
        raise LiveError(f"--gpus ({world_size}) must be >= 2: one rank has nothing to dispatch")
    visible = torch.cuda.device_count()
    cpu = args.cpu or visible == 0
    if not cpu and visible < world_size:      # never a silent fall back to CPU ranks
        raise LiveError(f"--gpus ({world_size}) must be <= the {visible} GPU(s) visible; pass "
                        f"--cpu for CPU ranks (one GPU: python -m live.bench.components)")
    tokens = None
    if args.tokens:
        try:
            tokens = [int(t) for t in str(args.tokens).split(",")]
        except ValueError:
            raise LiveError(f"--tokens ({args.tokens!r}) must be a comma list of integers") from None
    skews = None
    if args.skews:
        try:
            skews = [parse_skew(s) for s in args.skews]
        except SpecError as exc:
            raise LiveError(str(exc)) from None
        for skew in skews:
            if skew["kind"] == "hotset":
                skew["shuffle_per_layer"] = False     # hot experts first: on rank 0
    return plan_sweep(args.backends, args.models, tokens, skews, args.dtypes, quick=args.quick,
                      cpu=cpu, world_size=world_size, num_iters=args.iters, seed=args.seed,
                      num_passes=args.passes, graph=args.graph, graph_only=args.graph_only)


if __name__ == "__main__":
    sys.exit(main())
