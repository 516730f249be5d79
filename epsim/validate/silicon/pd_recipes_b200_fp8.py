"""The B200 FP8 P/D groups' srt-slurm recipe (`epsim.validate.silicon.pd_recipe_flags` carries it).

InferenceX runs its B200 multi-node keys through srt-slurm (`runners/launch_b200-dgxc-slurm.sh`:
`git clone https://github.com/ishandhanani/srt-slurm.git`, branch `sa-submission-q1-2026`,
`srtctl apply -f "$CONFIG_FILE"`). The 1k/1k groups of `dsr1-fp8-b200-dynamo-sglang` (from
8a02464b8, 2026-02-06) and of its `-mtp` twin (from 8fe499ff4, 2026-02-09) are, variant for
variant, the ones of srt-slurm `recipes/b200-fp8/1k1k.yaml` (read at ishandhanani/srt-slurm@3b69129,
the version the code index holds): STP low-latency `tep8-1p-1d` at 4 clients and `tep8-1p-3d` at
16-256; STP max-throughput `dep8-1p-5d` and `dep8-2p-5d` at 1024-4096; MTP low-latency 1p1d
(4, 64) and 1p3d (4-128); MTP max-throughput `dep8-1p-1d`, `1p-5d`, `2p-5d`, and `1p-2d` with a
one-step draft. The master config that names the file is not stored at those commits, so that the
groups ran this file (and this version of it) is an assumption each row states.

What the file sets, both sides (`base`): `--kv-cache-dtype fp8_e4m3`, `--mem-fraction-static
0.85`, `--chunked-prefill-size 32768` (`--max-prefill-tokens 32768`, the same), `--max-running-
requests 512`, `--moe-runner-backend flashinfer_trtllm` (for which SGLang sets
`disable_shared_experts_fusion`, as `pd_recipe_flags._TRTLLM_MOE` says), no `--moe-a2a-backend`
(SGLang's `none`), TP 8 with EP 8; the prefill `--disable-cuda-graph`, the decode
`--cuda-graph-max-bs 512`. The max-throughput variants add DP attention over 8 on both sides (the
chunk and the requests divided by the DP size, as SGLang 0.5.8 divides them), STP raising both
sides' `--max-running-requests` and the decode's graphs to 1024; the MTP ones draft with
`--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3` (1 / 1 / 2
in `1p-2d`). Both sides' `SGLANG_ENABLE_JIT_DEEPGEMM=false` is carried as `fp8_gemm_backend:
flashinfer_trtllm`: with JIT DeepGEMM off and no `--fp8-gemm-backend`, SGLang's auto choice on
Blackwell (`fp8_utils._dispatch_auto_backend`: DeepGEMM if enabled, else FlashInfer's groupwise
GEMM where the GPU is Blackwell and FlashInfer is installed) runs every FP8-block linear
(q_a/kv_a, q_b, kv_b, o, the unfused shared expert, the dense MLPs) on
`flashinfer_gemm_w8a8_block_fp8_linear_with_fallback`, the kernel the agg B200 FP8 rows' flag
names (`agg_recipes._TRTLLM`; priced by `epsim.cost.trtllm_fp8_gemm`, extrapolated; the image's
backend of that call assumed trtllm, as for the agg rows' pre-0.5.9 images). Not carried (no
`DeploymentSpec` field): `--attention-backend trtllm_mla` (the profile's), `--context-length
2200`, `--stream-interval 30`, `--enable-flashinfer-allreduce-fusion`, `--disable-radix-cache`,
`moe-dense-tp-size 1`.

The 8k/1k groups of the same keys (STP at 8a02464b8, MTP at 8fe499ff4 / 8cdf35781 / ee032b37f)
are, variant for variant and client count for client count, those of `recipes/b200-fp8/8k1k-stp.yaml`
(ishandhanani/srt-slurm@89654bc: `low-latency-tep8-1p-1d` at 4/32/64, `-1p-4d` at 64, `-1p-6d` at
32, `max-tpt-dep8-1p-1d` at 128, `-2p-1d` at 256) and `recipes/b200-fp8/8k1k-mtp.yaml` (@893b9b9:
1p1d 16/32/64, 1p4d 8/256, 1p6d 4/8/16/256, `dep8-1p-1d` 256, `dep8-2p-1d` 128/512). Both set one
`base` for every variant: the 1k/1k flags above (JIT DeepGEMM off, FP8 KV, a 32768 chunk, 512
requests, `flashinfer_trtllm` MoE, no all-to-all) with a 9600 context. Their `zip_override_scale`
sets only names, nodes, workers and client counts, so as the index holds them the `max-tpt-dep8`
variants would launch `--data-parallel-size 1` like the base, where `1k1k.yaml`'s max-throughput
variants add `--data-parallel-size 8 --enable-dp-attention`. The layout kept is InferenceX's
(`dp-attn: true`, as its master config and database state those groups, and as the variants'
names say): each file has a second stored version not read, and the master config naming the
file is not stored; the flags are divided by the DP size as SGLang divides them. The 8k/1k groups
of 593fb431a on (a DEP8 prefill at MoE EP 1, `recipes/b200-fp8/8k1k.yaml`) are not these.
"""

from __future__ import annotations

