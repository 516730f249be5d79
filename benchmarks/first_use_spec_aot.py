"""The host work of SGLang's EAGLE v1 (MTP) Triton kernels' first-use compiles, without a GPU.

Under `--speculative-algorithm EAGLE/NEXTN` with `--speculative-eagle-topk 1` and a paged KV cache
(the `trtllm_mla` backend's 64), SGLang 0.5.9's spec-v1 cycle launches, outside the CUDA graph,
three Triton kernels whose key moves with the batch (`sglang/srt/speculative/spec_utils.py` of the
0.5.9 wheel, lines 61-85, 87-118 and 141-247, copied below unchanged, Apache-2.0, Copyright the
SGLang team): `assign_req_to_token_pool` (`prepare_for_verify` and `verify`, eagle_info.py:139,
510, 542) and `assign_draft_cache_locs` (`_draft_preprocess_decode`, eagle_worker.py:487) with
`bs_upper = next_power_of_2(requests)`, and `create_extend_after_decode_spec_info`
(`prepare_extend_after_decode`, eagle_info.py:716) with `bs_upper = next_power_of_2(max(steps + 1,
requests))`; their other constexprs are fixed by the server (`pool_len`, `topk`, steps, page) and
their pointers fresh tensors (aligned). The draft's `generate_draft_decode_kv_indices` also keys on
the batch, but the CUDA-graph capture meets every class; `align_evict_mask_to_page_size` has no
batch key; `get_target_cache_loc`, `filter_finished_cache_loc_kernel` run only at topk > 1.

This compiles, ahead of time for `--target` (sm100 for B200), each kernel at each `--bs-upper`
from an empty `TRITON_CACHE_DIR`, with the B200 MTP script's draft (2 steps, topk 1) and page 64,
and records per compile the wall and CPU seconds, as `first_use_alloc_aot.py` does.

    python benchmarks/first_use_spec_aot.py --out DIR

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

PAGE_SIZE = 64                     # trtllm_mla's page size
NUM_STEPS, TOPK = 2, 1             # dsr1_fp8_b200_mtp.sh's draft (agg_recipes._FP8_MTP)
POOL_LEN = 163840 + 4              # req_to_token's row (R1's context + 4): one per server
DEFAULT_BS_UPPER = "1,2,4,8,16,32,64,128,256,512"
# pointer dtypes as the callers pass them (int32 ids and accept lengths, int64 the rest)
_I32 = {"verified_id", "accept_lens", "new_verified_id", "req_to_token"}
# the topk-1 call's absent buffers (`None`: Triton makes them constexprs)
_NONE = ("source_cache_loc", "target_cache_loc", "last_page_lens_cumsum")
# sglang/srt/speculative/spec_utils.py (0.5.9 wheel) lines 61-85, 87-118, 141-247, unchanged
_KERNELS = '''
import triton
import triton.language as tl

@triton.jit
def create_extend_after_decode_spec_info(
    verified_id,
    seq_lens,
    accept_lens,
    positions,
    new_verified_id,
    bs_upper: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    offsets = tl.arange(0, bs_upper)
    seq_length = tl.load(seq_lens + pid)
    accept_length = tl.load(accept_lens + pid)

    accept_len_cumsum = tl.sum(
        tl.load(accept_lens + offsets, mask=offsets < pid, other=0)
    )
    positions_ptr = positions + accept_len_cumsum
    mask = offsets < accept_length
    tl.store(positions_ptr + offsets, seq_length - accept_length + offsets, mask)

    accept_len_cumsum += accept_length - 1
    verified_id_data = tl.load(verified_id + accept_len_cumsum)
    tl.store(new_verified_id + pid, verified_id_data)


@triton.jit
def assign_req_to_token_pool(
    req_pool_indices,
    req_to_token,
    start_offset,
    end_offset,
    out_cache_loc,
    pool_len: tl.constexpr,
    bs_upper: tl.constexpr,
):
    BLOCK_SIZE: tl.constexpr = 32
    pid = tl.program_id(axis=0)
    kv_start = tl.load(start_offset + pid)
    kv_end = tl.load(end_offset + pid)
    token_pool = req_to_token + tl.load(req_pool_indices + pid) * pool_len

    length_offset = tl.arange(0, bs_upper)
    start = tl.load(start_offset + length_offset, mask=length_offset < pid, other=0)
    end = tl.load(end_offset + length_offset, mask=length_offset < pid, other=0)
    out_offset = tl.sum(end - start, axis=0)

    out_cache_ptr = out_cache_loc + out_offset

    save_offset = tl.arange(0, BLOCK_SIZE) + kv_start
    load_offset = tl.arange(0, BLOCK_SIZE)

    num_loop = tl.cdiv(kv_end - kv_start, BLOCK_SIZE)
    for _ in range(num_loop):
        mask = save_offset < kv_end
        data = tl.load(out_cache_ptr + load_offset, mask=mask)
        tl.store(token_pool + save_offset, data, mask=mask)
        save_offset += BLOCK_SIZE


@triton.jit
def assign_draft_cache_locs(
    req_pool_indices,
    req_to_token,
    seq_lens,
    extend_lens,
    num_new_pages_per_topk,
    out_cache_loc,
    source_cache_loc,
    target_cache_loc,
    last_page_lens_cumsum,
    duplicate_cache_len: tl.constexpr,
    pool_len: tl.constexpr,
    topk: tl.constexpr,
    speculative_num_steps: tl.constexpr,
    page_size: tl.constexpr,
    bs_upper: tl.constexpr,
    iter_upper: tl.constexpr,
):
    BLOCK_SIZE: tl.constexpr = 128
    pid = tl.program_id(axis=0)

    if page_size == 1 or topk == 1:
        copy_len = topk * speculative_num_steps
        out_cache_ptr = out_cache_loc + pid * topk * speculative_num_steps
    else:
        bs_offset = tl.arange(0, bs_upper)
        copy_len = tl.load(extend_lens + pid)
        cum_copy_len = tl.sum(tl.load(extend_lens + bs_offset, mask=bs_offset < pid))
        out_cache_ptr = out_cache_loc + cum_copy_len

    # Part 1: Copy from out_cache_loc to req_to_token
    kv_start = tl.load(seq_lens + pid)
    token_pool = req_to_token + tl.load(req_pool_indices + pid) * pool_len
    num_loop = tl.cdiv(copy_len, BLOCK_SIZE)
    for i in range(num_loop):
        copy_offset = tl.arange(0, BLOCK_SIZE) + i * BLOCK_SIZE
        mask = copy_offset < copy_len
        data = tl.load(out_cache_ptr + copy_offset, mask=mask)
        tl.store(token_pool + kv_start + copy_offset, data, mask=mask)
    if page_size != 1 and topk != 1 and duplicate_cache_len > 0:
        # Part 2: Copy indices into source_cache_loc and target_cache_loc
        # Expected output: src:[8,9,10,8,9,10...] tgt:[16,17,18,24,25,26...]
        prefix_len = tl.load(seq_lens + pid)
        last_page_len = prefix_len % page_size
        offsets = tl.arange(0, page_size)
        mask = offsets < last_page_len
        num_new_pages_per_topk_ = tl.load(num_new_pages_per_topk + pid)
        prefix_base = token_pool + prefix_len - last_page_len
        src_indices = tl.load(prefix_base + offsets, mask=mask)
        last_page_lens_cumsum_ = tl.load(last_page_lens_cumsum + pid)
        # Skip the first one since no copy is needed
        for topk_id in range(1, topk):
            tl.store(
                source_cache_loc
                + (topk - 1) * (last_page_lens_cumsum_ - last_page_len)
                + (topk_id - 1) * last_page_len
                + offsets,
                src_indices,
                mask=mask,
            )
            tgt_indices = tl.load(
                prefix_base + topk_id * num_new_pages_per_topk_ * page_size + offsets,
                mask=mask,
            )
            tl.store(
                target_cache_loc
                + (topk - 1) * (last_page_lens_cumsum_ - last_page_len)
                + (topk_id - 1) * last_page_len
                + offsets,
                tgt_indices,
                mask=mask,
            )
        # Part 3: Copy and remove the used indices for duplication
        # speculative_num_steps=5, page_size=4, num_new_pages_per_topk_=2, last_page_len=1
        #  - xxxxx .. | - xxxxx .. |
        #   topk=0        topk=1
        #  "-" means prefix tokens
        #  "x" means speculative draft tokens
        #  "." means padded tokens
        # we only want to copy the "x" part.
        iter_offset = tl.arange(0, iter_upper)
        for topk_id in range(topk):
            mask_upper = iter_offset < (speculative_num_steps + last_page_len)
            mask_lower = iter_offset >= last_page_len
            combined_mask = mask_upper & mask_lower
            indices = tl.load(
                prefix_base
                + topk_id * num_new_pages_per_topk_ * page_size
                + iter_offset,
                mask=combined_mask,
                other=0,
            )
            # Shift from previous batches
            ptr_offset = pid * speculative_num_steps * topk
            # Subtract last_page_len to fill the gap of duplicated last page tokens.
            # For example, token pool is (1, 2, 3, 4 ,5) and last page is 1,
            # we write 2, 3, 4 to the front of out_cache_loc.
            tl.store(
                out_cache_loc
                + ptr_offset
                + topk_id * speculative_num_steps
                - last_page_len
                + iter_offset,
                indices,
                mask=combined_mask,
            )
'''


def _kernels():
    """The three kernels, compiled from their source in a module of their own (Triton reads it)."""
    import importlib.util
    path = Path(tempfile.mkdtemp(prefix="first_use_spec_src_")) / "sglang_spec_kernels.py"
    path.write_text(_KERNELS)
    spec = importlib.util.spec_from_file_location("sglang_spec_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return (module.assign_req_to_token_pool, module.assign_draft_cache_locs,
            module.create_extend_after_decode_spec_info)


def compile_one(kernel, constexprs: dict, target) -> dict:
    """One kernel's compile at one key: pointers 16-byte aligned (fresh tensors), `_NONE` None."""
    import triton
    signature, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in constexprs or name in _NONE:
            signature[name] = "constexpr"
        else:
            signature[name] = "*i32" if name in _I32 else "*i64"
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = triton.compiler.ASTSource(fn=kernel, signature=signature,
                                    constexprs={**constexprs, **{n: None for n in _NONE
                                                                 if n in kernel.arg_names}},
                                    attrs=attrs)
    backend = triton.compiler.make_backend(target)
    compiled, wall_s, cpu_s = timed_compile(src, target, backend.parse_options({}))
    return {"kernel": kernel.__name__, **constexprs, "wall_s": round(wall_s, 3),
            "cpu_s": round(cpu_s, 3), "cubin_bytes": len(compiled.asm.get("cubin", b""))}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", required=True, help="folder for records.jsonl")
    p.add_argument("--target", type=int, default=100, help="CUDA compute capability (100: B200)")
    p.add_argument("--bs-upper", default=DEFAULT_BS_UPPER, help="bs_upper values, comma separated")
    args = p.parse_args(argv)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="first_use_spec_aot_")
    import triton
    from triton.backends.compiler import GPUTarget
    target = GPUTarget("cuda", args.target, 32)
    assign, draft_locs, extend_info = _kernels()
    prov = host_provenance(triton.__version__, f"cuda:{args.target}",
                           "python benchmarks/first_use_spec_aot.py " + " ".join(argv))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for bs in (int(b) for b in args.bs_upper.split(",")):
        keys = [(assign, {"pool_len": POOL_LEN, "bs_upper": bs}),
                (draft_locs, {"duplicate_cache_len": 0, "pool_len": POOL_LEN, "topk": TOPK,
                              "speculative_num_steps": NUM_STEPS, "page_size": PAGE_SIZE,
                              "bs_upper": bs,
                              "iter_upper": 1 << (NUM_STEPS + PAGE_SIZE - 1).bit_length()}),
                (extend_info, {"bs_upper": bs})]
        for kernel, constexprs in keys:
            emit(records, compile_one(kernel, constexprs, target), prov)
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
