"""The terms of a rebalance that are not weight bytes on a link, timed where they run.

    python -m live.bench.eplb_host --out DIR [--quick] [--sglang-root DIR ...] [--device]

Host terms, on this machine's CPU with one torch thread (SGLang's GPU workers call
`torch.set_num_threads(1)` in `ModelRunner.load_model`, so its EPLB runs single-threaded):

- `algorithm`: the placement algorithm over a grid of layers x experts x replicas x ranks x
  nodes: ours (`epsim.eplb`: `deepseek`, `deepseek_global`, `sticky`) and the serving engines'
  own code, read from an installed or unpacked SGLang (`--sglang-root`, the folder holding
  `sglang/`): DeepSeek's reference `eplb.py` as SGLang ships it
  (`sglang/srt/eplb/eplb_algorithms/deepseek.py`, torch on the CPU: a Python loop per item) and
  SGLang 0.4.6's `managers/deepseek_eplb.py` (the chunkwise algorithm over every step of the
  recorder's window, `[steps, layers, experts]`; its prefill path runs on the CPU).
- `plan`: `epsim.eplb.plan_moves` (the move plan every rank derives) per layer x physical slot.
- `map_update`: the per-layer metadata update of a placement (SGLang's
  `ExpertLocationMetadata.update` is a `torch.where` per map over [layers, ...]; timed as the
  same five `torch.where`s on maps of the placement's shape).

Device terms (`--device`, one CUDA GPU): a device-to-device copy of one expert's tensors at
expert sizes (the updater's staging and commit copies; bytes at the weight dtype) and the
launch cost of a copy per tensor (`copy_` of small tensors, host time per call), and the
capture time of a CUDA graph of the live Qwen3 MoE block (what a rank set change recaptures).

Writes `eplb_host_records.jsonl` (kind `rebalance_term`, `epsim.records`), each record's
`extra.term` naming the term, `extra.impl` the code that was timed (with its file's sha256) and
`extra.work` the size the fit divides by. Files read from SGLang are timed, never copied here.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from epsim.records import MeasurementRecord, write_records
from live.bench.provenance import collect
from live.timing import summarize_us

SGLANG_REFERENCE = "sglang/srt/eplb/eplb_algorithms/deepseek.py"       # DeepSeek's eplb.py
SGLANG_CHUNKWISE = "sglang/srt/managers/deepseek_eplb.py"              # SGLang 0.4.6.x

# (layers, experts, physical, ranks, nodes, groups): DeepSeek-V3 at EP 32 / 64 and smaller
GRID = ((61, 256, 288, 32, 4, 8), (61, 256, 320, 64, 8, 8), (16, 256, 288, 32, 4, 8),
        (48, 128, 160, 32, 4, 1), (8, 128, 160, 16, 2, 1))
QUICK_GRID = ((4, 32, 40, 8, 2, 4), (8, 32, 48, 8, 2, 4))
STEPS = (10, 100, 1000)
QUICK_STEPS = (2, 8)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def _load(path: Path):
    """A module from one file, without importing its package (the file needs only torch)."""
    spec = importlib.util.spec_from_file_location(f"timed_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timed(fn, repeats: int) -> list[float]:
    fn()                                                     # warm-up (first-call costs)
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e6)
    return out


def _record(term: str, impl: str, samples: list[float], work: float, shape: dict,
            provenance: dict, timing: str = "host", **extra) -> dict:
    return dict(kind="rebalance_term", timing=timing, backend="host" if timing == "host" else "p2p",
                ep_size=int(shape.get("ranks", 1)), num_tokens_per_rank=0, hidden_size=0,
                num_experts=int(shape.get("experts", 0)),
                num_physical_experts=int(shape.get("physical", 0)),
                num_layers=int(shape.get("layers", 1)), bytes=float(extra.pop("bytes", 0.0)),
                num_iters=len(samples), **summarize_us(samples), provenance=provenance,
                extra={"term": term, "impl": impl, "work": float(work), "shape": shape,
                       "threads": torch.get_num_threads(), "cpu": _cpu_name(), **extra})


def _loads(rng: np.random.Generator, layers: int, experts: int) -> np.ndarray:
    """[layers, experts] float64 Zipf(1)-like loads, hot experts shuffled per layer."""
    ranks = np.argsort(rng.random((layers, experts)), axis=1)
    return 1e6 / (1.0 + ranks)


def bench_algorithms(grid, steps_list, roots: list[Path], provenance: dict, repeats: int) -> list[dict]:
    """`algorithm` records: ours and, where SGLang is given, its code on the same loads."""
    from epsim.eplb import compute_placement
    rng = np.random.default_rng(0)
    out = []
    impls = []
    for root in roots:
        for rel, kind in ((SGLANG_REFERENCE, "reference"), (SGLANG_CHUNKWISE, "chunkwise")):
            path = root / rel
            if path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                impls.append((kind, _load(path), f"{root.name}/{rel}", digest))
    for layers, experts, physical, ranks, nodes, groups in grid:
        shape = dict(layers=layers, experts=experts, physical=physical, ranks=ranks, nodes=nodes,
                     groups=groups)
        weight = _loads(rng, layers, experts)
        items = layers * physical                                # slots placed
        for name in ("deepseek", "deepseek_global", "sticky"):
            if name == "deepseek" and groups % nodes:
                continue
            samples = _timed(lambda: compute_placement(name, weight, physical, groups, nodes, ranks),
                             repeats if name != "sticky" else 1)
            out.append(_record("algorithm", f"epsim.eplb:{name}", samples, items, shape, provenance))
        tensor = torch.as_tensor(weight, dtype=torch.float32)
        for kind, module, where, digest in impls:
            if kind == "reference":
                for hierarchical in (True, False):
                    if hierarchical and groups % nodes:
                        continue
                    samples = _timed(lambda: module.rebalance_experts(
                        tensor, physical, groups, nodes if hierarchical else 1, ranks,
                        hierarchical) if "enable_hierarchical" in module.rebalance_experts.__code__.co_varnames
                        else module.rebalance_experts(tensor, physical, groups,
                                                      nodes if hierarchical else 1, ranks),
                        1)
                    out.append(_record("algorithm", f"{where}:{'hierarchical' if hierarchical else 'global'}",
                                       samples, items, shape, provenance, sha256=digest))
            elif groups % nodes == 0:
                for steps in steps_list:
                    counts = torch.as_tensor(rng.poisson(weight[None] * 1e-4 + 0.5,
                                                         size=(steps, layers, experts)),
                                             dtype=torch.int32)
                    redundant_per_node = (physical - experts) // nodes
                    samples = _timed(lambda: module.rebalance_experts(
                        counts, physical, physical // ranks, groups, nodes, "prefill"), 1)
                    out.append(_record(
                        "algorithm", f"{where}:prefill", samples,
                        steps * layers * experts * max(redundant_per_node, 1),
                        {**shape, "steps": steps}, provenance, sha256=digest,
                        work_unit="steps x layers x experts x redundant slots per node"))
    return out


def bench_plan(grid, provenance: dict, repeats: int) -> list[dict]:
    """`plan` and `map_update` records on two placements of independent loads."""
    from epsim.eplb import compute_placement, plan_moves
    rng = np.random.default_rng(1)
    out = []
    for layers, experts, physical, ranks, nodes, groups in grid:
        shape = dict(layers=layers, experts=experts, physical=physical, ranks=ranks, nodes=nodes)
        old, new = (compute_placement("deepseek_global", _loads(rng, layers, experts), physical, 1,
                                      nodes, ranks) for _ in range(2))
        samples = _timed(lambda: plan_moves(old, new, expert_bytes=1.0), repeats)
        out.append(_record("plan", "epsim.eplb:plan_moves", samples, layers * physical, shape,
                           provenance))
        # SGLang's ExpertLocationMetadata.update: torch.where over each of its maps
        maps = [torch.zeros((layers, physical), dtype=torch.int64),
                torch.zeros((layers, experts, physical), dtype=torch.int64),
                torch.zeros((layers, experts), dtype=torch.int64),
                torch.zeros((layers, experts), dtype=torch.int64)]
        others = [m.clone() for m in maps]

        def update():
            for mine, other in zip(maps, others):
                mask = torch.tensor([i in (0,) for i in range(layers)])
                mask = mask.view(*([-1] + [1] * (mine.dim() - 1)))
                mine[...] = torch.where(mask, other, mine)
        samples = _timed(update, repeats)
        out.append(_record("map_update", "torch.where per map, as ExpertLocationMetadata.update",
                           samples, layers * experts * physical, shape, provenance))
    return out


def bench_device(provenance: dict, quick: bool) -> list[dict]:
    """Single-GPU terms: expert-sized device copies, per-tensor copy launches, graph capture."""
    out = []
    if not torch.cuda.is_available():
        return out
    device = torch.device("cuda", 0)
    sizes = (2 ** 20, 9_437_184, 22_020_096, 37_748_736, 44_040_192) if not quick else (2 ** 20,)
    for size in sizes:                                    # one expert's bytes, all tensors
        src = torch.empty(size, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for it in range(12):
            torch.cuda.synchronize()
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            if it >= 2:
                samples.append(start.elapsed_time(end) * 1e3)            # ms -> µs
        out.append(_record("d2d_copy", "torch copy_ on one GPU (CUDA events)", samples, size,
                           {"bytes": size}, provenance, timing="device", bytes=size,
                           gbps=size / (float(np.median(samples)) * 1e3)))
    # host cost of launching one copy per tensor (SGLang posts a copy_ per tensor per slot)
    small = [torch.empty(4096, dtype=torch.uint8, device=device) for _ in range(64)]
    target = [torch.empty_like(t) for t in small]

    def launches():
        for a, b in zip(target, small):
            a.copy_(b)
    torch.cuda.synchronize()
    samples = [s / len(small) for s in _timed(launches, 20)]
    torch.cuda.synchronize()
    out.append(_record("copy_launch", "torch copy_ launch, host time per call", samples, 1,
                       {"tensors": len(small)}, provenance))
    out += _graph_capture(device, provenance, quick)
    return out


def _graph_capture(device: torch.device, provenance: dict, quick: bool) -> list[dict]:
    """Capture time of a CUDA graph of the live Qwen3 MoE block's forward (one device)."""
    try:
        from live.config import MoeConfig
        from live.model import Qwen3MoeModel
        from live.weights import random_weights
    except Exception as exc:  # noqa: BLE001 - the record says why it is missing
        print(f"graph capture skipped: {exc}", file=sys.stderr)
        return []
    out = []
    shapes = ((2048, 768, 128, 8, 48),) if not quick else ((256, 128, 16, 4, 2),)
    for hidden, inter, experts, top_k, layers in shapes:
        cfg = MoeConfig(hidden_size=hidden, moe_intermediate_size=inter, num_experts=experts,
                        top_k=top_k, num_layers=layers)
        model = Qwen3MoeModel(cfg, backend="none", dtype=torch.bfloat16, device=device)
        model.load_weight_cache(random_weights(cfg, range(layers), seed=0, dtype=torch.bfloat16,
                                               device=device))
        x = torch.randn(64, hidden, dtype=torch.bfloat16, device=device)
        samples = []
        for it in range(4):
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                model(x)                                      # warm-up on the side stream
            torch.cuda.current_stream(device).wait_stream(stream)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            start = time.perf_counter()
            with torch.cuda.graph(graph):
                model(x)
            torch.cuda.synchronize()
            if it:
                samples.append((time.perf_counter() - start) * 1e6)
            del graph
        out.append(_record("graph_capture", "torch.cuda.graph of live Qwen3MoeModel forward",
                           samples, layers, {"layers": layers, "hidden": hidden,
                                             "experts": experts, "tokens": 64}, provenance))
        del model
    return out


