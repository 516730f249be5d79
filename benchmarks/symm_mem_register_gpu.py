"""Time what SGLang's `--enable-symm-mem` pays when its symmetric-memory pool grows: one
`ncclMemAlloc` and one collective `ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)` per new
segment, on every TP rank at once (issue 39; docs/silicon.md, "What a cold v0.5.5 server meets
first").

SGLang 0.5.5 (`sglang/srt/distributed/device_communicators/pynccl_allocator.py:39-50`) allocates
the outputs of `RowParallelLinear`, the FP4 MoE and the all-gather from a `torch.cuda.MemPool`
whose allocator calls exactly these two NCCL functions for each new segment, with
`NCCL_CUMEM_ENABLE=1` and `NCCL_NVLS_ENABLE=1` (`entrypoints/engine.py:679-687`). A prefill of T
tokens needs segments of T x 7168 x 2 bytes (DeepSeek-R1's hidden size, bf16); the decode graphs
left only 20 MB ones, so a cold server's first large prefills grow the pool inside the run.

    python benchmarks/symm_mem_register_gpu.py --out DIR [--ranks N] [--sizes-mb 20,52,104,208]

N ranks (default: every visible GPU) each allocate and register every size `--repeats` times in
the same order (a collective), after one warm-up all-reduce as SGLang's pynccl does at init. Writes
`DIR/symm_mem_register.jsonl`: one line per rank, size and repeat with `alloc_s` and
`register_s` (host seconds of each call), the NCCL version, GPU name and rank count. One rank
registers with no peer (no peer mapping, no multicast): with one GPU it measures the allocation
half alone. Needs torch with CUDA and the libnccl.so.2 torch ships (nvidia-nccl wheel), nothing
else; no network.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
import time
from pathlib import Path

NCCL_WIN_COLL_SYMMETRIC = 0x01
NCCL_FLOAT32, NCCL_SUM = 7, 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def _libnccl() -> ctypes.CDLL:
    """torch's bundled NCCL (the nvidia-nccl wheel), else the system's, with the argument types
    of the calls made here (nccl.h)."""
    lib = None
    for base in sys.path:
        for path in sorted(glob.glob(os.path.join(base, "nvidia", "nccl", "lib", "libnccl.so*"))):
            lib = lib or ctypes.CDLL(path)
    lib = lib or ctypes.CDLL("libnccl.so.2")
    p, size = ctypes.c_void_p, ctypes.c_size_t
    lib.ncclGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(p), ctypes.c_int, UniqueId, ctypes.c_int]
    lib.ncclAllReduce.argtypes = [p, p, size, ctypes.c_int, ctypes.c_int, p, p]
    lib.ncclMemAlloc.argtypes = [ctypes.POINTER(p), size]
    lib.ncclMemFree.argtypes = [p]
    lib.ncclCommWindowRegister.argtypes = [p, p, size, ctypes.POINTER(p), ctypes.c_int]
    lib.ncclCommWindowDeregister.argtypes = [p, p]
    lib.ncclCommDestroy.argtypes = [p]
    return lib


def _check(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"{what} returned ncclResult {result}")


def _rank(rank: int, nranks: int, uid: bytes, sizes: list[int], repeats: int, out: str) -> None:
    os.environ.setdefault("NCCL_CUMEM_ENABLE", "1")      # as SGLang sets under --enable-symm-mem
    os.environ.setdefault("NCCL_NVLS_ENABLE", "1")
    import torch
    torch.cuda.set_device(rank)
    nccl = _libnccl()
    version = ctypes.c_int()
    _check(nccl.ncclGetVersion(ctypes.byref(version)), "ncclGetVersion")
    unique = UniqueId()
    ctypes.memmove(ctypes.byref(unique), uid, 128)
    comm = ctypes.c_void_p()
    t0 = time.perf_counter()
    _check(nccl.ncclCommInitRank(ctypes.byref(comm), nranks, unique, rank), "ncclCommInitRank")
    init_s = time.perf_counter() - t0
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    data = torch.zeros(1, device="cuda")                  # pynccl's warm-up all-reduce
    _check(nccl.ncclAllReduce(data.data_ptr(), data.data_ptr(), 1, NCCL_FLOAT32, NCCL_SUM, comm,
                              stream), "ncclAllReduce")
    torch.cuda.synchronize()
    gpu = torch.cuda.get_device_name(rank)
    held = []
    with open(out, "a") as f:
        for size in sizes:
            for repeat in range(repeats):
                ptr, win = ctypes.c_void_p(), ctypes.c_void_p()
                t0 = time.perf_counter()
                _check(nccl.ncclMemAlloc(ctypes.byref(ptr), size), "ncclMemAlloc")
                t1 = time.perf_counter()
                _check(nccl.ncclCommWindowRegister(comm, ptr, size, ctypes.byref(win),
                                                   NCCL_WIN_COLL_SYMMETRIC),
                       "ncclCommWindowRegister")
                t2 = time.perf_counter()
                held.append((ptr, win))                   # the pool keeps its segments
                f.write(json.dumps({"rank": rank, "nranks": nranks, "size_bytes": size,
                                    "repeat": repeat, "alloc_s": t1 - t0, "register_s": t2 - t1,
                                    "comm_init_s": init_s, "nccl_version": version.value,
                                    "gpu": gpu, "window_null": win.value is None}) + "\n")
                f.flush()
    for ptr, win in held:
        if win.value is not None:
            nccl.ncclCommWindowDeregister(comm, win)
        nccl.ncclMemFree(ptr)
    nccl.ncclCommDestroy(comm)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ranks", type=int, default=0, help="0: every visible GPU")
    parser.add_argument("--sizes-mb", default="20,52,104,208")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        sizes = [int(float(s) * 2**20) for s in args.sizes_mb.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        print(f"--sizes-mb ({args.sizes_mb}) must be comma-separated positive MB", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print(f"--repeats ({args.repeats}) must be >= 1", file=sys.stderr)
        return 2
    import torch
    import torch.multiprocessing as mp
    if not torch.cuda.is_available():
        print("CUDA: no device visible (this measures NCCL on GPUs)", file=sys.stderr)
        return 2
    nranks = args.ranks or torch.cuda.device_count()
    if not 1 <= nranks <= torch.cuda.device_count():
        print(f"--ranks ({args.ranks}) must be 1..{torch.cuda.device_count()}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "symm_mem_register.jsonl"
    out.unlink(missing_ok=True)
    uid = UniqueId()
    _check(_libnccl().ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, nranks, bytes(uid.internal), sizes, args.repeats,
                                             str(out))) for r in range(nranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    for size in sizes:
        got = [r for r in rows if r["size_bytes"] == size]
        if got:
            print(f"{size / 2**20:6.0f} MB: alloc max {max(r['alloc_s'] for r in got) * 1e3:8.2f} ms, "
                  f"register max {max(r['register_s'] for r in got) * 1e3:8.2f} ms "
                  f"({len(got)} calls, {nranks} ranks)")
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
