"""Time what SGLang's `--enable-symm-mem` pays when its symmetric-memory pool grows: one
`ncclMemAlloc` and one collective `ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)` per new
segment, on every TP rank at once (issue 39; docs/silicon.md, "The symmetric pool's growth").

SGLang 0.5.5 (`sglang/srt/distributed/device_communicators/pynccl_allocator.py:39-50`) allocates
the outputs of `RowParallelLinear`, the FP4 MoE and the all-gather from a `torch.cuda.MemPool`
whose allocator calls exactly these two NCCL functions for each new segment, with
`NCCL_CUMEM_ENABLE=1` and `NCCL_NVLS_ENABLE=1` (`entrypoints/engine.py:679-687`). A prefill of T
tokens needs segments of T x 7168 x 2 bytes (DeepSeek-R1's hidden size, bf16); the decode graphs
left only 20 MB ones, so a cold server's first large prefills grow the pool inside the run.

    python benchmarks/symm_mem_register_gpu.py --out DIR [--ranks N]      # 4 or 8 NVLink GPUs
    python benchmarks/symm_mem_register_gpu.py --out DIR --local          # one GPU: the parts

Collective mode: N ranks (default: every visible GPU) register one `--startup-mb` segment first
(the start-up's: the first window also builds NCCL's device communicator and, NVLS on, the
multicast team, `ncclSymkInitOnce`, NCCL 2.28.3 `src/sym_kernels.cc:205`; a cold server's graph
capture already paid it), then allocate and register every `--sizes-mb` size (the image's: one
bf16 [T, 7168] tensor at T = 1,024, 3,072, 7,168, 15,360, 16,384) and every `--sweep-mb` size
(2-448 MiB, to separate a fixed cost from a per-byte one) `--repeats` times, all ranks together
after a one-float all-reduce as a barrier, so that a call's time is the collective's, not the
ranks' skew. NVLS needs more than two GPUs (NCCL 2.28.3 `src/transport/nvls.cc:160`), so at two a
window registers with peer import and mapping but no multicast bind, and at one with neither.

Local mode (`--local`, one GPU): the CUDA driver calls inside one registration, each timed alone
(`benchmarks/symm_mem_driver.py`: `cuMemCreate`, `cuMemAddressReserve`, `cuMemMap`,
`cuMemSetAccess`, then the per-peer path on this GPU's own handle exported and imported again,
and a multicast bind to a team of one where the driver allows it), then the collective mode on a
one-rank communicator (`ncclMemAlloc`, `ncclCommWindowRegister` with no peer).

Writes to DIR: `symm_mem_register.jsonl` (collective: one line per rank, phase, size and repeat
with `alloc_s`, `register_s`), `symm_mem_local.jsonl` (local: one line per segment with each
call's `<call>_s`), NCCL's own log `nccl.<host>.<pid>.log` (INIT, NVLS, REG: whether multicast
was on), and `fit.json`: for each call, `fixed_s` + `per_gib_s` x GiB fitted by least squares over
the growth and sweep segments (the slowest rank's time per collective call), and the stall those
fits give each first-wave schedule of docs/silicon.md (`FIRST_WAVES`). Those are the numbers the
term needs. Needs torch with CUDA and the libnccl.so.2 torch ships (nvidia-nccl wheel), no network.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import symm_mem_driver  # noqa: E402

NCCL_WIN_COLL_SYMMETRIC = 0x01
NCCL_FLOAT32, NCCL_SUM = 7, 0
MIB = 2**20
GIB = 2**30
# Segments each cold first wave adds, MiB (docs/silicon.md, "How many in the rows' first wave":
# bf16 [T, 7168] = 14 MiB per 1,024 tokens, four tensors per growth): c 1k prompts run as
# 1 + (c - 1) prompts (3 x 14 MiB, then 4 x (c - 1) x 14), or as one batch of c, and the 8k/1k
# wave's 16k chunk.
FIRST_WAVES = {f"1k c{c} split": [14] * 3 + [(c - 1) * 14] * 4 for c in (4, 8, 16)}
FIRST_WAVES.update({f"1k c{c} one batch": [c * 14] * 4 for c in (4, 8, 16)})
FIRST_WAVES["8k 16k chunk"] = [224] * 4


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


def schedule(startup_bytes: int, sizes: list[int], sweep: list[int], repeats: int) -> list:
    """(phase, size_bytes, repeat) in the order every rank runs them: the start-up segment, the
    image's growth sizes, then the sweep."""
    return ([("startup", startup_bytes, 0)]
            + [("growth", s, r) for s in sizes for r in range(repeats)]
            + [("sweep", s, r) for s in sweep for r in range(repeats)])