SOURCE = "ishandhanani/srt-slurm@3b6912960435"
CONFIG_FILE = "recipes/b200-fp8/1k1k.yaml"
# the 8k/1k files (module doc): (file, repository@commit), STP and MTP
_8K_STP = ("recipes/b200-fp8/8k1k-stp.yaml", "ishandhanani/srt-slurm@89654bccbb07")
_8K_MTP = ("recipes/b200-fp8/8k1k-mtp.yaml", "ishandhanani/srt-slurm@893b9b9a4877")
_STP_8K_COMMITS = ("8a02464b8",)
_MTP_8K_COMMITS = ("8fe499ff4", "8cdf35781", "ee032b37f")
_STP_KEY, _MTP_KEY = "dsr1-fp8-b200-dynamo-sglang", "dsr1-fp8-b200-dynamo-sglang-mtp"
# the master-config versions whose 1k/1k groups are the file's variants (inferencex_recipes.json)
_STP_COMMITS = ("8a02464b8", "593fb431a")
_MTP_COMMITS = ("8fe499ff4", "8cdf35781", "ee032b37f", "593fb431a")
_MTP = {"speculative_num_steps": 2, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}
_MTP_1P2D = {"speculative_num_steps": 1, "speculative_eagle_topk": 1,
             "speculative_num_draft_tokens": 2}
_BOTH = {"kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.85, "moe_a2a_backend": "none",
         "disable_shared_experts_fusion": True,
         "fp8_gemm_backend": "flashinfer_trtllm"}     # JIT DeepGEMM off (module doc)
_CHUNK, _TEP, _DEP = 32768, (8, 8, False), (8, 8, True)


def _sides(dp: int, max_running: int, graphs: int, draft: dict | None) -> tuple[dict, dict]:
    """(prefill, decode) fields at DP size `dp` (1: TEP8), per DP rank as the spec counts them."""
    prefill = {**_BOTH, "chunked_prefill_size": _CHUNK // dp,
               "max_running_requests": max_running // dp, "disable_cuda_graph": True}
    decode = {**_BOTH, "chunked_prefill_size": _CHUNK // dp,
              "max_running_requests": max_running // dp, "cuda_graph_max_bs": graphs,
              **(draft or {})}
    return prefill, decode


def recipes_8k() -> dict[tuple, tuple[str, str, dict, dict]]:
    """The 8k/1k groups' entries (module doc), keyed as `recipes`: the base's 512 requests and
    graphs on every variant, TEP8 or (the `max-tpt-dep8` ones) DEP8 as InferenceX lays them out."""
    # (P workers, D workers, DP size of both sides)
    variants = [(1, 1, 1), (1, 4, 1), (1, 6, 1), (1, 1, 8), (2, 1, 8)]
    out = {}
    for mtp, (key, commits, (config, source)) in (
            (False, (_STP_KEY, _STP_8K_COMMITS, _8K_STP)),
            (True, (_MTP_KEY, _MTP_8K_COMMITS, _8K_MTP))):
        for p_workers, d_workers, dp in variants:
            side = _DEP if dp > 1 else _TEP
            for commit in commits:
                out[(key, commit, 8192, 1024, (p_workers, *side), (d_workers, *side), mtp)] = (
                    config, source, *_sides(dp, 512, 512, _MTP if mtp else None))
    return out


def recipes() -> dict[tuple, tuple[str, str, dict, dict]]:
    """`pd_recipe_flags.RECIPES`' entries for the 1k/1k groups: key (InferenceX key, commit prefix, isl,
    osl, (P workers, tp, ep, dp-attn), (D workers, ...), MTP) -> (file, source, prefill, decode)."""
    # (P workers, P side, D workers, D side, MTP, (dp, max running, graphs, draft))
    variants = [
        (1, _TEP, 1, _TEP, False, (1, 512, 512, None)),        # stp low-latency tep8-1p-1d
        (1, _TEP, 3, _TEP, False, (1, 512, 512, None)),        # stp low-latency tep8-1p-3d
        (1, _DEP, 5, _DEP, False, (8, 1024, 1024, None)),      # stp max-tpt dep8-1p-5d
        (2, _DEP, 5, _DEP, False, (8, 1024, 1024, None)),      # stp max-tpt dep8-2p-5d
        (1, _TEP, 1, _TEP, True, (1, 512, 512, _MTP)),         # mtp low-latency tep8-1p-1d
        (1, _TEP, 3, _TEP, True, (1, 512, 512, _MTP)),         # mtp low-latency tep8-1p-3d
        (1, _DEP, 1, _DEP, True, (8, 512, 512, _MTP)),         # mtp max-tpt dep8-1p-1d
        (1, _DEP, 5, _DEP, True, (8, 512, 512, _MTP)),         # mtp max-tpt dep8-1p-5d
        (2, _DEP, 5, _DEP, True, (8, 512, 512, _MTP)),         # mtp max-tpt dep8-2p-5d
        (1, _DEP, 2, _DEP, True, (8, 512, 512, _MTP_1P2D)),    # mtp max-tpt dep8-1p-2d
    ]
    out = {}
    for p_workers, p_side, d_workers, d_side, mtp, sides in variants:
        key, commits = (_MTP_KEY, _MTP_COMMITS) if mtp else (_STP_KEY, _STP_COMMITS)
        for commit in commits:
            out[(key, commit, 1024, 1024, (p_workers, *p_side), (d_workers, *d_side), mtp)] = (
                CONFIG_FILE, SOURCE, *_sides(*sides))
    return out
