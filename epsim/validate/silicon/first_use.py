"""Which silicon rows' servers compile kernels inside the measured run, and what their warm-up met.

**H200, SGLang's Triton fused MoE.** InferenceX's single-node DeepSeek-R1 FP8 H200 script
(`benchmarks/single_node/fixed_seq_len/dsr1_fp8_h200.sh`) starts SGLang with no MoE runner named,
so the block-FP8 experts run SGLang's Triton fused MoE (`epsim.cost.first_use`); its B200 scripts
name `--moe-runner-backend flashinfer_trtllm` (precompiled TRT-LLM kernels: no Triton MoE). Each
run starts a fresh container (an empty Triton cache). The harness warms up with `--num-warmups
2N` copies of the run's first prompt behind a semaphore of N
(`utils/bench_serving/benchmark_serving.py`: every warm-up request is `input_requests[0]`, and the
script passes `--disable-radix-cache`, so each copy is prefilled in full): two waves of N
identical prompts, each one prefill batch of N x its length. Runs before
`agg_recipes.HARNESS_WARMUP_FROM` had no warm-up.

The compile time is our own measurement (`benchmarks/first_use_compile_aot.py`, record
`benchmarks/results/first_use_compile/aot_vm_records.jsonl`): Triton 3.6.0 compiling a kernel of
the same structure at the same shapes for sm90 ahead of time on this project's VM (Intel Xeon),
the median CPU seconds of the 16 BLOCK_M 64 compiles (the prefill keys; 0.43-0.68 s). It leaves
out what the JIT adds around the compile (its launcher, the cache, loading the module), so it is
a lower bound of the stall; the rows' host CPUs are not known. No GPU was lent to measure the
JIT path on H200 (`benchmarks/first_use_compile.py` does, when one is).

**B200, FlashInfer's CUTLASS FMHA module.** Every InferenceX B200 DeepSeek-R1 SGLang script of
November-December 2025 (`benchmarks/dsr1_fp{4,8}_b200_docker.sh` at 17d5e204f, d8fe8f73e,
189ae51cc, d27433dff) passes `--attention-backend trtllm_mla`. In SGLang 0.5.3rc2, 0.5.5 and 0.5.6
(the wheels; the images ran v0.5.3rc1, v0.5.5, v0.5.6) a DeepSeek extend batch takes
`MHA_CHUNKED_KV` under that backend (`models/deepseek_v2.py` `handle_attention_trtllm_mla`), and
where a request has a prefix (a chunked prompt's later chunk: the scripts pass
`--disable-radix-cache`, so chunking is the only prefix) `forward_normal_chunked_kv_core` calls
the backend's `init_mha_chunk_metadata`, whose parent (`flashinfer_mla_backend.py`
`FlashInferMhaChunkKVRunner.update_wrapper`) plans a FlashInfer `BatchPrefillWithRaggedKVCacheWrapper`
per prefix chunk with `backend="cutlass"` on SM100, although the trtllm backend then runs
`trtllm_ragged_attention_deepseek`. The plan loads FlashInfer's `fmha_cutlass_sm100a` module
(`prefill.py` `get_fmha_module`, `build_and_load`), which FlashInfer builds with nvcc on first use
unless an AOT copy is installed: SGLang's Dockerfile at SGL_VERSION 0.5.5 installs
`flashinfer-jit-cache` only under `INSTALL_FLASHINFER_JIT_CACHE=1`, default 0 (the release
workflow's arguments were not read: assumed the default), and the runners start a fresh container
each run. No-prefix prefills (the server's own warm-up request, every prompt that fits a chunk)
and the CUDA-graph decode never plan it. So the run's first prefill step with a prefix waits for
the build, once (FlashInfer builds behind a file lock; the other ranks load it).

The build time is our own measurement (`benchmarks/first_use_nvcc_aot.py`, record
`benchmarks/results/first_use_compile/nvcc_vm_records.jsonl`): nvcc compiling the module's three
sources of the FlashInfer 0.5.0 wheel (SGLang 0.5.5's) for sm_100a with FlashInfer's JIT flags on
this project's VM; the stall is the slowest source's CPU seconds (ninja builds the three at once
on a many-core host), the link left out: a lower bound on a host as fast as our core. The rows'
host CPUs are not known, and nvcc was 13.0 here where the images ran 12.9.

**B200, SGLang's paged KV allocator.** The same B200 scripts' `trtllm_mla` makes SGLang page the KV
cache by 64 tokens, so the scheduler of every TP rank runs the paged allocator's Triton kernels
before each forward (`epsim.sim.first_use_alloc`: their keys hold the batch's request count as
`next_power_of_2`, the largest extend so far, and `free_pages`' 16-byte alignment, none of which a
warm-up of identical requests covers). Their compile times are our own measurement
(`benchmarks/first_use_alloc_aot.py`, record
`benchmarks/results/first_use_compile/alloc_aot_vm_records.jsonl`): Triton 3.5.1 (the rows'
version) compiling the two kernels, copied from the 0.5.9 wheel, ahead of time for sm100 on this
project's VM; the medians of each kernel's compiles by `max_num_extend_tokens` (the decode kernel's
16 less the first, which pays the process's one-time set-up). A lower bound of the stall, as above.
They are the only Triton kernels of a B200 DeepSeek-R1 prefill or first decode under these
scripts whose key moves with the run's lengths or batch (docs/silicon.md, "The B200 prefill's
Triton kernels"); priced on the rows of `ALLOC_IMAGE` (0.5.10.post1 on B300: below), and beside the
module build on the rows of `FMHA_IMAGE`: the 0.5.3rc2, 0.5.5 and 0.5.6 wheels' kernels
(`mem_cache/allocator.py` 296-410 in 0.5.5) and their calls (`alloc_extend`, `alloc_decode`, `free`)
are 0.5.9's but for a fallback above `TRITON_MAX_TENSOR_NUMEL` tokens, so their keys are the same.
Those images ran Triton 3.4.0 (torch 2.8: v0.5.3rc1, v0.5.5) or 3.5.1 (torch 2.9.1: v0.5.6); the
3.5.1 compile times stand for 3.4.0's. On a cold server whose prompts never chunk, they are the
only first-use term priced.

**B200, SGLang's EAGLE v1 kernels (MTP rows).** Where the row ran MTP (`--speculative-algorithm
EAGLE`, topk 1, the paged cache), each decode cycle also launches three Triton kernels outside the
CUDA graph keyed on the batch's request count (`epsim.sim.first_use_alloc`, `SPEC_KERNELS`). Their
compile times are our own measurement (`benchmarks/first_use_spec_aot.py`, record
`benchmarks/results/first_use_compile/spec_aot_vm_records.jsonl`): Triton 3.5.1 compiling the
kernels, copied from the 0.5.9 wheel, ahead of time for sm100 on this project's VM at bs_upper 1 to
512; each kernel's median CPU seconds, the process's first compile left out. A lower bound, as above.

**B300, SGLang 0.5.10.post1's paged KV allocator.** The B300 rows' image
(`lmsysorg/sglang:v0.5.10.post1-cu130`) keeps `bs_upper` and `free_pages`' alignment as the
allocator kernels' key but drops `max_num_extend_tokens` (sgl-project/sglang#19898: its extend
kernel loops over 4096-token blocks), read in the wheel; its EAGLE v1 kernels and their calls are
0.5.9's. The B300 scripts' attention backend was not read: assumed SGLang's default for DeepSeek
on SM10x (`server_args.py` 1602-1610: `trtllm_mla`, page 64). Triton 3.5.1 cannot target sm_103a,
so the compile times are sm100's, extrapolated: the 0.5.10.post1 extend kernel's median over its
16 keys and the decode kernel's less the first (`benchmarks/first_use_alloc_aot.py --sglang
0.5.10.post1`, record `alloc_0510_aot_vm_records.jsonl`), and the EAGLE kernels' above.
"""

