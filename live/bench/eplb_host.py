"""The host terms of a rebalance, timed as CPU time of one thread where they run.

    python -m live.bench.eplb_host --out DIR [--quick] [--sglang-root DIR ...] [--vllm-root DIR]

Each term is timed with `time.thread_time` (CPU seconds of the calling thread) with one torch
thread, as SGLang's GPU workers run (`torch.set_num_threads(1)` in `ModelRunner.load_model`):
on a shared machine a wall clock also counts the time other processes hold the core. Wall time
is kept beside it (`extra.wall_us`).

- `algorithm`: the placement algorithms on a grid of DeepSeek-V3-class shapes: ours
  (`epsim.eplb`), DeepSeek's reference `eplb.py` as SGLang ships it (0.4.7:
  `managers/eplb_algorithms/deepseek.py`, per-element torch; later: `eplb/eplb_algorithms/`,
  Python lists) and vLLM's `distributed/eplb/policy/default.py` (numpy);
- `sglang_dispatch_map`: SGLang's `compute_logical_to_rank_dispatch_physical_map` (static
  dispatch, recomputed at every rebalance);
- `sglang_updater`: SGLang's `update_expert_weights_single_layer` building one layer's P2P ops
  (a one-rank gloo group; `batch_isend_irecv` not run: the transfers are priced by the link model);
- `vllm_move_to_buffer`: vLLM's per-layer transfer plan, with a communicator that records only;
- `plan`: `epsim.eplb.plan_moves`;
- `gloo_message`: `monitored_barrier` over two local gloo CPU ranks, per message (the barrier
  vLLM's NIXL communicator runs before every layer);
- `masked_path`: our live module's masked-rank path (`live.eplb.elastic.mask_ranks`) on the
  survivor of two gloo CPU ranks, the lost rank's experts served by replicas.

Writes `eplb_host_records.jsonl` (kind `rebalance_term`), each with `extra.term`, `extra.impl`
(the code timed, with its file's sha256) and `extra.work` (`epsim.eplb.host_terms.WORK_UNIT`).
Files read from SGLang or vLLM are timed in place, never copied.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from epsim.eplb import compute_placement, plan_moves
from epsim.eplb.host_terms import WORK_UNIT, unit_of, work_of
from epsim.records import MeasurementRecord
from live.bench.eplb_checks import EplbCase, scenarios_worker
from live.bench.provenance import collect
from live.config import MoeConfig
from live.dist import run_ranks
from live.timing import summarize_us

SGLANG_FILES = {  # relative path -> (what it holds, implementation key)
    "sglang/srt/managers/eplb_algorithms/deepseek.py": ("algorithm", "sglang047_reference"),
    "sglang/srt/eplb/eplb_algorithms/deepseek.py": ("algorithm", "sglang_reference"),
    "sglang/srt/managers/expert_location.py": ("dispatch_map", "sglang047_dispatch_map"),
    "sglang/srt/eplb/expert_location.py": ("dispatch_map", "sglang_dispatch_map"),
    "sglang/srt/model_executor/expert_location_updater.py": ("updater", "sglang_updater"),
}
VLLM_POLICY = "vllm/distributed/eplb/policy/default.py"
VLLM_EXECUTE = "vllm/distributed/eplb/rebalance_execute.py"

# (layers, experts, physical, ranks, nodes, groups): DeepSeek-V3 at EP 16 / 32 / 64 and smaller
GRID = ((61, 256, 288, 16, 2, 8), (61, 256, 288, 32, 4, 8), (58, 256, 288, 32, 8, 8),
        (61, 256, 320, 64, 8, 8), (16, 256, 288, 32, 4, 8), (48, 128, 160, 32, 4, 1),
        (8, 128, 160, 16, 2, 1))
QUICK_GRID = ((4, 32, 40, 8, 2, 4), (8, 32, 48, 8, 2, 4))


def _cpu_timed(fn, repeats: int) -> tuple[list[float], list[float]]:
    """(CPU µs, wall µs) of `repeats` calls after one warm-up call."""
    fn()
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.thread_time(), time.perf_counter()
        fn()
        cpu.append((time.thread_time() - c0) * 1e6)
        wall.append((time.perf_counter() - w0) * 1e6)
    return cpu, wall


def _functions(path: Path, **globals_) -> dict:
    """The top-level functions and classes of a file, compiled without its imports (which pull
    in the whole engine); `globals_` supply the names they use."""
    tree = ast.parse(path.read_text())
    body = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    namespace = {"torch": torch, "np": np, "random": random, "List": List, "Dict": Dict,
                 "Tuple": Tuple, "Optional": Optional, "P2POp": dist.P2POp,
                 "dataclass": dataclass, "Sequence": Sequence, "CpuGpuEvent": object, **globals_}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def _module(path: Path, stubs: dict[str, dict]):
    """A file loaded as a module, its engine imports replaced by `stubs` (name -> attributes)."""
    for name, attrs in stubs.items():
        sys.modules.setdefault(name, types.ModuleType(name)).__dict__.update(attrs)
    spec = importlib.util.spec_from_file_location(f"timed_{path.stem}_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Recorder:
    """Builds `rebalance_term` records sharing one provenance."""

    def __init__(self, provenance: dict, cpu_name: str):
        self.provenance, self.cpu = provenance, cpu_name
        self.records: list[dict] = []

    def add(self, term: str, impl: str, key: str, shape: dict, timed, digest: str = "") -> None:
        cpu_us, wall_us = timed
        work = (shape["work"], 0.0) if "work" in shape else work_of(
            key, num_layers=shape["layers"], num_experts=shape["experts"],
            num_physical=shape["physical"], num_ranks=shape["ranks"], num_nodes=shape["nodes"],
            num_groups=shape["groups"])
        self.records.append(dict(
            kind="rebalance_term", timing="host", backend="host", ep_size=int(shape.get("ranks", 1)),
            num_tokens_per_rank=0, hidden_size=0, num_experts=int(shape.get("experts", 0)),
            num_physical_experts=int(shape.get("physical", 0)), num_layers=int(shape.get("layers", 1)),
            num_iters=len(cpu_us), **summarize_us(cpu_us), provenance=self.provenance,
            extra={"term": term, "impl": impl, "key": key, "work": float(work[0]),
                   "work2": float(work[1]), "work_unit": list(WORK_UNIT[unit_of(key)]),
                   "shape": shape, "threads": 1,
                   "cpu": self.cpu, "clock": "thread_time",
                   "wall_us": float(np.median(wall_us)), **({"sha256": digest} if digest else {})}))


def _loads(rng: np.random.Generator, layers: int, experts: int) -> np.ndarray:
    """[layers, experts] float64 Zipf(1)-like loads, hot experts shuffled per layer."""
    return 1e6 / (1.0 + np.argsort(rng.random((layers, experts)), axis=1))


def bench_ours(grid, rec: _Recorder, repeats: int) -> None:
    """Our algorithms and `plan_moves`."""
    rng = np.random.default_rng(0)
    for layers, experts, physical, ranks, nodes, groups in grid:
        shape = dict(layers=layers, experts=experts, physical=physical, ranks=ranks, nodes=nodes,
                     groups=groups)
        weight = _loads(rng, layers, experts)
        for name in ("deepseek", "deepseek_global", "sticky"):
            timed = _cpu_timed(lambda: compute_placement(name, weight, physical, groups, nodes, ranks),
                               repeats if name != "sticky" else 1)
            rec.add("algorithm", f"epsim.eplb:{name}", name, shape, timed)
        old, new = (compute_placement("deepseek_global", _loads(rng, layers, experts), physical, 1,
                                      nodes, ranks) for _ in range(2))
        rec.add("plan", "epsim.eplb:plan_moves", "plan", shape,
                _cpu_timed(lambda: plan_moves(old, new, expert_bytes=1.0), repeats))


def bench_sglang(root: Path, grid, rec: _Recorder) -> None:
    """SGLang's own rebalance code, from an unpacked wheel."""
    rng = np.random.default_rng(1)
    utils = {"sglang": {}, "sglang.srt": {},
             "sglang.srt.utils": {"get_bool_env_var": lambda *a, **k: False}}
    for rel, (what, key) in SGLANG_FILES.items():
        path = root / rel
        if not path.is_file():
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        impl = f"{root.name}/{rel}"
        for layers, experts, physical, ranks, nodes, groups in grid:
            shape = dict(layers=layers, experts=experts, physical=physical, ranks=ranks,
                         nodes=nodes, groups=groups)
            weight = torch.as_tensor(_loads(rng, layers, experts), dtype=torch.float32)
            if what == "algorithm":
                module = _module(path, utils)
                for hierarchical in (True, False):
                    if hierarchical and groups % nodes:
                        continue
                    timed = _cpu_timed(lambda: module.rebalance_experts(
                        weight, physical, groups, nodes, ranks, hierarchical), 1)
                    policy = "hierarchical" if hierarchical else "global"
                    rec.add("algorithm", f"{impl}:{policy}", f"{key}_{policy}", shape, timed, digest)
            elif what == "dispatch_map":
                fns = _functions(path)
                fns["_prefer_same_node_experts"] = lambda: False
                l2p = torch.tensor(compute_placement("deepseek_global", weight.numpy(), physical,
                                                    1, 1, ranks).logical_to_physical)
                rec.add("dispatch_map", impl, key, shape, _cpu_timed(
                    lambda: fns["compute_logical_to_rank_dispatch_physical_map"](
                        l2p, ranks, physical, 0), 1), digest)
            else:
                rec.add("updater", impl, key, shape, _time_updater(path, layers, experts, physical,
                                                                   ranks, nodes, rng), digest)


