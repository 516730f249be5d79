"""The host work of one fused-MoE kernel's first-use compile, without a GPU (Triton ahead of time).

Triton's compile of a kernel for sm90 is host work (the MLIR passes, LLVM, `ptxas`), which
`triton.compile` runs for a target named here (`GPUTarget("cuda", 90, 32)`) on a machine with no
GPU. This compiles `first_use_compile.py`'s kernel (the structure of SGLang's block-FP8 Triton
fused MoE, DeepSeek-R1 TP8 shapes) with the specialisation Triton's JIT would give each token
count of `--tokens` (integer arguments: == 1 as a constant, divisible by 16 as a hint; pointers
16-byte aligned), w13 and w2 for each distinct key, from an empty `TRITON_CACHE_DIR`, and
records per compile the wall time and the CPU time (this process's and its children's, `ptxas`
included): on a shared machine the CPU seconds are what an idle core would take, roughly.

    python benchmarks/first_use_compile_aot.py --out DIR

Writes `records.jsonl` (one line per compile, with the Triton version, CPU and command).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from first_use_compile import (  # noqa: E402
    DEFAULT_TOKENS, GROUP, HIDDEN, INTER_PER_RANK, NUM_EXPERTS, TOP_K, _kernels, tiles_for)

POINTERS = ("a_ptr", "b_ptr", "c_ptr", "a_scale_ptr", "b_scale_ptr", "topk_weights_ptr",
            "sorted_ids_ptr", "expert_ids_ptr", "num_post_padded_ptr")
POINTER_TYPES = ("*fp8e4nv", "*fp8e4nv", "*bf16", "*fp32", "*fp32", "*fp32", "*i32", "*i32", "*i32")


def _ints(num_tokens: int, gemm: str, tiles: tuple) -> dict:
    """The integer arguments the JIT would see for one GEMM of a batch of num_tokens."""
    numel = num_tokens * TOP_K
    bm = tiles[0]
    em = numel * bm if numel < NUM_EXPERTS + 1 else numel + (NUM_EXPERTS + 1) * (bm - 1)
    n, k = (2 * INTER_PER_RANK, HIDDEN) if gemm == "w13" else (HIDDEN, INTER_PER_RANK)
    rows_a = num_tokens if gemm == "w13" else numel
    return {"N": n, "K": k, "EM": em, "num_valid_tokens": numel,
            "stride_am": k, "stride_ak": 1, "stride_be": n * k, "stride_bk": 1, "stride_bn": k,
            "stride_cm": n, "stride_cn": 1, "stride_asm": k // GROUP, "stride_ask": 1,
            "stride_bse": (n // GROUP) * (k // GROUP), "stride_bsk": 1, "stride_bsn": k // GROUP,
            "_rows_a": rows_a}


def timed_compile(src, target, options) -> tuple:
    """(compiled kernel, wall s, CPU s of this process and its children: `ptxas` included)."""
    import triton
    cpu0 = time.process_time()
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    compiled = triton.compile(src, target=target, options=options.__dict__)
    wall_s = time.perf_counter() - t0
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (time.process_time() - cpu0) + (kids1.ru_utime + kids1.ru_stime
                                             - kids0.ru_utime - kids0.ru_stime)
    return compiled, wall_s, cpu_s


def host_provenance(triton_version: str, target: str, command: str) -> dict:
    """What a compile record states about where it ran."""
    cpu = platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {"triton": triton_version, "target": target, "cpu": cpu, "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0], "python": platform.python_version(),
            "command": command}


def emit(records: list, rec: dict, prov: dict) -> None:
    """Append one compile's record (numbered, with the host's provenance) and print it."""
    records.append({**rec, "order": len(records), **prov})
    print(json.dumps(records[-1]), flush=True)


def compile_one(kernel, num_tokens: int, gemm: str) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    _, tiles = tiles_for(num_tokens)
    bm, bn, bk, gm, warps, stages = tiles
    ints = _ints(num_tokens, gemm, tiles)
    ints.pop("_rows_a")
    signature, constexprs, attrs = {}, {}, {}
    for name, ty in zip(POINTERS, POINTER_TYPES):
        signature[name] = ty
        attrs[(kernel.arg_names.index(name),)] = [["tt.divisibility", 16]]
    for name, value in ints.items():
        if value == 1:
            signature[name], constexprs[name] = "constexpr", 1
        else:
            signature[name] = "i32"
            if value % 16 == 0:
                attrs[(kernel.arg_names.index(name),)] = [["tt.divisibility", 16]]
    meta = {"group_n": GROUP, "group_k": GROUP, "BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn,
            "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": gm, "MUL_ROUTED_WEIGHT": gemm == "w2",
            "top_k": TOP_K if gemm == "w13" else 1, "even_Ks": ints["K"] % bk == 0,
            "swap_ab": bm < 64 and bn >= 64}
    for name, value in meta.items():
        signature[name], constexprs[name] = "constexpr", value
    src = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs,
                                    attrs=attrs)
    target = GPUTarget("cuda", 90, 32)
    backend = triton.compiler.make_backend(target)
    options = backend.parse_options({"num_warps": warps, "num_stages": stages})
    compiled, wall_s, cpu_s = timed_compile(src, target, options)
    return {"num_tokens": num_tokens, "gemm": gemm, "tiles": list(tiles),
            "em_div16": ints["EM"] % 16 == 0, "nvt_div16": ints["num_valid_tokens"] % 16 == 0,
            "wall_s": round(wall_s, 3), "cpu_s": round(cpu_s, 3),
            "cubin_bytes": len(compiled.asm.get("cubin", b""))}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", required=True, help="folder for records.jsonl")
    p.add_argument("--tokens", default=DEFAULT_TOKENS, help="token counts, comma separated")
    args = p.parse_args(argv)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="first_use_aot_")
    import triton
    kernel = _kernels()
    prov = host_provenance(triton.__version__, "cuda:90",
                           "python benchmarks/first_use_compile_aot.py " + " ".join(argv))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seen, records = set(), []
    for num_tokens in (int(t) for t in args.tokens.split(",")):
        key = (tiles_for(num_tokens)[1], *(_ints(num_tokens, "w13", tiles_for(num_tokens)[1])[x]
                                            % 16 == 0 for x in ("EM", "num_valid_tokens")))
        if key in seen:
            continue
        seen.add(key)
        for gemm in ("w13", "w2"):
            emit(records, compile_one(kernel, num_tokens, gemm), prov)
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
