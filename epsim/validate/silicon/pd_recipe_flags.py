"""The server flags a disaggregated silicon row ran with: the srt-slurm recipes InferenceX names
(`RECIPES`, read from the recipe files; `epsim.validate.silicon.pd_recipes` picks a row's).

InferenceX's Dynamo P/D groups name their launch recipe in `additional-settings`
(`CONFIG_FILE=recipes/gb200-fp4/1k1k/low-latency.yaml`), a file of srt-slurm
(github.com/ishandhanani/srt-slurm, branch `sa-submission-q1-2026`, cloned by
`runners/launch_gb200-nv.sh`) that sets each side's SGLang server arguments. The ones the rows'
latencies depend on, as `DeploymentSpec` fields:

- `--scheduler-recv-interval` (the low-latency GB200/GB300 recipes: 10 on both sides): the
  decode server takes in new requests every 10 decode iterations (`epsim.sim.recv`), so a
  request's bootstrap -- and with it the prefill, which waits for the decode's KV indices --
  waits for that receive (`epsim.validate.silicon.handoff`);
- `--chunked-prefill-size` and `--max-running-requests`, divided by the DP size under DP
  attention as SGLang 0.5.8 does (`server_args.py` 1937: `chunked_prefill_size //= dp_size`;
  `model_runner_kv_cache_mixin.py` 288: a rank's requests `max_running_requests // dp_size`);
- `--kv-cache-dtype`, `--mem-fraction-static`, `--cuda-graph-max-bs` (the largest of a
  `--cuda-graph-bs` list);
- `--max-total-tokens` where read (a GPU's KV pool at most, `DeploymentSpec.max_total_tokens`):
  the FP4 wide-EP recipes (prefill 131072; decode 3122380 at 1k/1k, 524288 at 8k/1k), the
  GB200 FP8 8k/1k wide-EP prefills (524288) and every low-latency TP prefill (GB200 and GB300,
  FP8 and FP4: 8192 at 1k/1k, 32768 at 8k/1k; their decodes set none). The FP4 8k/1k TP4
  prefill's pool is its chunk, and the low-latency prefills' under two chunks, so their forwards
  and KV transfers take turns (`epsim.sim.prefill_pool`);
- the MTP recipes' `--speculative-num-steps 2 --speculative-eagle-topk 1
  --speculative-num-draft-tokens 3` (not SGLang's DeepSeek default of 3 / 1 / 4);
- the MoE path, stated on every side: `--moe-a2a-backend` (SGLang's default `none` where the
  recipe sets none: the FP4 DEP4 prefills of the GB200/GB300 1k/1k mid-curve and max-tpt recipes
  and the B200 FP4 1k/1k low-latency recipes (STP and MTP) run no all-to-all -- DP attention's
  tokens gathered to every rank, its experts' outputs reduced back, FlashInfer MoE -- and only
  the FP8 DEP8 prefills of the wide-EP recipes dispatch with DeepEP, `--deepep-mode normal`), `--deepep-mode`,
  `--disable-shared-experts-fusion` (every wide-EP side), `--disable-cuda-graph` (the wide-EP
  prefills) and `--num-reserved-decode-tokens` (the FP4 wide-EP decodes' 112);
- `--ep-num-redundant-experts 32` of the wide-EP sides (every DeepEP decode, the FP8 DEP8
  prefills) with `--ep-dispatch-algorithm` (the decodes' `static`, the FP8 prefills' `dynamic`: a
  random replica per token, `expert_location_dispatch.py` `_topk_ids_logical_to_physical_dynamic`,
  epsim's `random`). No recipe sets `--init-expert-location` or `--enable-eplb`, so SGLang places
  the 32 slots trivially (`ExpertLocationMetadata.init_trivial`: physical slot p holds expert
  p mod 256, so experts 0-31 twice) and never moves them: `init_expert_location: trivial`, stated.
  At uniform routing the ranks holding no replica then receive 288 / EP full experts' tokens
  against the mean's 256 / EP, 1.125 x (9 against 8 at EP 32), and read as many experts'
  weights; where EP does not divide the 256 experts the mapping's placement from the workload's
  skew (`epsim.validate.silicon.mapping`) is replaced by this one.

The low-latency recipes' TP sides (GB200 and GB300, FP8 and FP4, MoE EP 1) run
`--moe-runner-backend flashinfer_trtllm`, for which SGLang sets `disable_shared_experts_fusion`
(the shared expert its own MLP: at EP 1 SGLang would otherwise fuse it), and the FP8 ones
`--fp8-gemm-backend flashinfer_trtllm` (`fp8_gemm_backend`; the wide-EP FP8 recipes set no GEMM
backend).

The FP4 wide-EP decodes' `SGLANG_MOE_NVFP4_DISPATCH=1` is `dispatch_dtype: nvfp4` (DeepEP's
low-latency dispatch packed to 4 bits: 0.55 x the FP8 dispatch's bytes, `epsim.cost.comm`).

Not carried, having no `DeploymentSpec` field: `--moe-runner-backend` beyond the fusion it turns
off (epsim prices a system's fitted MoE kernel), `--fp4-gemm-backend`, `--enable-dp-lm-head`,
`--moe-dense-tp-size 1`, `--enable-single-batch-overlap`,
`SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK`,
`--max-prefill-tokens`, `--stream-interval` (SGLang 0.5.8 streams a request's first token at once
whatever the interval: `scheduler_output_processor_mixin.py` 915, `len(output_ids) % interval ==
1`; a P/D decode server's first output is its prebuilt step's, `process_batch_result_prebuilt`,
the prefill's token alone, so TTFT is untouched, and bench_serving's TPOT spans the first token to
the last, so the interval moves only ITL), `--disable-radix-cache`, `--context-length`, the
transfer backend (`nixl` in every recipe here; `epsim.cost.kv_transfer` prices Mooncake's
RDMA path), and the H100 MTP recipes' draft on its prefill side (epsim drafts on the decode side).

`RECIPES` holds the recipes of the groups the flags were read for, keyed by the InferenceX
master-config version (commit) and the group's layout, so a group of another version or layout
keeps SGLang's defaults (`for_group` returns None). The recipe texts are
the versions the code index holds (repository and commit in `source`); the branch InferenceX
cloned is not stored, so that the flags match the branch's at the run's date is an assumption
each row states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epsim.validate.silicon import pd_recipes_b200_fp8

# srt-slurm recipe copies the flags were read from (repository@commit)
_ISHAN_LL = "ishandhanani/srt-slurm@f64d2b9fc879"
_ISHAN = "ishandhanani/srt-slurm@ab586514235f"
_QICHING = "qiching/srt-slurm@5063eb432640"
_MTP = {"speculative_num_steps": 2, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}
# the MoE path of a side with no all-to-all (TP or TEP, or DP attention with SGLang's default)
_NO_A2A = {"moe_a2a_backend": "none"}
# the TP sides of the low-latency recipes (GB200 and GB300, FP8 and FP4, both sides, MoE EP 1):
# `--moe-runner-backend flashinfer_trtllm`, for which SGLang sets disable_shared_experts_fusion
# (`server_args.py` `_handle_moe_kernel_config`, FP8 and NVFP4 alike), so the shared expert runs
# as its own MLP where at EP 1 SGLang would otherwise fuse it (`epsim.cost.shared_experts`)
_TRTLLM_MOE = {"disable_shared_experts_fusion": True}
# ... and the FP8 ones' `--fp8-gemm-backend flashinfer_trtllm`: the block-FP8 dense linears on
# FlashInfer's trtllm-gen GEMM (`epsim.cost.trtllm_fp8_gemm`)
_TRTLLM_FP8 = {"fp8_gemm_backend": "flashinfer_trtllm", **_TRTLLM_MOE}
# every wide-EP side: `--disable-shared-experts-fusion`, DeepEP low-latency on the decode
_WIDE_EP = {"disable_shared_experts_fusion": True}
# the wide-EP sides' 32 redundant slots, placed as SGLang places them without EPLB (module doc)
_TRIVIAL_SLOTS = {"ep_num_redundant_experts": 32, "init_expert_location": "trivial"}
_DEEPEP_LL = {"moe_a2a_backend": "deepep", "deepep_mode": "low_latency", **_WIDE_EP,
              **_TRIVIAL_SLOTS, "ep_dispatch_algorithm": "static"}


def _fp8_prefill(mem_fraction: float, max_running: int = 30000,
                 max_total: int | None = None) -> dict:
    """The DEP8 prefill of the FP8 wide-EP recipes (GB200 and GB300, 1k/1k and 8k/1k): DeepEP
    normal, a 131072-token chunk over DP 8; `--mem-fraction-static` 0.80 (GB200 8k/1k) or 0.75,
    `--max-running-requests` 30000 (8192 in GB200 1k/1k `ultra-tpt.yaml`), `--max-total-tokens`
    `max_total` a GPU where read (GB200 8k/1k: 524288, 32 chunks)."""
    cap = {} if max_total is None else {"max_total_tokens": max_total}
    return {"chunked_prefill_size": 131072 // 8, "max_running_requests": max_running // 8,
            "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": mem_fraction,
            "disable_cuda_graph": True, "moe_a2a_backend": "deepep", "deepep_mode": "normal",
            **cap, **_WIDE_EP, **_TRIVIAL_SLOTS, "ep_dispatch_algorithm": "random"}


def _fp8_decode(dp: int, max_running: int, graph_bs: int) -> dict:
    """The DEP`dp` decode of the FP8 wide-EP recipes: a 36864-token chunk, `max_running`
    requests over DP `dp`, CUDA graphs to `graph_bs`."""
    return {"chunked_prefill_size": 36864 // dp, "max_running_requests": max_running // dp,
            "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.82,
            "cuda_graph_max_bs": graph_bs, **_DEEPEP_LL}


# the FP4 wide-EP decodes' `SGLANG_MOE_NVFP4_DISPATCH=1` beside `--moe-runner-backend
# flashinfer_cutedsl`: SGLang's DeepEP low-latency dispatch packs the hidden states to NVFP4
# (`_dispatch_core`: `use_nvfp4=True` once the runner's quant config holds its input global scale)
_NVFP4_DISPATCH = {"dispatch_dtype": "nvfp4"}

# every side of the FP4 wide-EP recipes (and the December scripts) sets
# `SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN=1`: q_b_proj on the block-FP8 GEMM (`epsim.cost.mla`)
_FP8_Q_B = {"nvfp4_fp8_q_b": True}

# the DEP4 prefill of the FP4 1k/1k mid-curve and max-tpt recipes, GB200 and GB300 alike: no
# `--moe-a2a-backend`, so SGLang's `none`; no redundant experts; a pool of 131072 a GPU (8 chunks);
# `--moe-runner-backend flashinfer_cutlass` with modelopt_fp4, DP attention and EP = DP 4: SGLang's
# FP4 all-gather and reduce-scatter (`moe_fp4_allgather`, `epsim.cost.tp`)
FP4_PREFILL_1K = {"chunked_prefill_size": 65536 // 4, "max_running_requests": 30000 // 4,
                   "max_total_tokens": 131072,
                   "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.84,
                   "disable_cuda_graph": True, "disable_shared_experts_fusion": True, **_NO_A2A,
                   "moe_fp4_allgather": True, **_FP8_Q_B}


def fp4_decode_1k(dp: int) -> dict:
    """The DEP`dp` decode of the FP4 1k/1k mid-curve (32) and max-tpt (48) recipes."""
    return {"chunked_prefill_size": 786432 // dp, "max_running_requests": 67584 // dp,
            "max_total_tokens": 3122380,
            "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.83, "cuda_graph_max_bs": 1024,
            "num_reserved_decode_tokens": 112, **_DEEPEP_LL, **_NVFP4_DISPATCH, **_FP8_Q_B}


# the FP4 8k/1k recipes' TP4 prefill beside a wide-EP decode (mid-curve, max-tpt; GB200 and
# GB300 alike): no DP attention, so the chunk is the server's; a pool of one chunk, so forward
# and KV transfer take turns (`epsim.sim.prefill_pool`)
FP4_PREFILL_8K = {"chunked_prefill_size": 131072, "max_running_requests": 30000,
                   "max_total_tokens": 131072,
                   "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.95,
                   "disable_cuda_graph": True, "disable_shared_experts_fusion": True, **_NO_A2A,
                   **_FP8_Q_B}


def fp4_decode_8k(dp: int) -> dict:
    """The DEP`dp` decode of the FP4 8k/1k mid-curve (48) and max-tpt (32) recipes."""
    return {"chunked_prefill_size": 24576 // dp, "max_running_requests": 16384 // dp,
            "max_total_tokens": 524288,
            "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.83, "cuda_graph_max_bs": 512,
            "num_reserved_decode_tokens": 112, **_DEEPEP_LL, **_NVFP4_DISPATCH, **_FP8_Q_B}


# the low-latency recipes' TP prefills cap their KV pool below two chunks (`--max-total-tokens`
# 8192 beside an 8192 chunk at 1k/1k, 32768 beside 24576 or 32768 at 8k/1k; GB200 and GB300, FP8
# and FP4 alike; their decodes set none): forward and KV transfer take turns
_LL_POOL_1K = {"max_total_tokens": 8192}
_LL_POOL_8K = {"max_total_tokens": 32768}


def _fp4_low_latency_8k(decode_graph_bs: int) -> tuple[dict, dict]:
    """The FP4 8k/1k low-latency recipes' TP4 sides (GB200's decode graphs to 256, GB300's to
    128; the decode sets no `--max-running-requests`)."""
    both = {"scheduler_recv_interval": 10, "kv_cache_dtype": "fp8_e4m3",
            "mem_fraction_static": 0.95, **_NO_A2A, **_TRTLLM_MOE}
    return ({**both, "chunked_prefill_size": 24576, "cuda_graph_max_bs": 256,
             "max_running_requests": 512, **_LL_POOL_8K},
            {**both, "chunked_prefill_size": 8192, "cuda_graph_max_bs": decode_graph_bs})


# the low-latency recipes' TP sides (the FP8 ones add `_TRTLLM_FP8`'s GEMM backend)
_LOW_LATENCY = {"scheduler_recv_interval": 10, "chunked_prefill_size": 8192,
                "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.95, "cuda_graph_max_bs": 256,
                **_NO_A2A, **_TRTLLM_MOE}
_LOW_LATENCY_FP8 = {**_LOW_LATENCY, **_TRTLLM_FP8}


def _b200_fp4_low_latency_1k(mtp: bool) -> tuple[dict, dict]:
    """The B200 FP4 1k/1k low-latency recipes' sides, STP and MTP alike: a DEP4 prefill (a 32768
    chunk and 512 requests over DP 4, no CUDA graphs) and TEP8 decodes (512 requests, graphs to
    512), neither naming `--moe-a2a-backend` (SGLang's `none`). Beside them, not carried:
    `--stream-interval 30` (the first token still goes at once: module doc),
    `--disable-radix-cache` (random prompts share no prefix), `--context-length 2200` (above
    the rows' 2048 tokens) and `--max-prefill-tokens 32768` (the chunk's size already)."""
    both = {"kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.85}
    prefill = {"chunked_prefill_size": 32768 // 4, "max_running_requests": 512 // 4, **both,
               "disable_cuda_graph": True, **_NO_A2A}
    decode = {"chunked_prefill_size": 32768, "max_running_requests": 512, **both,
              "cuda_graph_max_bs": 512, **(_MTP if mtp else {}), **_NO_A2A}
    return prefill, decode


@dataclass(frozen=True)
class PDRecipe:
    """One group's recipe: its file, where it was read, and each side's `DeploymentSpec` fields
    (per DP rank, as the spec counts them; `max_running_requests` is a cap)."""

    config_file: str
    source: str
    prefill: dict = field(default_factory=dict)
    decode: dict = field(default_factory=dict)
    # True where no stored master config names the file for the group: matched by its variants'
    # layouts and client counts instead (`pd_recipes_b200_fp8`), which the row's line says
    matched: bool = False


# (InferenceX key, master-config commit prefix, isl, osl, (P workers, tp, ep, dp-attn),
#  (D workers, tp, ep, dp-attn), MTP) -> the recipe its CONFIG_FILE names
RECIPES: dict[tuple, PDRecipe] = {
    ("dsr1-fp4-gb200-dynamo-sglang", "2767db504", 1024, 1024, (1, 4, 1, False), (2, 4, 1, False),
     False): PDRecipe("recipes/gb200-fp4/1k1k/low-latency.yaml", _ISHAN_LL,
                      {**_LOW_LATENCY, "max_running_requests": 512, **_LL_POOL_1K},
                      dict(_LOW_LATENCY)),
    ("dsr1-fp4-gb200-dynamo-sglang", "2767db504", 1024, 1024, (4, 4, 4, True), (1, 32, 32, True),
     False): PDRecipe("recipes/gb200-fp4/1k1k/mid-curve.yaml", _ISHAN, FP4_PREFILL_1K,
                      fp4_decode_1k(32)),
    ("dsr1-fp4-gb200-dynamo-sglang", "2767db504", 1024, 1024, (4, 4, 4, True), (1, 48, 48, True),
     False): PDRecipe("recipes/gb200-fp4/1k1k/max-tpt.yaml", _ISHAN, FP4_PREFILL_1K,
                      fp4_decode_1k(48)),
    ("dsr1-fp4-gb300-dynamo-sglang", "3282fdeba", 1024, 1024, (1, 4, 1, False), (2, 4, 1, False),
     False): PDRecipe("recipes/gb300-fp4/1k1k/low_latency.yaml", _ISHAN,
                      {**_LOW_LATENCY, "max_running_requests": 512, **_LL_POOL_1K},
                      dict(_LOW_LATENCY)),
    ("dsr1-fp4-gb300-dynamo-sglang", "3282fdeba", 1024, 1024, (4, 4, 4, True), (1, 32, 32, True),
     False): PDRecipe("recipes/gb300-fp4/1k1k/mid_curve.yaml", _ISHAN, FP4_PREFILL_1K,
                      fp4_decode_1k(32)),
    ("dsr1-fp4-gb300-dynamo-sglang", "3282fdeba", 1024, 1024, (4, 4, 4, True), (1, 48, 48, True),
     False): PDRecipe("recipes/gb300-fp4/1k1k/max_tpt.yaml", _ISHAN, FP4_PREFILL_1K,
                      fp4_decode_1k(48)),
    ("dsr1-fp4-gb200-dynamo-sglang", "2767db504", 8192, 1024, (1, 4, 1, False), (4, 4, 1, False),
     False): PDRecipe("recipes/gb200-fp4/8k1k/low-latency.yaml", _ISHAN,
                      *_fp4_low_latency_8k(256)),
    ("dsr1-fp4-gb200-dynamo-sglang", "2767db504", 8192, 1024, (6, 4, 1, False), (1, 48, 48, True),
     False): PDRecipe("recipes/gb200-fp4/8k1k/mid-curve.yaml", _ISHAN, FP4_PREFILL_8K,
                      fp4_decode_8k(48)),
    ("dsr1-fp4-gb200-dynamo-sglang", "2767db504", 8192, 1024, (10, 4, 1, False),
     (1, 32, 32, True), False): PDRecipe("recipes/gb200-fp4/8k1k/max-tpt.yaml", _ISHAN_LL,
                                         FP4_PREFILL_8K, fp4_decode_8k(32)),
    ("dsr1-fp4-gb300-dynamo-sglang", "3282fdeba", 8192, 1024, (1, 4, 1, False), (4, 4, 1, False),
     False): PDRecipe("recipes/gb300-fp4/8k1k/low_latency.yaml", _ISHAN_LL,
                      *_fp4_low_latency_8k(128)),
    ("dsr1-fp4-gb300-dynamo-sglang", "3282fdeba", 8192, 1024, (6, 4, 1, False), (1, 48, 48, True),
     False): PDRecipe("recipes/gb300-fp4/8k1k/mid_curve.yaml", _ISHAN, FP4_PREFILL_8K,
                      fp4_decode_8k(48)),
    ("dsr1-fp4-gb300-dynamo-sglang", "3282fdeba", 8192, 1024, (10, 4, 1, False),
     (1, 32, 32, True), False): PDRecipe("recipes/gb300-fp4/8k1k/max_tpt.yaml", _ISHAN,
                                         FP4_PREFILL_8K, fp4_decode_8k(32)),
    ("dsr1-fp8-gb300-dynamo-sglang", "37f353be2", 8192, 1024, (1, 4, 1, False), (1, 4, 1, False),
     False): PDRecipe("recipes/gb300-fp8/8k1k/stp/low-latency.yaml", _ISHAN_LL,
                      {"scheduler_recv_interval": 10, "chunked_prefill_size": 32768,
                       "max_running_requests": 128, "kv_cache_dtype": "fp8_e4m3",
                       "mem_fraction_static": 0.95, "cuda_graph_max_bs": 128, **_NO_A2A,
                       **_TRTLLM_FP8, **_LL_POOL_8K},
                      # the decode's `--scheduler-recv-interval 1` is SGLang's default
                      {"max_running_requests": 128, "kv_cache_dtype": "fp8_e4m3",
                       "mem_fraction_static": 0.85, "cuda_graph_max_bs": 128, **_NO_A2A,
                       **_TRTLLM_FP8}),
    ("dsr1-fp8-gb300-dynamo-sglang", "37f353be2", 8192, 1024, (5, 8, 8, True), (1, 32, 32, True),
     False): PDRecipe("recipes/gb300-fp8/8k1k/stp/mid.yaml", _ISHAN_LL,
                      _fp8_prefill(0.75), _fp8_decode(32, 45000, 768)),
    ("dsr1-fp8-gb300-dynamo-sglang", "37f353be2", 8192, 1024, (6, 8, 8, True), (1, 24, 24, True),
     False): PDRecipe("recipes/gb300-fp8/8k1k/stp/max.yaml", _ISHAN_LL,
                      _fp8_prefill(0.75), _fp8_decode(24, 45000, 768)),
    # the GB200 FP8 8k/1k wide-EP recipes: no cap binds at the rows' clients (a decode rank's
    # 341 / 256 requests, CUDA graphs to 512 / 256, beside 6144 clients' 256 / 192 a rank)
    ("dsr1-fp8-gb200-dynamo-sglang", "37f353be2", 8192, 1024, (6, 8, 8, True), (1, 24, 24, True),
     False): PDRecipe("recipes/gb200-fp8/8k1k/max_tpt.yaml", _ISHAN_LL,
                      _fp8_prefill(0.80, max_total=524288), _fp8_decode(24, 8192, 512)),
    ("dsr1-fp8-gb200-dynamo-sglang", "37f353be2", 8192, 1024, (5, 8, 8, True), (1, 32, 32, True),
     False): PDRecipe("recipes/gb200-fp8/8k1k/mid-curve.yaml", _ISHAN_LL,
                      _fp8_prefill(0.80, max_total=524288), _fp8_decode(32, 8192, 256)),
    ("dsr1-fp8-gb200-dynamo-sglang", "37f353be2", 8192, 1024, (1, 8, 1, False), (1, 8, 1, False),
     False): PDRecipe("recipes/gb200-fp8/8k1k/low-latency.yaml", _ISHAN,
                      {**_LOW_LATENCY_FP8, "chunked_prefill_size": 24576,
                       "mem_fraction_static": 0.8,
                       "cuda_graph_max_bs": 512, "max_running_requests": 512,
                       **_LL_POOL_8K},
                      {**_LOW_LATENCY_FP8, "mem_fraction_static": 0.8, "cuda_graph_max_bs": 512,
                       "max_running_requests": 512}),
    # the FP8 1k/1k recipes of the same version
    ("dsr1-fp8-gb200-dynamo-sglang", "37f353be2", 1024, 1024, (1, 4, 1, False), (1, 4, 1, False),
     False): PDRecipe("recipes/gb200-fp8/1k1k/low-latency.yaml", _ISHAN,
                      {**_LOW_LATENCY_FP8, "cuda_graph_max_bs": 128, "max_running_requests": 512,
                       **_LL_POOL_1K},
                      {**_LOW_LATENCY_FP8, "cuda_graph_max_bs": 128, "max_running_requests": 128}),
    ("dsr1-fp8-gb200-dynamo-sglang", "37f353be2", 1024, 1024, (3, 8, 8, True), (1, 48, 48, True),
     False): PDRecipe("recipes/gb200-fp8/1k1k/mid-curve.yaml", _ISHAN_LL, _fp8_prefill(0.75),
                      _fp8_decode(48, 45000, 768)),
    ("dsr1-fp8-gb200-dynamo-sglang", "37f353be2", 1024, 1024, (2, 8, 8, True), (1, 32, 32, True),
     False): PDRecipe("recipes/gb200-fp8/1k1k/max-tpt.yaml", _ISHAN, _fp8_prefill(0.75),
                      _fp8_decode(32, 45000, 768)),
    ("dsr1-fp8-gb200-dynamo-sglang", "37f353be2", 1024, 1024, (1, 8, 8, True), (1, 8, 8, True),
     False): PDRecipe("recipes/gb200-fp8/1k1k/ultra-tpt.yaml", _ISHAN, _fp8_prefill(0.75, 8192),
                      _fp8_decode(8, 5120, 640)),
    ("dsr1-fp8-gb300-dynamo-sglang", "37f353be2", 1024, 1024, (1, 4, 1, False), (4, 4, 1, False),
     False): PDRecipe("recipes/gb300-fp8/1k1k/stp/low-latency.yaml", _ISHAN_LL,
                      {"scheduler_recv_interval": 10, "chunked_prefill_size": 8192,
                       "max_running_requests": 128, "kv_cache_dtype": "fp8_e4m3",
                       "mem_fraction_static": 0.95, "cuda_graph_max_bs": 128, **_NO_A2A,
                       **_TRTLLM_FP8, **_LL_POOL_1K},
                      # `--chunked-prefill-size -1` (off) has no spec value; receive interval 1
                      {"max_running_requests": 128, "kv_cache_dtype": "fp8_e4m3",
                       "mem_fraction_static": 0.85, "cuda_graph_max_bs": 128, **_NO_A2A,
                       **_TRTLLM_FP8}),
    ("dsr1-fp8-gb300-dynamo-sglang", "37f353be2", 1024, 1024, (2, 8, 8, True), (1, 32, 32, True),
     False): PDRecipe("recipes/gb300-fp8/1k1k/stp/mid.yaml", _ISHAN, _fp8_prefill(0.75),
                      _fp8_decode(32, 45000, 768)),
    ("dsr1-fp8-gb300-dynamo-sglang", "37f353be2", 1024, 1024, (1, 8, 8, True), (1, 8, 8, True),
     False): PDRecipe("recipes/gb300-fp8/1k1k/stp/max.yaml", _ISHAN, _fp8_prefill(0.75),
                      _fp8_decode(8, 45000, 1024)),
    # DP attention over the DEP4 prefill with no `--moe-a2a-backend` (SGLang's `none`)
    ("dsr1-fp4-b200-dynamo-sglang-mtp", "84b7df683", 1024, 1024, (1, 4, 4, True), (6, 8, 8, False),
     True): PDRecipe("recipes/b200-fp4/1k1k/mtp/low-latency-dep4-1p-tep8-6d.yaml", _QICHING,
                     *_b200_fp4_low_latency_1k(mtp=True)),
    # the same recipes without MTP (srt-slurm `recipes/b200-fp4/1k1k-stp.yaml`'s `lowlat` variants,
    # one file a decode count in this copy)
    ("dsr1-fp4-b200-dynamo-sglang", "46e0b5ff0", 1024, 1024, (1, 4, 4, True), (5, 8, 8, False),
     False): PDRecipe("recipes/b200-fp4/1k1k/stp/low-latency-dep4-1p-tep8-5d.yaml", _QICHING,
                      *_b200_fp4_low_latency_1k(mtp=False)),
    ("dsr1-fp4-b200-dynamo-sglang", "46e0b5ff0", 1024, 1024, (1, 4, 4, True), (6, 8, 8, False),
     False): PDRecipe("recipes/b200-fp4/1k1k/stp/low-latency-dep4-1p-tep8-6d.yaml", _QICHING,
                      *_b200_fp4_low_latency_1k(mtp=False)),
    ("dsr1-fp8-h100-dynamo-sglang", "78d48618f", 1024, 1024, (1, 16, 1, False), (2, 16, 1, False),
     True): PDRecipe("recipes/h100/1k1k/mtp/h100-fp8-1p2d-max-tp-mtp.yaml", _QICHING,
                     {"chunked_prefill_size": 2048, "max_running_requests": 2,
                      "mem_fraction_static": 0.6, **_NO_A2A},
                     {"max_running_requests": 128, "cuda_graph_max_bs": 128,
                      "mem_fraction_static": 0.9, **_MTP, **_NO_A2A}),
    ("dsr1-fp8-h100-dynamo-sglang", "78d48618f", 8192, 1024, (1, 16, 1, False), (1, 16, 1, False),
     True): PDRecipe("recipes/h100/8k1k/mtp/h100-fp8-1p1d-max-tp-mtp.yaml", _QICHING,
                     {"chunked_prefill_size": 2048, "max_running_requests": 2,
                      "mem_fraction_static": 0.6, **_NO_A2A},
                     {"max_running_requests": 128, "cuda_graph_max_bs": 128,
                      "mem_fraction_static": 0.9, **_MTP, **_NO_A2A}),
    # the H200 8k/1k MTP recipes: no `--kv-cache-dtype` (auto), no `--moe-a2a-backend` (`none`)
    ("dsr1-fp8-h200-dynamo-sglang", "fcc04aaa2", 8192, 1024, (1, 8, 1, False), (6, 8, 1, False),
     True): PDRecipe("recipes/h200/8k1k/bs8-1p6d-mtp.yaml", _QICHING,
                     {"chunked_prefill_size": 32768, "max_running_requests": 16,
                      "mem_fraction_static": 0.82, **_NO_A2A},
                     {"max_running_requests": 16, "cuda_graph_max_bs": 16,
                      "mem_fraction_static": 0.82, **_MTP, **_NO_A2A}),
    # the DEP8 decode's `--max-running-requests 192` is SGLang's over its DP 8 (24 a rank)
    ("dsr1-fp8-h200-dynamo-sglang", "fcc04aaa2", 8192, 1024, (1, 8, 1, False), (1, 8, 8, True),
     True): PDRecipe("recipes/h200/8k1k/bs128-1p1d-dep-mtp.yaml", _QICHING,
                     {"chunked_prefill_size": 163840, "max_running_requests": 16,
                      "mem_fraction_static": 0.75, **_NO_A2A},
                     {"max_running_requests": 192 // 8, "cuda_graph_max_bs": 192,
                      "mem_fraction_static": 0.85, **_MTP, **_NO_A2A}),
}

# the B200 FP8 groups' `recipes/b200-fp8/1k1k.yaml`, `8k1k-stp.yaml` and `8k1k-mtp.yaml`
# (`epsim.validate.silicon.pd_recipes_b200_fp8`)
RECIPES.update({key: PDRecipe(*entry, matched=True)
                for key, entry in {**pd_recipes_b200_fp8.recipes(),
                                   **pd_recipes_b200_fp8.recipes_8k()}.items()})
