"""live.bench.layers: whole decoder layers on one GPU (or, with --cpu, the CPU), and their parts
measured in the same run, for `epsim validate --composition`.

Per shape (Qwen3-30B-A3B, Qwen3-235B-A22B, `DEEPSEEK_LIKE`; `live.bench.layer_ops` says what each
is), decode batches of B sequences at context C:

- `decoder_layer`: the whole layer at EP 1 and as a virtual EP n rank (n = 2, 4, 8, 16);
- `layer_stack`: N layers in one graph (N = 4, 8; DeepSeek-like 2, 4: 23 GB a layer), at EP 1
  and virtual EP 8, against N x `decoder_layer` of the same point;
- the parts as the simulator sees them, at the same points: `attention_decode` (the SDPA kernel
  alone), `experts` (the grouped GEMM alone on the layer's weights and the measured rank's
  rows), `block_ops` (router, permute, weighting of the live block), `dense_mlp` (the shared
  expert), and the layer's own sub-blocks as `layer_part` (`extra.part`: `attention_block`
  = input norm + attention + residual, `moe_block` = post-attention norm + MoE (+ shared expert)
  + residual, `experts_module` = transformers' `Qwen3MoeExperts` alone, `router`).

Each point is timed as device time (CUDA-graph replays), host overhead and eager time
(`live.bench.op_timing`, L2 flushed before each call) and written as `epsim.records` lines, appended
as measured, so a run stopped by its budget keeps what it measured.

    python -m live.bench.layers --out DIR [--quick] [--cpu] [--budget-s 400] [--iters 20]
                                [--models ...] [--keep-l2]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from epsim.records import write_records
from live.bench.checks import DTYPES
from live.bench.components import ComponentPlan, ComponentResult
from live.bench.layer_ops import DEEPSEEK_LIKE, LayerShape, zoo_shape
from live.bench.layer_points import ShapeState
from live.bench.op_timing import FLUSH_BYTES, L2Flush
from live.bench.provenance import collect
from live.bench.run import add_run_options, check_counts, open_records, run_one_device
from live.dist import rank_device
from live.errors import LiveError

LAYER_MODELS = ("Qwen3-30B-A3B", "Qwen3-235B-A22B")
EP_SIZES = (1, 2, 4, 8, 16)
# (sequences, context): batch 8-256 and context 512-8192 sparsely, with the two points
DECODE = ((8, 512), (8, 8192), (32, 2048), (64, 512), (128, 8192), (256, 512), (256, 2048))
STACK_DECODE = ((8, 8192), (64, 512), (256, 2048))
STACK_EP_SIZES = (1, 8)
STACK_LAYERS = (4, 8)
STACK_LAYERS_LARGE = (2, 4)          # a DeepSeek-like layer holds 23 GB of experts
QUICK_DECODE = ((8, 512), (64, 2048))
LAYER_KINDS = ("decoder_layer", "layer_stack", "layer_part")
NOTES = ("virtual EP n: one rank's work with dispatch and combine left out (no communication)",
         "DeepSeek-like: GQA stand-in for MLA (128 query heads, 2 KV heads), softmax router")

# CPU: tiny shapes (one with a shared expert), so the whole grid runs in seconds
CPU_SHAPES = (LayerShape("cpu-tiny", 256, 8, 2, 32, 128, 16, 2),
              LayerShape("cpu-tiny-shared", 256, 8, 2, 32, 128, 16, 2, 128))
CPU_DECODE = ((2, 16), (4, 64))
CPU_EP_SIZES = (1, 2, 4)


@dataclass(frozen=True)
class LayerPoint:
    """One configuration to time.

    Attributes:
        kind: decoder_layer | layer_stack | layer_part | attention_decode | experts | block_ops
            | dense_mlp.
        num_seqs: sequences (one new token each): the tokens per rank.
        context_len: KV tokens per sequence (0 where a part does not read the cache).
        ep_size: the virtual EP group (1: one GPU holds every expert).
        num_layers: layer_stack: layers in the stack.
        part: layer_part: attention_block | moe_block | experts_module | router.
    """

    kind: str
    shape: LayerShape
    num_seqs: int
    context_len: int = 0
    ep_size: int = 1
    num_layers: int = 1
    part: str = ""

    @property
    def label(self) -> str:
        stack = f"x{self.num_layers}" if self.kind == "layer_stack" else ""
        what = self.part or self.kind + stack
        return f"{what}/{self.shape.name}/ep{self.ep_size}/b{self.num_seqs}/ctx{self.context_len}"


@dataclass(frozen=True)
class LayerPlan(ComponentPlan):
    """The component bench's plan (`points` are LayerPoints, one pass), plus whether L2 is
    kept between calls (no flush; the layer kinds only)."""

    keep_l2: bool = False


def shape_points(shape: LayerShape, decode, ep_sizes, stack_decode, stack_eps, stack_layers
                 ) -> tuple[list[LayerPoint], list[LayerPoint]]:
    """A shape's points in the order they run: the parts (attention, then the block's own ops
    and shared expert, then each EP size's MoE) and the layers; and its stacks apart (a plan
    runs every shape's stacks last, so a spent budget costs stacks before layers)."""
    batches = sorted({b for b, _ in decode})
    points = []
    for b, c in decode:
        points += [LayerPoint("layer_part", shape, b, c, part="attention_block"),
                   LayerPoint("attention_decode", shape, b, c)]
    for b in batches:
        points += [LayerPoint("layer_part", shape, b, part="router"),
                   LayerPoint("block_ops", shape, b)]
        points += [LayerPoint("dense_mlp", shape, b)] if shape.shared else []
    for n in ep_sizes:
        for b in batches:
            points += [LayerPoint("layer_part", shape, b, ep_size=n, part="moe_block"),
                       LayerPoint("layer_part", shape, b, ep_size=n, part="experts_module"),
                       LayerPoint("experts", shape, b, ep_size=n)]
    points += [LayerPoint("decoder_layer", shape, b, c, n) for n in ep_sizes for b, c in decode]
    return points, [LayerPoint("layer_stack", shape, b, c, n, num_layers)
                    for num_layers in stack_layers for n in stack_eps for b, c in stack_decode]


