"""The host work of SGLang's paged-allocator Triton kernels' first-use compiles, without a GPU.

SGLang 0.5.9's `PagedTokenToKVPoolAllocator` (page_size > 1: the `trtllm_mla` backend's 64) runs
two Triton kernels in the scheduler loop of every TP rank, before each forward:
`alloc_extend_kernel` on a prefill batch and `alloc_decode_kernel` on a decode batch
(`sglang/srt/mem_cache/allocator.py` of the 0.5.9 wheel, lines 234-348, copied below unchanged,
Apache-2.0, Copyright the SGLang team). Their compiled-kernel key holds, besides `page_size`:
`bs_upper = next_power_of_2(requests in the batch)` (a constexpr), for the extend kernel
`max_num_extend_tokens` (a constexpr: the largest `next_power_of_2` of a batch's extend tokens seen
so far), and Triton's 16-byte alignment of `free_page_ptr` (`self.free_pages`, an int64 tensor
the allocator slices by the pages it hands out, so it is aligned iff an even number of pages went
since the last `free`). This compiles, ahead of time for `--target` (sm100 for B200), each kernel
at the keys `--bs-upper` x `--extend-tokens` x aligned/not, from an empty `TRITON_CACHE_DIR`, and
records per compile the wall time and the CPU time (this process's and its children's, `ptxas`
included): on a shared machine the CPU seconds are what an idle core would take, roughly. It
leaves out what the JIT adds around the compile (its launcher, the cache, loading the module).

    python benchmarks/first_use_alloc_aot.py --out DIR

With `--sglang 0.5.10.post1` it compiles that wheel's extend kernel instead (lines 234-317 of the
same file, copied below unchanged: sgl-project/sglang#19898 dropped `max_num_extend_tokens`, a
loop of 4096-token blocks instead; `bs_upper` and `free_page_ptr`'s alignment stay its key; its
decode kernel is 0.5.9's, unchanged).

Writes `records.jsonl` (one line per compile, with the Triton version, target, CPU and command).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from first_use_compile_aot import emit, host_provenance, timed_compile  # noqa: E402

PAGE_SIZE = 64                     # trtllm_mla's page size (server_args.py:1883-1887 in 0.5.9)
DEFAULT_BS_UPPER = "1,2,4,8,16,32,64,128"
DEFAULT_EXTEND_TOKENS = "4096,16384"
# sglang/srt/mem_cache/allocator.py (0.5.9 wheel) lines 234-348, unchanged
_KERNELS = '''
import triton
import triton.language as tl

@triton.jit
def alloc_extend_kernel(
    pre_lens_ptr,
    seq_lens_ptr,
    last_loc_ptr,
    free_page_ptr,
    out_indices,
    bs_upper: tl.constexpr,
    page_size: tl.constexpr,
    max_num_extend_tokens: tl.constexpr,
):
    pid = tl.program_id(0)

    load_offset = tl.arange(0, bs_upper)
    seq_lens = tl.load(seq_lens_ptr + load_offset, mask=load_offset <= pid)
    pre_lens = tl.load(pre_lens_ptr + load_offset, mask=load_offset <= pid)
    extend_lens = seq_lens - pre_lens

    seq_len = tl.load(seq_lens_ptr + pid)
    pre_len = tl.load(pre_lens_ptr + pid)
    extend_len = seq_len - pre_len

    sum_extend_lens = tl.sum(extend_lens)
    output_start_loc = sum_extend_lens - extend_len

    num_pages_after = (seq_lens + page_size - 1) // page_size
    num_pages_before = (pre_lens + page_size - 1) // page_size
    num_new_pages = num_pages_after - num_pages_before

    num_page_start_loc_self = (seq_len + page_size - 1) // page_size - (
        pre_len + page_size - 1
    ) // page_size
    sum_num_new_pages = tl.sum(num_new_pages)
    new_page_start_loc = sum_num_new_pages - num_page_start_loc_self

    # Part 1: fill the old partial page
    last_loc = tl.load(last_loc_ptr + pid)
    num_part1 = (
        min(seq_len, (pre_len + page_size - 1) // page_size * page_size) - pre_len
    )
    offset_one_page = tl.arange(0, page_size)
    tl.store(
        out_indices + output_start_loc + offset_one_page,
        last_loc + 1 + offset_one_page,
        mask=offset_one_page < num_part1,
    )
    if pre_len + num_part1 == seq_len:
        return

    # Part 2: fill the new full pages
    num_part2 = (
        seq_len // page_size * page_size
        - (pre_len + page_size - 1) // page_size * page_size
    )

    offset_many_page = tl.arange(0, max_num_extend_tokens)
    page_start = tl.load(
        free_page_ptr + new_page_start_loc + offset_many_page // page_size,
        mask=offset_many_page < num_part2,
    )
    tl.store(
        out_indices + output_start_loc + num_part1 + offset_many_page,
        page_start * page_size + offset_many_page % page_size,
        mask=offset_many_page < num_part2,
    )
    if pre_len + num_part1 + num_part2 == seq_len:
        return

    # Part 3: fill the new partial page
    num_part3 = seq_len - seq_len // page_size * page_size
    start_loc = tl.load(
        free_page_ptr + new_page_start_loc + num_page_start_loc_self - 1
    )
    tl.store(
        out_indices + output_start_loc + num_part1 + num_part2 + offset_one_page,
        start_loc * page_size + offset_one_page,
        mask=offset_one_page < num_part3,
    )


@triton.jit
def alloc_decode_kernel(
    seq_lens_ptr,
    last_loc_ptr,
    free_page_ptr,
    out_indices,
    bs_upper: tl.constexpr,
    page_size: tl.constexpr,
):
    pid = tl.program_id(0)

    load_offset = tl.arange(0, bs_upper)
    seq_lens = tl.load(seq_lens_ptr + load_offset, mask=load_offset <= pid)
    pre_lens = tl.where(load_offset <= pid, seq_lens - 1, seq_lens)

    seq_len = tl.load(seq_lens_ptr + pid)
    pre_len = seq_len - 1

    num_pages_after = (seq_lens + page_size - 1) // page_size
    num_pages_before = (pre_lens + page_size - 1) // page_size
    num_new_pages = num_pages_after - num_pages_before

    num_page_start_loc_self = (seq_len + page_size - 1) // page_size - (
        pre_len + page_size - 1
    ) // page_size
    sum_num_new_pages = tl.sum(num_new_pages)
    new_page_start_loc = sum_num_new_pages - num_page_start_loc_self

    if num_page_start_loc_self == 0:
        last_loc = tl.load(last_loc_ptr + pid)
        tl.store(out_indices + pid, last_loc + 1)
    else:
        page = tl.load(free_page_ptr + new_page_start_loc)
        tl.store(out_indices + pid, page * page_size)

'''

# sglang/srt/mem_cache/allocator.py (0.5.10.post1 wheel) lines 234-317, unchanged
_EXTEND_0510 = '''
import triton
import triton.language as tl

@triton.jit
def alloc_extend_kernel(
    pre_lens_ptr,
    seq_lens_ptr,
    last_loc_ptr,
    free_page_ptr,
    out_indices,
    bs_upper: tl.constexpr,
    page_size: tl.constexpr,
):
    pid = tl.program_id(0)

    load_offset = tl.arange(0, bs_upper)
    seq_lens = tl.load(seq_lens_ptr + load_offset, mask=load_offset <= pid)
    pre_lens = tl.load(pre_lens_ptr + load_offset, mask=load_offset <= pid)
    extend_lens = seq_lens - pre_lens

    seq_len = tl.load(seq_lens_ptr + pid)
    pre_len = tl.load(pre_lens_ptr + pid)
    extend_len = seq_len - pre_len

    sum_extend_lens = tl.sum(extend_lens)
    output_start_loc = sum_extend_lens - extend_len

    num_pages_after = (seq_lens + page_size - 1) // page_size
    num_pages_before = (pre_lens + page_size - 1) // page_size
    num_new_pages = num_pages_after - num_pages_before

    num_page_start_loc_self = (seq_len + page_size - 1) // page_size - (
        pre_len + page_size - 1
    ) // page_size
    sum_num_new_pages = tl.sum(num_new_pages)
    new_page_start_loc = sum_num_new_pages - num_page_start_loc_self

    # Part 1: fill the old partial page
    last_loc = tl.load(last_loc_ptr + pid)
    num_part1 = (
        min(seq_len, (pre_len + page_size - 1) // page_size * page_size) - pre_len
    )
    offset_one_page = tl.arange(0, page_size)
    tl.store(
        out_indices + output_start_loc + offset_one_page,
        last_loc + 1 + offset_one_page,
        mask=offset_one_page < num_part1,
    )
    if pre_len + num_part1 == seq_len:
        return

    # Part 2: fill the new full pages using a dynamic blocked loop.
    # The loop bound is derived from num_part2 (runtime value), so Triton
    # generates a real loop instead of unrolling — no constexpr dependency
    # on extend size and only one kernel compilation.
    num_part2 = (
        seq_len // page_size * page_size
        - (pre_len + page_size - 1) // page_size * page_size
    )
    BLOCK_EXTEND: tl.constexpr = 4096
    num_blocks = (num_part2 + BLOCK_EXTEND - 1) // BLOCK_EXTEND
    for block_id in range(num_blocks):
        offset_in_block = tl.arange(0, BLOCK_EXTEND)
        offset = block_id * BLOCK_EXTEND + offset_in_block
        mask = offset < num_part2
        page_start = tl.load(
            free_page_ptr + new_page_start_loc + offset // page_size,
            mask=mask,
        )
        tl.store(
            out_indices + output_start_loc + num_part1 + offset,
            page_start * page_size + offset % page_size,
            mask=mask,
        )
    if pre_len + num_part1 + num_part2 == seq_len:
        return

    # Part 3: fill the new partial page
    num_part3 = seq_len - seq_len // page_size * page_size
    start_loc = tl.load(
        free_page_ptr + new_page_start_loc + num_page_start_loc_self - 1
    )
    tl.store(
        out_indices + output_start_loc + num_part1 + num_part2 + offset_one_page,
        start_loc * page_size + offset_one_page,
        mask=offset_one_page < num_part3,
    )
'''


def _kernels(sglang: str = "0.5.9"):
    """The two kernels, compiled from their source in a module of their own (Triton reads it)."""
    import importlib.util
    path = Path(tempfile.mkdtemp(prefix="first_use_alloc_src_")) / "sglang_alloc_kernels.py"
    path.write_text(_KERNELS)
    spec = importlib.util.spec_from_file_location("sglang_alloc_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if sglang == "0.5.9":
        return module.alloc_extend_kernel, module.alloc_decode_kernel
    path_0510 = path.with_name("sglang_alloc_kernels_0510.py")
    path_0510.write_text(_EXTEND_0510)
    spec = importlib.util.spec_from_file_location("sglang_alloc_kernels_0510", path_0510)
    module_0510 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module_0510)
    return module_0510.alloc_extend_kernel, module.alloc_decode_kernel


def compile_one(kernel, constexprs: dict, aligned: bool, target) -> dict:
    """One kernel's compile at one key: pointers int64 (`*i64`), the constexprs given,
    `free_page_ptr` 16-byte aligned or not (the other pointers are fresh allocations: aligned)."""
    import triton
    signature, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
        else:
            signature[name] = "*i64"
            if aligned or name != "free_page_ptr":
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs,
                                    attrs=attrs)
    backend = triton.compiler.make_backend(target)
    options = backend.parse_options({})
    compiled, wall_s, cpu_s = timed_compile(src, target, options)
    return {"kernel": kernel.__name__, **{k: v for k, v in constexprs.items()},
            "free_pages_aligned": aligned, "wall_s": round(wall_s, 3), "cpu_s": round(cpu_s, 3),
            "cubin_bytes": len(compiled.asm.get("cubin", b""))}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", required=True, help="folder for records.jsonl")
    p.add_argument("--target", type=int, default=100, help="CUDA compute capability (100: B200)")
    p.add_argument("--bs-upper", default=DEFAULT_BS_UPPER, help="bs_upper values, comma separated")
    p.add_argument("--extend-tokens", default=DEFAULT_EXTEND_TOKENS,
                   help="max_num_extend_tokens values of the extend kernel, comma separated")
    p.add_argument("--sglang", choices=("0.5.9", "0.5.10.post1"), default="0.5.9",
                   help="whose extend kernel (0.5.10.post1: no max_num_extend_tokens)")
    args = p.parse_args(argv)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="first_use_alloc_aot_")
    import triton
    from triton.backends.compiler import GPUTarget
    target = GPUTarget("cuda", args.target, 32)
    extend, decode = _kernels(args.sglang)
    prov = host_provenance(triton.__version__, f"cuda:{args.target}",
                           "python benchmarks/first_use_alloc_aot.py " + " ".join(argv))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    keys = [(decode, {"bs_upper": bs, "page_size": PAGE_SIZE})
            for bs in (int(b) for b in args.bs_upper.split(","))]
    tokens = [int(t) for t in args.extend_tokens.split(",")] if args.sglang == "0.5.9" else [None]
    keys += [(extend, {"bs_upper": bs, "page_size": PAGE_SIZE,
                       **({"max_num_extend_tokens": m} if m else {})})
             for m in tokens for bs in (int(b) for b in args.bs_upper.split(","))]
    for kernel, constexprs in keys:
        for aligned in (True, False):
            emit(records, compile_one(kernel, constexprs, aligned, target), prov)
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