def _time_updater(path: Path, layers, experts, physical, ranks, nodes, rng):
    """SGLang's per-layer move plan for rank 0 over all `layers` (P2P ops built, not posted)."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.FileStore(tempfile.mktemp(), 1), rank=0,
                                world_size=1)
    fns = _functions(path, logger=types.SimpleNamespace(info=print, warning=print))
    dist_stub = types.SimpleNamespace(**{**dist.__dict__, "batch_isend_irecv": lambda ops: []})
    fns["torch"] = types.SimpleNamespace(**{**torch.__dict__, "distributed": dist_stub})
    maps = [compute_placement("deepseek_global", _loads(rng, layers, experts), physical, 1, nodes,
                              ranks).physical_to_logical.tolist() for _ in range(2)]
    spr = physical // ranks
    weights = [torch.zeros(spr, 4) for _ in range(4)]
    buffers = [torch.empty_like(w) for w in weights]

    def run():
        for layer in range(layers):
            fns["update_expert_weights_single_layer"](weights, buffers, maps[0][layer],
                                                      maps[1][layer], spr, ranks // nodes, 0)
    return _cpu_timed(run, 2)


def bench_vllm(root: Path, grid, rec: _Recorder) -> None:
    """vLLM's default policy and per-layer transfer plan, from an unpacked wheel."""
    rng = np.random.default_rng(2)
    policy_path, execute_path = root / VLLM_POLICY, root / VLLM_EXECUTE
    if not policy_path.is_file():
        return
    policy = _functions(policy_path, AbstractEplbPolicy=object)["DefaultEplbPolicy"]
    execute = _functions(execute_path)

    class Recording:       # the communicator's interface, recording only
        def add_send(self, *a, **k): pass
        def add_recv(self, *a, **k): pass
        def execute(self, *a, **k): pass

    for layers, experts, physical, ranks, nodes, groups in grid:
        shape = dict(layers=layers, experts=experts, physical=physical, ranks=ranks, nodes=nodes,
                     groups=groups)
        weight = torch.as_tensor(_loads(rng, layers, experts))
        old = compute_placement("deepseek_global", weight.numpy(), physical, 1, 1, ranks)
        rec.add("algorithm", f"{root.name}/{VLLM_POLICY}", "vllm_policy", shape, _cpu_timed(
            lambda: policy.rebalance_experts(weight, physical, groups, nodes, ranks,
                                             torch.as_tensor(old.physical_to_logical)), 1),
            hashlib.sha256(policy_path.read_bytes()).hexdigest())
        if "move_to_buffer" not in execute:
            continue
        new = compute_placement("deepseek_global", _loads(rng, layers, experts), physical, 1, 1, ranks)
        spr = physical // ranks
        weights = [torch.zeros(spr, 4) for _ in range(8)]
        buffers = [torch.empty_like(w) for w in weights]
        comm = Recording()

        def run():
            for layer in range(layers):
                execute["move_to_buffer"](spr, old.physical_to_logical[layer],
                                          new.physical_to_logical[layer], weights, buffers,
                                          None, 0, comm)
        rec.add("plan", f"{root.name}/{VLLM_EXECUTE}:move_to_buffer", "vllm_move_to_buffer",
                shape, _cpu_timed(run, 2), hashlib.sha256(execute_path.read_bytes()).hexdigest())


