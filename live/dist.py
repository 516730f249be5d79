"""Spawned EP ranks: one process per rank (per GPU with NCCL), a real process group each.

`run_ranks(fn, world_size, backend)` spawns `world_size` processes with torch.multiprocessing
(`spawn`), joins them into a process group through a file store, calls
`fn(rank, world_size, group, *args)` in each and returns the per-rank results. A failing rank's
traceback is raised in the parent; a hung run is stopped after `timeout_s`.
"""

from __future__ import annotations

import os
import queue as queue_mod
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# NVLink multicast (NVLS) off in every process: the lent GPU machines must not use it.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}


def rank_device(kind: str) -> torch.device:
    """This process's device of `kind` ("cuda": the GPU `run_ranks` gave this rank, the
    current CUDA device; "cpu")."""
    if kind == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def apply_safe_env() -> None:
    """Set SAFE_ENV in this process (children inherit it)."""
    os.environ.update(SAFE_ENV)


def _rank_main(rank: int, world_size: int, backend: str, init_file: str, timeout_s: float,
               fn: Callable, args: tuple, results) -> None:
    apply_safe_env()
    try:
        kwargs = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            kwargs["device_id"] = torch.device("cuda", rank)
        else:
            # CPU ranks share few cores: spinning intra-op thread pools stall gloo (~10x)
            torch.set_num_threads(1)
        dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=timeout_s),
                                **kwargs)
        group = dist.group.WORLD
        value = fn(rank, world_size, group, *args)
        results.put((rank, "ok", value))
    except BaseException:  # noqa: BLE001 - the parent re-raises it with the rank named
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the group may be broken after a failure
                pass


def run_ranks(fn: Callable, world_size: int, backend: str = "gloo", args: tuple = (),
              timeout_s: float = 300.0) -> list[Any]:
    """Run `fn(rank, world_size, group, *args)` on `world_size` spawned ranks.

    Args:
        fn: a module-level function (it is pickled by reference into the children).
        backend: "gloo" (CPU) or "nccl" (one GPU per rank).
    Returns:
        [world_size] the values `fn` returned, by rank (must be picklable).
    Raises:
        RuntimeError: a rank raised (its traceback in the message) or the run passed timeout_s.
    """
    apply_safe_env()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="epsim-live-") as tmp:
        init_file = str(Path(tmp) / "store")
        procs = [ctx.Process(target=_rank_main, daemon=True,
                             args=(rank, world_size, backend, init_file, timeout_s, fn, args, results))
                 for rank in range(world_size)]
        for proc in procs:
            proc.start()
        out: dict[int, Any] = {}
        errors: list[str] = []
        deadline = time.monotonic() + timeout_s
        try:
            while len(out) + len(errors) < world_size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(f"ranks {sorted(set(range(world_size)) - set(out))} did not "
                                       f"finish within {timeout_s:.0f} s")
                try:
                    rank, status, value = results.get(timeout=min(remaining, 1.0))
                except queue_mod.Empty:
                    dead = [p for p in procs if p.exitcode not in (None, 0)]
                    if dead and results.empty():
                        time.sleep(0.5)  # let a dying rank's report arrive
                        if results.empty():
                            raise RuntimeError(f"rank process exited with code {dead[0].exitcode} "
                                               f"without a report") from None
                    continue
                if status == "ok":
                    out[rank] = value
                else:
                    errors.append(f"rank {rank}:\n{value}")
                    break  # the other ranks may be stuck in a collective with it
        finally:
            for proc in procs:
                proc.join(timeout=5 if not errors else 1)
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
                    proc.join(timeout=5)
        if errors:
            raise RuntimeError("a rank failed: " + errors[0])
    return [out[rank] for rank in range(world_size)]