def run(out: Path, quick: bool, roots: list[Path], device: bool) -> dict:
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    provenance = collect(1, "nccl" if device and torch.cuda.is_available() else "gloo")
    if not (device and torch.cuda.is_available()):
        provenance = {**provenance, "device": f"cpu ({_cpu_name()}), 1 thread"}
    grid, steps = (QUICK_GRID, QUICK_STEPS) if quick else (GRID, STEPS)
    repeats = 2 if quick else 3
    records = bench_algorithms(grid, steps, roots, provenance, repeats)
    records += bench_plan(grid, provenance, repeats)
    if device:
        records += bench_device(provenance, quick)
    path = out / "eplb_host_records.jsonl"
    try:
        write_records([MeasurementRecord.model_validate(r) for r in records], path, append=False)
    except ValueError:        # an epsim without the `rebalance_term` kind (the GPU machine's copy)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps({"schema": "epsim.record/2", **r}) + "\n" for r in records))
        os.replace(tmp, path)
    summary = {"records": len(records), "provenance": provenance,
               "command": " ".join(["python -m live.bench.eplb_host", *sys.argv[1:]])}
    (out / "eplb_host_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    for r in records:
        print(f"{r['extra']['term']:12s} {r['extra']['impl'][:70]:70s} "
              f"{json.dumps(r['extra']['shape'])[:70]:70s} {r['median_us']:12.1f} us", flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m live.bench.eplb_host",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "out/eplb_host"))
    parser.add_argument("--quick", action="store_true", help="tiny grid (tests)")
    parser.add_argument("--sglang-root", action="append", default=[], type=Path,
                        help="a folder holding an unpacked sglang/ (repeatable)")
    parser.add_argument("--device", action="store_true", help="also the single-GPU terms")
    args = parser.parse_args(argv)
    for root in args.sglang_root:
        if not (root / "sglang").is_dir():
            print(f"--sglang-root ({root}) must hold an unpacked sglang/ package", file=sys.stderr)
            return 2
    run(Path(args.out), args.quick, args.sglang_root, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