def plan_layers(device: str = "cuda", quick: bool = False, num_iters: int | None = None,
                seed: int = 0, models: list[str] | None = None, keep_l2: bool = False
                ) -> LayerPlan:
    """The grid above ("cuda", BF16) or the tiny CPU grid ("cpu", float32).

    Args:
        quick: two decode points, EP 1 and 8, stacks of 2 at EP 1 (a minute on one GPU; CPU:
            one point, EP 1 and 2).
        models: shapes to keep (default all): Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-like
            (CPU: cpu-tiny, cpu-tiny-shared).
        keep_l2: time without flushing L2 before each call (what a benchmark repeating one
            layer sees: its weights may stay in L2); the single-GPU components, whose records
            say "flushed", are left out.
    Raises:
        LiveError: an unknown device or model, iterations <= 0.
    """
    if device not in ("cuda", "cpu"):
        raise LiveError(f"device ({device!r}) must be 'cuda' or 'cpu'")
    check_counts(num_iters, None)
    shapes = {s.name: s for s in (CPU_SHAPES if device == "cpu" else
                                  (*map(zoo_shape, LAYER_MODELS), DEEPSEEK_LIKE))}
    for name in models or ():
        if name not in shapes:
            raise LiveError(f"model ({name!r}) must be one of {', '.join(shapes)}")
    points: list[LayerPoint] = []
    stacks: list[LayerPoint] = []
    for name in models or shapes:
        shape = shapes[name]
        if device == "cpu":
            decode = CPU_DECODE[:1] if quick else CPU_DECODE
            grid = (decode, CPU_EP_SIZES[:2] if quick else CPU_EP_SIZES, CPU_DECODE[:1],
                    (1,) if quick else (1, 2), (2,))
        elif quick:
            grid = (QUICK_DECODE, (1, 8), QUICK_DECODE[:1], (1,), (2,))
        else:
            large = shape.num_experts * shape.hidden_size * shape.moe_intermediate_size > 2**31
            grid = (DECODE, EP_SIZES, STACK_DECODE, STACK_EP_SIZES,
                    STACK_LAYERS_LARGE if large else STACK_LAYERS)
        layers, stack = shape_points(shape, *grid)
        points, stacks = points + layers, stacks + stack
    points += stacks
    if keep_l2:
        points = [p for p in points if p.kind in LAYER_KINDS]
    cpu = device == "cpu"
    return LayerPlan(tuple(points), device, "float32" if cpu else "bfloat16",
                     num_iters or (3 if cpu else 20), num_warmup=1 if cpu else 3, seed=seed,
                     notes=NOTES, keep_l2=keep_l2)


