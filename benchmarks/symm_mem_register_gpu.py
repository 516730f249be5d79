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

    python benchmarks/symm_mem_register_gpu.py --out DIR [--ranks N] [--sizes-mb 14,42,98,210,224]

N ranks (default: every visible GPU) each register one `--startup-mb` segment first (the
start-up's: the first symmetric window also builds NCCL's device communicator and, NVLS on, the
multicast team, `ncclSymkInitOnce`, NCCL 2.28.3 `src/sym_kernels.cc:205`; a cold server's graph
capture already paid it), then allocate and register every size `--repeats` times in the same
order (a collective). The default sizes are one bf16 [T, 7168] tensor at T = 1,024, 3,072,
7,168, 15,360 and 16,384 tokens: the segments a first wave of c = 4, 8, 16 1k prompts adds when
it runs as 1 + (c - 1) prompts, and a 16k chunk's (four of each size per growth: docs/silicon.md,
"The symmetric pool's growth, step by step"). Writes
`DIR/symm_mem_register.jsonl`: one line per rank, size and repeat with `alloc_s` and `register_s`
(host seconds of each call), `phase` (`startup` or `growth`), the NCCL version, GPU name and rank
count, and NCCL's own log `DIR/nccl.<host>.<pid>.log` (INIT, NVLS, REG: whether multicast was
on and each segment's bind). NVLS needs more than two GPUs (NCCL 2.28.3 `ncclNvlsInit`,
`src/transport/nvls.cc:160`: `gpuCount <= 2` returns with NVLS off), so on two GPUs a window
registers with peer import and mapping but no multicast bind; on one, with neither: read those as
lower bounds. Needs torch with CUDA and the libnccl.so.2 torch ships (nvidia-nccl wheel), nothing
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


def _rank(rank: int, nranks: int, uid: bytes, sizes: list[int], repeats: int, out: str,
          startup_size: int) -> None:
    os.environ.setdefault("NCCL_CUMEM_ENABLE", "1")      # as SGLang sets under --enable-symm-mem
    os.environ.setdefault("NCCL_NVLS_ENABLE", "1")
    os.environ.setdefault("NCCL_DEBUG", "INFO")          # the log says whether NVLS was on
    os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NVLS,REG")
    os.environ.setdefault("NCCL_DEBUG_FILE", str(Path(out).parent / "nccl.%h.%p.log"))
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
        schedule = [("startup", startup_size, 0)] + [("growth", size, repeat) for size in sizes
                                                      for repeat in range(repeats)]
        for phase, size, repeat in schedule:
            ptr, win = ctypes.c_void_p(), ctypes.c_void_p()
            t0 = time.perf_counter()
            _check(nccl.ncclMemAlloc(ctypes.byref(ptr), size), "ncclMemAlloc")
            t1 = time.perf_counter()
            _check(nccl.ncclCommWindowRegister(comm, ptr, size, ctypes.byref(win),
                                               NCCL_WIN_COLL_SYMMETRIC),
                   "ncclCommWindowRegister")
            t2 = time.perf_counter()
            held.append((ptr, win))               # the pool keeps its segments
            f.write(json.dumps({"rank": rank, "nranks": nranks, "phase": phase,
                                "size_bytes": size, "repeat": repeat, "alloc_s": t1 - t0,
                                "register_s": t2 - t1,
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
    parser.add_argument("--sizes-mb", default="14,42,98,210,224",
                        help="growth segments, MiB (default: bf16 [T, 7168] at T = 1k-16k)")
    parser.add_argument("--startup-mb", type=float, default=20.0,
                        help="the start-up's first segment (torch's 20 MiB class), MiB")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        sizes = [int(float(s) * 2**20) for s in args.sizes_mb.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        print(f"--sizes-mb ({args.sizes_mb}) must be comma-separated positive MiB", file=sys.stderr)
        return 2
    if not args.startup_mb > 0:
        print(f"--startup-mb ({args.startup_mb}) must be > 0", file=sys.stderr)
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
                                             str(out), int(args.startup_mb * 2**20)))
             for r in range(nranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    if nranks <= 2:
        print(f"{nranks} rank(s): NCCL keeps NVLS off at <= 2 GPUs, so no multicast bind was "
              "timed (a lower bound)")
    for phase, size in [("startup", int(args.startup_mb * 2**20))] + [("growth", s) for s in sizes]:
        got = [r for r in rows if r["size_bytes"] == size and r["phase"] == phase]
        if got:
            print(f"{phase:7s} {size / 2**20:6.0f} MiB: alloc max {max(r['alloc_s'] for r in got) * 1e3:8.2f} ms, "
                  f"register max {max(r['register_s'] for r in got) * 1e3:8.2f} ms "
                  f"({len(got)} calls, {nranks} ranks)")
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