def _rank(rank: int, nranks: int, uid: bytes, plan: list, out: str) -> None:
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
    data = torch.zeros(1, device="cuda")

    def barrier() -> None:                   # pynccl's warm-up all-reduce, and then a barrier
        _check(nccl.ncclAllReduce(data.data_ptr(), data.data_ptr(), 1, NCCL_FLOAT32, NCCL_SUM,
                                  comm, stream), "ncclAllReduce")
        torch.cuda.synchronize()
    barrier()
    gpu = torch.cuda.get_device_name(rank)
    held = []
    with open(out, "a") as f:
        for phase, size, repeat in plan:
            barrier()
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


def linear_fit(sizes_bytes: list[int], seconds: list[float]) -> dict:
    """Least squares of seconds = fixed_s + per_gib_s x size / GiB over the calls given;
    `per_gib_s` is None (and `fixed_s` the mean) when fewer than two sizes differ."""
    n = len(seconds)
    if n == 0:
        return {"fixed_s": None, "per_gib_s": None, "num_calls": 0, "rms_s": None}
    x = [s / GIB for s in sizes_bytes]
    mx, my = sum(x) / n, sum(seconds) / n
    sxx = sum((xi - mx) ** 2 for xi in x)
    slope = (sum((xi - mx) * (yi - my) for xi, yi in zip(x, seconds)) / sxx) if sxx > 0 else None
    fixed = my - (slope or 0.0) * mx
    rms = (sum((fixed + (slope or 0.0) * xi - yi) ** 2 for xi, yi in zip(x, seconds)) / n) ** 0.5
    return {"fixed_s": fixed, "per_gib_s": slope, "num_calls": n, "rms_s": rms}


def fit_value_s(fit: dict, size_bytes: int) -> float:
    """One call's seconds at `size_bytes` from a `linear_fit` result."""
    return fit["fixed_s"] + (fit["per_gib_s"] or 0.0) * size_bytes / GIB


def collective_calls(rows: list[dict]) -> dict:
    """The slowest rank's seconds per collective call (phase, size, repeat) -> {call: s}: a
    collective ends for the server when its last rank returns."""
    calls: dict = {}
    for r in rows:
        key = (r["phase"], r["size_bytes"], r["repeat"])
        got = calls.setdefault(key, {"alloc": 0.0, "register": 0.0})
        got["alloc"] = max(got["alloc"], r["alloc_s"])
        got["register"] = max(got["register"], r["register_s"])
    return calls


def summarise(calls: dict, names: tuple) -> dict:
    """Per call name, a `linear_fit` over the growth and sweep segments; per first-wave schedule,
    the stall the sum of those fits gives (each registration a collective, run one after
    another as the pool grows)."""
    fitted = [(k, v) for k, v in calls.items() if k[0] != "startup"]
    fits = {name: linear_fit([k[1] for k, _ in fitted], [v[name] for _, v in fitted])
            for name in names if fitted and all(name in v for _, v in fitted)}
    waves = {}
    if fits and all(f["fixed_s"] is not None for f in fits.values()):
        waves = {wave: sum(fit_value_s(f, mib * MIB) for f in fits.values() for mib in segs)
                 for wave, segs in FIRST_WAVES.items()}
    return {"fits": fits, "first_wave_stall_s": waves}


def _local(args, out_dir: Path) -> dict:
    """One GPU: the driver calls alone, each size and repeat a record, and their fits."""
    import torch
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")                          # the primary context, current
    sizes = [int(float(s) * MIB) for s in (args.sizes_mb + "," + args.sweep_mb).split(",") if s]
    facts, records = symm_mem_driver.time_segments(0, sizes, args.repeats)
    gpu = torch.cuda.get_device_name(0)
    with open(out_dir / "symm_mem_local.jsonl", "w") as f:
        for rec in records:
            f.write(json.dumps({**rec, **facts, "gpu": gpu}) + "\n")
    names = (symm_mem_driver.SELF_CALLS + symm_mem_driver.PEER_CALLS
             + symm_mem_driver.BIND_CALLS)
    calls = {("local", r["size_bytes"], r["repeat"]): {n: r[f"{n}_s"] for n in names
                                                        if f"{n}_s" in r} for r in records}
    fits = summarise(calls, names)["fits"]
    peer = [fits[n] for n in symm_mem_driver.PEER_CALLS if n in fits]
    return {"gpu": gpu, **facts, "fits": fits,
            "peer_path_note": "per registration at n ranks: SELF_CALLS once (ncclMemAlloc), "
                              "then n x (map, access) and (n - 1) x (export, import), "
                              "plus mc_bind with NVLS; fd passing and barriers not included",
            "peer_path_per_gib_s": sum(f["per_gib_s"] or 0.0 for f in peer) if peer else None}