def run_layers(plan: LayerPlan, records_path: str | Path, budget_s: float = float("inf"),
               progress: bool = True) -> ComponentResult:
    """Time every point of the plan, appending records to `records_path` as measured.

    Stops starting points once `budget_s` is spent (what was measured is kept); a point that
    fails (out of memory, say) is reported in `skipped` and the run goes on.
    """
    import transformers

    records_path = open_records(records_path)
    device = rank_device(plan.device)
    provenance = collect(1, "nccl" if plan.device == "cuda" else "gloo")
    provenance["transformers"] = transformers.__version__
    if plan.device == "cpu":
        provenance["device"] = "1x cpu"
    result = ComponentResult(records_path, provenance=provenance)
    flush, state = L2Flush(device, 0 if plan.keep_l2 else FLUSH_BYTES), None
    start = last_print = time.time()
    for done, point in enumerate(plan.points):
        if time.time() - start > budget_s:
            result.skipped.append(f"{len(plan.points) - done} points not started, time budget "
                                  f"spent")
            break
        if state is None or state.shape != point.shape:
            state = None                              # one shape's weights on the device at a time
            if device.type == "cuda":
                torch.cuda.empty_cache()
            state = ShapeState(point.shape, device, DTYPES[plan.dtype], plan.seed)
        try:
            records = state.records(point, plan, flush, provenance)
        except Exception as exc:  # noqa: BLE001 - reported; one failed point ends no run
            records = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if isinstance(records, str):
            result.skipped.append(f"{point.label}: {records}")
        else:
            result.num_records += write_records(records, records_path)
        result.num_points = done + 1
        if progress and (time.time() - last_print > 10 or done + 1 == len(plan.points)):
            last_print = time.time()
            print(f"  [{time.time() - start:5.0f} s] {done + 1}/{len(plan.points)} points "
                  f"({point.label})", file=sys.stderr, flush=True)
    result.seconds = time.time() - start
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m live.bench.layers",
                                     description=__doc__.split("\n")[0])
    add_run_options(parser, "layers", cpu_help="time on the CPU (tiny shapes)")
    parser.add_argument("--keep-l2", action="store_true",
                        help="no L2 flush before each timed call (layers and their sub-blocks "
                             "only): what a benchmark repeating one layer measures")
    parser.add_argument("--models", nargs="+", default=None,
                        help=f"shapes (default all): {', '.join(LAYER_MODELS)}, DeepSeek-like "
                             f"(--cpu: {', '.join(s.name for s in CPU_SHAPES)})")
    args = parser.parse_args(argv)

    def make_plan() -> LayerPlan:
        if args.passes not in (None, 1):
            raise LiveError(f"passes ({args.passes}) must be 1: the layer grid is swept once")
        return plan_layers("cpu" if args.cpu else "cuda", args.quick, args.iters, args.seed,
                           args.models, args.keep_l2)
    command = " ".join(["python -m live.bench.layers", *(sys.argv[1:] if argv is None else argv)])
    return run_one_device("layers", args, make_plan, run_layers, {"command": command})


if __name__ == "__main__":
    sys.exit(main())