from __future__ import annotations

import re

from epsim.validate.silicon import agg_recipes

# one fused-MoE kernel's compile at a new prefill key, CPU s (measured: module doc)
COMPILE_S = 0.46
SYSTEMS = ("h200_sxm",)           # the Triton fused MoE's GPUs among the rows (Hopper)
# FlashInfer's fmha_cutlass_sm100a build: the slowest source's CPU s (measured: module doc)
FMHA_BUILD_S = 84.9
FMHA_SYSTEMS = ("b200_sxm",)      # SM100 with the B200 scripts' trtllm_mla
# the SGLang images whose source was read (module doc): `lmsysorg/sglang:v0.5.5-cu129-amd64`
FMHA_IMAGE = re.compile(r"lmsysorg/sglang:v0\.5\.(3rc1|5|6)-")


# the paged allocator's kernels (measured: module doc): extend by max_num_extend_tokens, decode
ALLOC_EXTEND_COMPILE_S = {4096: 0.087, 8192: 0.12, 16384: 0.26, 32768: 0.90}
ALLOC_DECODE_COMPILE_S = 0.034
ALLOC_SYSTEMS = ("b200_sxm",)     # the B200 scripts' trtllm_mla (page size 64)
# the images whose allocator keys on `max_num_extend_tokens` (read: the 0.5.6, 0.5.8 and 0.5.9
# wheels; sgl-project/sglang#19898 removed it for 0.5.10)
ALLOC_IMAGE = re.compile(r"lmsysorg/sglang:v0\.5\.[6-9]-")
ALLOC_PAGE_SIZE = 64
# SGLang 0.5.10.post1 on B300 (module doc): sm100 compile times, extrapolated to sm_103a
ALLOC_0510_SYSTEMS = ("b300_sxm",)
ALLOC_0510_IMAGE = re.compile(r"lmsysorg/sglang:v0\.5\.10\.post1-")
ALLOC_0510_EXTEND_COMPILE_S, ALLOC_0510_DECODE_COMPILE_S = 0.119, 0.037
# the EAGLE v1 kernels keyed on the batch (measured: module doc), CPU s of one compile
SPEC_COMPILE_S = {"assign_req_to_token_pool": 0.045, "assign_draft_cache_locs": 0.027,
                  "create_extend_after_decode_spec_info": 0.028}