def _barrier_worker(rank: int, world: int, store_path: str, repeats: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank,
                            world_size=world)
    for _ in range(20):
        dist.monitored_barrier()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        dist.monitored_barrier()
        samples.append((time.perf_counter() - start) * 1e6)
    if rank == 0:
        Path(out).write_text(json.dumps(samples))
    dist.destroy_process_group()


def bench_barrier(rec: _Recorder, repeats: int) -> None:
    """gloo `monitored_barrier` over two local CPU ranks: 2 messages through rank 0 (wall time:
    it is waiting, not computing)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "samples.json")
        mp.spawn(_barrier_worker, args=(2, os.path.join(tmp, "store"), repeats, out), nprocs=2)
        samples = json.loads(Path(out).read_text())
    per_message = [s / 2 for s in samples]
    rec.add("barrier", "torch.distributed.monitored_barrier (gloo, 2 local ranks), per message",
            "gloo_message", {"ranks": 2, "work": 1.0}, (per_message, per_message))
    # a message needs the other rank on a core: on a shared machine the median is mostly waiting
    # for one, so the lower decile is what a message costs when the peer is running
    rec.records[-1]["extra"]["uncontended_us"] = float(np.percentile(per_message, 10))


def bench_masked_path(rec: _Recorder, quick: bool) -> None:
    """Our live module's masked-rank path (`live.eplb.elastic.mask_ranks` on the survivor: the
    re-placement over the survivors and the dispatch maps rebuilt) on two gloo CPU ranks, rank 1
    lost, every expert also on rank 0 (served by replicas, nothing reloaded)."""
    layers, experts = (2, 8) if quick else (8, 64)
    config = MoeConfig(hidden_size=64, moe_intermediate_size=32, num_experts=experts, top_k=4,
                       num_layers=layers)
    placement = np.tile(np.r_[np.arange(experts), np.arange(experts)[::-1]], (layers, 1))
    case = EplbCase(config, "torch", (4, 4), placement, label="mask/replicas/timed")
    per_rank = run_ranks(scenarios_worker, 2, "gloo",
                         ([("elastic", case, {"lost_rank": 1, "how": "mask",
                                              "rebalance_after": False})], None, None), timeout_s=600)
    survivor = per_rank[0][0]
    shape = dict(layers=layers, experts=experts, physical=2 * experts, ranks=2, nodes=1, groups=1,
                 work=float(layers * 2 * experts))
    rec.add("masked_path", "live.eplb.elastic:mask_ranks (torch backend, gloo, survivor rank 0)",
            "masked_path", shape, ([survivor["path_cpu_us"]], [survivor["path_wall_us"]]))


def run(out: Path, quick: bool, sglang_roots: list[Path], vllm_root: Path | None) -> dict:
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    cpu_name = next((line.split(":", 1)[1].strip() for line in
                     Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), "unknown cpu")
    provenance = {**collect(1, "gloo"), "device": f"cpu ({cpu_name}), 1 thread"}
    rec = _Recorder(provenance, cpu_name)
    grid = QUICK_GRID if quick else GRID
    bench_ours(grid, rec, 2 if quick else 3)
    for root in sglang_roots:
        bench_sglang(root, grid, rec)
    if vllm_root is not None:
        bench_vllm(vllm_root, grid, rec)
    bench_barrier(rec, 50 if quick else 400)
    bench_masked_path(rec, quick)
    path = out / "eplb_host_records.jsonl"
    lines = "".join(MeasurementRecord.model_validate(r).to_json() + "\n" for r in rec.records)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(lines)
    os.replace(tmp, path)
    for r in rec.records:
        print(f"{r['extra']['key']:36s} {json.dumps(r['extra']['shape'])[:60]:60s} "
              f"{r['median_us']:12.1f} us cpu {r['extra']['wall_us']:12.1f} us wall", flush=True)
    return {"records": len(rec.records), "provenance": provenance,
            "command": " ".join(["python -m live.bench.eplb_host", *sys.argv[1:]])}


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m live.bench.eplb_host",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--sglang-root", action="append", default=[], type=Path,
                        help="a folder holding an unpacked sglang/ (repeatable)")
    parser.add_argument("--vllm-root", type=Path, default=None,
                        help="a folder holding an unpacked vllm/")
    parser.add_argument("--quick", action="store_true", help="tiny grid (tests)")
    parser.add_argument("--out", default=os.environ.get("OUT", "out/eplb_host"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _arguments().parse_args(argv)
    for root in args.sglang_root:
        if not (root / "sglang").is_dir():
            print(f"--sglang-root ({root}) must hold an unpacked sglang/ package", file=sys.stderr)
            return 2
    if args.vllm_root is not None and not (args.vllm_root / "vllm").is_dir():
        print(f"--vllm-root ({args.vllm_root}) must hold an unpacked vllm/ package", file=sys.stderr)
        return 2
    summary = run(Path(args.out), args.quick, args.sglang_root, args.vllm_root)
    (Path(args.out) / "eplb_host_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