def _bad(message: str) -> int:
    print(message, file=sys.stderr)
    return 2


def _mib_list(text: str) -> list[int] | None:
    """Comma-separated MiB as bytes; None when any entry is not a positive number."""
    try:
        sizes = [int(float(s) * MIB) for s in text.split(",") if s.strip()]
    except ValueError:
        return None
    return sizes if sizes and min(sizes) >= 1 else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ranks", type=int, default=0, help="0: every visible GPU")
    parser.add_argument("--local", action="store_true",
                        help="one GPU: the driver calls alone, then a one-rank communicator")
    parser.add_argument("--sizes-mb", default="14,42,98,210,224",
                        help="growth segments, MiB (default: bf16 [T, 7168] at T = 1k-16k)")
    parser.add_argument("--sweep-mb", default="2,8,32,128,448",
                        help="further segments for the fixed + per-byte fit, MiB ('' for none)")
    parser.add_argument("--startup-mb", type=float, default=20.0,
                        help="the start-up's first segment (torch's 20 MiB class), MiB")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = _mib_list(args.sizes_mb)
    if sizes is None:
        return _bad(f"--sizes-mb ({args.sizes_mb}) must be comma-separated positive MiB")
    sweep = _mib_list(args.sweep_mb) if args.sweep_mb.strip() else []
    if sweep is None:
        return _bad(f"--sweep-mb ({args.sweep_mb}) must be comma-separated positive MiB or ''")
    if not args.startup_mb > 0:
        return _bad(f"--startup-mb ({args.startup_mb}) must be > 0")
    if args.repeats < 1:
        return _bad(f"--repeats ({args.repeats}) must be >= 1")
    if args.local and args.ranks not in (0, 1):
        return _bad(f"--ranks ({args.ranks}) with --local must be 1 (or left out)")
    import torch
    import torch.multiprocessing as mp
    if not torch.cuda.is_available():
        return _bad("CUDA: no device visible (this measures NCCL on GPUs)")
    nranks = 1 if args.local else (args.ranks or torch.cuda.device_count())
    if not 1 <= nranks <= torch.cuda.device_count():
        return _bad(f"--ranks ({args.ranks}) must be 1..{torch.cuda.device_count()}")
    args.out.mkdir(parents=True, exist_ok=True)
    command = " ".join(argv if argv is not None else sys.argv[1:])
    result = {"command": f"python benchmarks/symm_mem_register_gpu.py {command}", "nranks": nranks}
    if args.local:
        result["local"] = _local(args, args.out)
    out = args.out / "symm_mem_register.jsonl"
    out.unlink(missing_ok=True)
    uid = UniqueId()
    _check(_libnccl().ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    plan = schedule(int(args.startup_mb * MIB), sizes, sweep, args.repeats)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, nranks, bytes(uid.internal), plan, str(out)))
             for r in range(nranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    if rows:
        calls = collective_calls(rows)
        result.update({"gpu": rows[0]["gpu"], "nccl_version": rows[0]["nccl_version"],
                       "startup": calls.get(plan[0]), **summarise(calls, ("alloc", "register"))})
    (args.out / "fit.json").write_text(json.dumps(result, indent=1) + "\n")
    if nranks <= 2:
        print(f"{nranks} rank(s): NCCL keeps NVLS off at <= 2 GPUs, so no multicast bind was "
              "timed (a lower bound)")
    for name, fit in result.get("fits", {}).items():
        if fit["fixed_s"] is not None:
            print(f"{name:9s} fixed {fit['fixed_s'] * 1e3:8.2f} ms + "
                  f"{(fit['per_gib_s'] or 0) * 1e3:8.2f} ms/GiB ({fit['num_calls']} calls, "
                  f"{nranks} ranks; rms {fit['rms_s'] * 1e3:.2f} ms)")
    for wave, stall in result.get("first_wave_stall_s", {}).items():
        print(f"first wave {wave:16s}: {stall:7.3f} s")
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