def alloc_extend_compile_s(clients: int, isl: int, chunk: int) -> float:
    """The extend kernel's compile at the `max_num_extend_tokens` the warm-up leaves (a cold
    run's first wave reaches the same): the next power of two of its batch (`clients` prompts of
    up to `isl`), capped by the chunk."""
    tokens = max(4096, 1 << (min(clients * isl, chunk) - 1).bit_length())
    return ALLOC_EXTEND_COMPILE_S[min(tokens, max(ALLOC_EXTEND_COMPILE_S))]


def first_use_compile(row, speculative: bool = False) -> dict | None:
    """The `deployment.first_use_compile` of an InferenceX agg row whose server compiles inside
    the run (module doc): SGLang's Triton fused MoE (DeepSeek-R1 block FP8 on H200), or
    FlashInfer's CUTLASS FMHA module (DeepSeek-R1 on B200 under an image of `FMHA_IMAGE`), or the
    paged allocator's kernels (B200 under `ALLOC_IMAGE`; `speculative`: the row ran MTP, adding
    the EAGLE v1 kernels), else None."""
    if (row.backend != "sglang" or row.mode != "agg" or "deepseek" not in row.model_path.lower()
            or row.concurrency is None):
        return None
    clients = row.concurrency
    warmup = [] if agg_recipes.cold(row) else [clients, clients]
    if row.system in SYSTEMS and row.gemm_quant_mode == "fp8":
        return {"compile_s": COMPILE_S, "warmup_batches": warmup}
    if row.system in FMHA_SYSTEMS and (found := agg_recipes.for_row(row)) is not None \
            and FMHA_IMAGE.match(image := agg_recipes.image_of(found)):
        chunk = found.flags.chunked_prefill_size or 8192
        return {"kernel": "flashinfer_cutlass_fmha", "compile_s": FMHA_BUILD_S,
                "warmup_batches": warmup, "image": image, "page_size": ALLOC_PAGE_SIZE,
                "alloc_compile_s": alloc_extend_compile_s(clients, row.isl, chunk),
                "decode_compile_s": ALLOC_DECODE_COMPILE_S}
    if row.system in ALLOC_SYSTEMS and (found := agg_recipes.for_row(row, speculative)) is not None \
            and ALLOC_IMAGE.match(agg_recipes.image_of(found)):
        chunk = found.flags.chunked_prefill_size or 8192
        return {"kernel": "sglang_paged_alloc", "page_size": ALLOC_PAGE_SIZE,
                "compile_s": alloc_extend_compile_s(clients, row.isl, chunk),
                "decode_compile_s": ALLOC_DECODE_COMPILE_S, "warmup_batches": warmup,
                **({"spec_compile_s": dict(SPEC_COMPILE_S)} if speculative else {})}
    if row.system in ALLOC_0510_SYSTEMS and (found := agg_recipes.for_row(row, speculative)) is not None \
            and ALLOC_0510_IMAGE.match(agg_recipes.image_of(found)):
        return {"kernel": "sglang_paged_alloc", "page_size": ALLOC_PAGE_SIZE,
                "compile_s": ALLOC_0510_EXTEND_COMPILE_S,
                "decode_compile_s": ALLOC_0510_DECODE_COMPILE_S, "extend_keys_tokens": False,
                "warmup_batches": warmup, "proxy": "sm100",
                **({"spec_compile_s": dict(SPEC_COMPILE_S)} if speculative else {})}
    return None


def note(first_use: dict) -> str:
    """The assumption a row's plan states for the term."""
    warmup = (f"after a warm-up of {len(first_use['warmup_batches'])} prefill batches of "
              f"{first_use['warmup_batches'][0]} copies of the run's first prompt"
              if first_use["warmup_batches"] else "with no warm-up")
    if first_use.get("kernel") == "sglang_paged_alloc":
        return (f"first-use compiles: SGLang's paged KV allocator (page {first_use['page_size']}) "
                f"compiles its Triton extend kernel ({first_use['compile_s']:.2f} s) or decode "
                f"kernel ({first_use['decode_compile_s']:.3f} s; Triton 3.5.1 for sm100, measured "
                f"on our VM: our record"
                + ("; extrapolated from sm100 to this GPU's sm_103a, which Triton 3.5.1 cannot "
                   "target; the image's attention backend assumed SGLang's default, trtllm_mla"
                   if first_use.get("proxy") else "")
                + ") on each batch's first new key (requests as a power of two, free_pages' "
                "alignment)"
                + (", and under MTP its EAGLE v1 kernels (assign_req_to_token_pool, "
                   "assign_draft_cache_locs, create_extend_after_decode_spec_info: "
                   f"{min(first_use['spec_compile_s'].values()):.3f}-"
                   f"{max(first_use['spec_compile_s'].values()):.3f} s, the same way) on each "
                   "decode's first new request count as a power of two"
                   if first_use.get("spec_compile_s") else "")
                + f", {warmup}, a fresh Triton cache")
    if first_use.get("kernel") == "flashinfer_cutlass_fmha":
        return (f"first-use build: SGLang's trtllm_mla ({first_use['image']}) plans FlashInfer's "
                f"CUTLASS FMHA module on the first prefill step with a prefix (a chunked "
                f"prompt's later chunk), built by nvcc in {first_use['compile_s']:.0f} s (sm_100a, "
                f"measured on our VM: our record), {warmup}, no FlashInfer JIT cache"
                + (f"; and its paged KV allocator (page {first_use['page_size']}, the 0.5.9 "
                   f"kernels and calls unchanged) compiles its Triton extend kernel "
                   f"({first_use['alloc_compile_s']:.2f} s) or decode kernel "
                   f"({first_use['decode_compile_s']:.3f} s) on each batch's first new key "
                   "(Triton 3.5.1 for sm100 on our VM: our record; the image's Triton 3.4.0 "
                   "with torch 2.8 where it is v0.5.3rc1 or v0.5.5, a proxy), a fresh Triton cache"
                   if first_use.get("alloc_compile_s") else ""))
    return (f"first-use compiles: SGLang's Triton fused MoE compiles {first_use['compile_s']:.2f} s "
            f"a kernel (Triton 3.6 for sm90, measured on our VM: our record) on each prefill "
            f"batch's first new shape key, "
            f"{warmup}, a fresh Triton cache")


def scenario_field(first_use: dict) -> dict:
    """`first_use_compile` as the spec takes it (the image and proxy are the note's)."""
    return {k: v for k, v in first_use.items() if k not in ("image", "proxy")}
