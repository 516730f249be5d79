"""The ai-dynamo launch scripts InferenceX's 2025 GB200 groups ran, by `SCRIPT_MODE` or date.

From December 2025 to February 2026 InferenceX's `dsr1-fp8-gb200-dynamo-sglang` groups state
`tp: 1, ep: 1, dp-attn: true` (or January's `ep: 4`) beside the comment "tp, ep, and dp-attn do
nothing because they are hardcoded in the following file": the worker's SGLang command is a
script of ai-dynamo's `examples/backends/sglang/slurm_jobs/scripts/gb200-fp8/disagg/`, which
`submit_disagg.sh` picks by its tenth argument, the group's `SCRIPT_MODE` setting (before
2025-12-05 the launch script's own `... inf 1p_4d`; `inferencex.Recipe.script`). Two kinds:

- **Wide EP** (`1k1k-max-tpt`, `8k1k-max-tpt`, and no mode: `scripts/gb200-fp8.sh`):
  `--tp-size/--dp-size/--ep-size TOTAL_GPUS --enable-dp-attention --moe-a2a-backend deepep
  --ep-num-redundant-experts 32`, as `inferencex.Recipe.wide_ep` has them.
- **TP** (`1k1k-low-latency`, `8k1k-low-latency`): `--tensor-parallel-size TOTAL_GPUS
  --data-parallel-size 1 --expert-parallel-size 1` with `--moe-runner-backend flashinfer_trtllm`:
  attention TP and MoE-TP over the worker's GPUs (one tray: TP4), no DP attention, no DeepEP,
  no redundant experts. Read at ai-dynamo@bc8ca754 (`8k1k-low-latency.sh`) and, for
  `1k1k-low-latency.sh`, which ai-dynamo's stored history lacks, at the fork
  wxsms/dynamo@cf433e68 (its `8k1k-low-latency.sh` is ai-dynamo's, flag for flag). InferenceX
  pins ai-dynamo@b7107d00 (`benchmarks/dsr1_fp8_gb200_dynamo-sglang_slurm.sh`), which is not
  stored: that these are its scripts is an assumption each row states.
- **FP4 TP** (`gb200-fp4/disagg/1k1k-low-latency`, `8k1k-low-latency`): the same TP launch with
  `--quantization modelopt_fp4 --moe-runner-backend flashinfer_trtllm --kv-cache-dtype fp8_e4m3
  --cuda-graph-max-bs 256`, the decode with no `--max-running-requests`. InferenceX's
  `dsr1-fp4-gb200-dynamo-sglang` states `tp: 1, ep: 1, dp-attn: true` (read as DEP4) for these
  groups from 2025-12-19; `dsr1_fp4_gb200_dynamo-sglang_slurm.sh` passes `GPU_TYPE=gb200-fp4`
  and the same ai-dynamo pin. Read at wxsms/dynamo@cf433e68 (both) and ai-dynamo@75b4a35f
  (`1k1k-low-latency.sh`, flag for flag the fork's). The February 2026 srt-slurm recipe of the
  same groups (`recipes/gb200-fp4/1k1k/low-latency.yaml`, `pd_recipes`) runs the same TP4.
- **`1p_4d`** (the 1k/1k bottom-of-curve group from 2025-12-01 until 2025-12-19, cloned from
  branch `ishan/sa-1.1-sgl-dsr1-fp8`, then renamed `1k1k-low-latency` with the same P/D sizes,
  client counts and server flags): the TP script. ai-dynamo's own history (stored in the fork
  wxsms/dynamo's) holds `examples/.../gb200-fp8/disagg/1p_4d.sh` from f8219b12 (2025-11-12) to
  its rename to `1k1k-low-latency.sh` in 80dfb82c (2025-12-08), TP over the worker in every
  version and, from 02199790 (2025-11-19; read at 01a634d1), with the flags of `TP_SCRIPTS`
  flag for flag (the prefill's `--max-total-tokens 8192` aside). Another `1p_4d.sh`
  (ai-dynamo@341b5dff) runs DEP over the worker with 32 redundant experts, which cannot load on
  a 4-GPU worker: DeepSeek-R1's FP8 routed experts are 654 G parameters (58 MoE layers x 256 x
  3 x 7168 x 2048, a byte each), so 72 of 288 physical experts are 184 GB a GPU, and DP
  attention replicates the other 19 GB (epsim's 17.6 GiB) on every GPU: 203 GB, beyond a
  GB200's 186 GB (13.4 TB HBM3e over 72 GPUs); without redundant experts 164 + 19 GB still
  exceeds its `--mem-fraction-static 0.95`. TP4 shards both (about 169 GB a GPU).

- **FP4 wide EP** (`gb200-fp4/disagg/1k1k-middle-curve`, `1k1k-max-tpt`, `8k1k-middle-curve`,
  `8k1k-max-tpt`): the decode runs DP attention and DeepEP low-latency over every GPU of the
  worker (`--tp/--dp/--ep-size TOTAL_GPUS`, `--ep-num-redundant-experts 32`,
  `--ep-dispatch-algorithm static`, `SGLANG_CUTEDSL_MOE_NVFP4_DISPATCH=1`: SGLang 0.5.5's name
  of the later `SGLANG_MOE_NVFP4_DISPATCH`); the 1k/1k prefills run DP attention with
  `--ep-size 4` and no `--moe-a2a-backend` (SGLang's `none`) and no redundant experts, the 8k/1k
  prefills TP over the worker (`--tp-size TOTAL_GPUS --dp-size 1 --ep-size 1`, `TP_PREFILL`),
  whatever the group's `dp-attn` says. Flag for flag the February srt-slurm recipes'
  (`pd_recipe_flags`: `FP4_PREFILL_1K`, `fp4_decode_1k`, `FP4_PREFILL_8K`, `fp4_decode_8k`, with
  the decode's DP size from the worker's GPUs); no script sets `--init-expert-location`, so the
  32 slots sit as SGLang places them without EPLB. Read at wxsms/dynamo@cf433e68 (the fork's
  git history; added in 80dfb82c and 69817c2d, 2025-12-08/11; `8k1k-max-tpt.sh` is `8k1k-middle-curve.sh` byte for
  byte, `1k1k-max-tpt.sh` is `1k1k-middle-curve.sh` less `--enable-single-batch-overlap`). Not
  carried, having no field: `--context-length` (2176 / 9600), `--disable-radix-cache`,
  `--moe-runner-backend`, `--enable-single-batch-overlap`.

- **Before `SCRIPT_MODE`** (groups naming no script, `Recipe.script` ""): from 2025-09-25
  (InferenceX c2fe824e0, `runners/launch_gb200-nv.sh`) every group, and until 2025-12-19 the
  8k/1k group (to 2025-12-18), cloned the fork Elnifio/dynamo (branch `update-wait-for-model`, from 2025-11-05
  `update-result-file-name`; the fork's file history is stored, which commit a branch held on a
  run's date is not) and ran its
  `components/backends/sglang/slurm_jobs/scripts/gb200-fp8.sh` in the private
  `/mnt/lustre01/artifacts/containers/dynamo-sglang.sqsh` (the launch script sets `IMAGE`
  itself: 93e1b3ca1's master-config `image`, `sglang-runtime:0.5.1-rc0.pre1`, which the
  2025-12-15 rows carry as their version, is a label). The fork's branches predate ai-dynamo's
  move of that directory to `examples/` (2025-10-31) and need `--context-length 9600` for 8k
  prompts, which ai-dynamo's script dropped for 2200 on 2025-10-23: so its server flags are
  those of ai-dynamo@4b3a2c1a5 to @0ab6bc2b7 (2025-09-10 to -30), which differ only in
  spelling DeepEP (`--enable-deepep-moe`, then `--moe-a2a-backend deepep`) and in 0ab6bc2b7's
  round-robin DP balance (read at 0ab6bc2b7, whose docs build the container on
  `lmsysorg/sglang:v0.5.3rc0-cu129-gb200`):
  `--attention-backend cutlass_mla` (SGLang's one-split MLA decode: `mla_kv_splits` "one",
  `epsim.cost.mla_decode`) with the KV cache's dtype unset (auto, BF16) on both sides;
  prefill `--disable-cuda-graph --deepep-mode normal --ep-dispatch-algorithm dynamic
  --chunked-prefill-size 131072 --max-running-requests 12288 --max-total-tokens 524288` and no
  `--mem-fraction-static`; decode `--deepep-mode low_latency --ep-dispatch-algorithm static
  --cuda-graph-max-bs 512 --max-running-requests 36864 --chunked-prefill-size 36864
  --mem-fraction-static 0.82`, `SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=512`; both
  `--ep-num-redundant-experts 32 --disable-shared-experts-fusion`. From 2025-12-01 the 1k/1k
  groups cloned ai-dynamo's branch `ishan/sa-1.1-sgl-dsr1-fp8` (not stored) in
  `lmsysorg/sglang:v0.5.5.post2`, whose `submit_disagg.sh` with no tenth argument runs
  `scripts/gb200-fp8/disagg/default.sh` (read at ai-dynamo@01a634d1b, as of f8219b12d,
  2025-11-12): `--attention-backend trtllm_mla --kv-cache-dtype fp8_e4m3`, prefill
  `--mem-fraction-static 0.75 --max-running-requests 30000`, decode `--max-running-requests
  45000 --cuda-graph-max-bs 768`, the rest as above. Both `submit_disagg.sh` pass
  `--use-init-location` only to the 6 / 3 / 12 / 1 node-and-worker layout (the 1k/1k DEP48
  group): its sides load placements from recorded expert loads (`init_expert_location:
  from_skew`); every other group's 32 slots sit as SGLang places them (`trivial`). SGLang divides
  the chunk and the requests by the DP size under DP attention. Not carried, having no field:
  `--context-length`, `--enable-dp-lm-head`, `--moe-dense-tp-size 1`,
  `--stream-interval 50`, `--deepep-config`, the DeepEP token cap.

The server flags of the TP scripts, as `DeploymentSpec` fields (no DP attention: the flags are a
rank's as written), with `disable_shared_experts_fusion` where `--moe-runner-backend
flashinfer_trtllm` makes SGLang set it (every TP script) and `fp8_gemm_backend` where
`SGLANG_ENABLE_FLASHINFER_GEMM=1` runs the FP8 linears on FlashInfer's trtllm GEMM (the FP8 ones,
both sides; for `1p_4d`, read as `1k1k-low-latency`'s flags, the variable not re-read). Not
carried, having no field: the prefill's `--max-total-tokens` (8192 at 1k/1k, 32768 at 8k/1k: the
prefill's KV pool), `--stream-interval 10`, `--enable-flashinfer-allreduce-fusion`.
"""

from __future__ import annotations

from typing import NamedTuple

# the repositories the scripts were read at (repository@commit)
_FORK, _DYNAMO = "wxsms/dynamo@cf433e6825d8", "ai-dynamo/dynamo@bc8ca754933a"
_FP4_1K1K = f"{_FORK}, ai-dynamo/dynamo@75b4a35fca94"
# no `--moe-a2a-backend`: SGLang's `none` (TP MoE over the worker's GPUs); `--moe-runner-backend
# flashinfer_trtllm` (FP8 and FP4): SGLang sets disable_shared_experts_fusion, so at MoE EP 1 the
# shared expert runs as its own MLP (`epsim.cost.shared_experts`)
_COMMON = {"scheduler_recv_interval": 10, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.95,
           "max_running_requests": 512, "moe_a2a_backend": "none",
           "disable_shared_experts_fusion": True}
_FP4_DECODE = {k: v for k, v in _COMMON.items() if k != "max_running_requests"}
# the FP8 scripts' `SGLANG_ENABLE_FLASHINFER_GEMM=1` (JIT DeepGEMM off): the block-FP8 linears on
# FlashInfer's trtllm GEMM, as `--fp8-gemm-backend flashinfer_trtllm` (`agg_recipes.Flags`)
_FP8 = {**_COMMON, "fp8_gemm_backend": "flashinfer_trtllm"}

# script (`inferencex.Recipe.script`) -> (where it was read, prefill fields, decode fields)
TP_SCRIPTS: dict[str, tuple[str, dict, dict]] = {
    "gb200-fp8/disagg/1k1k-low-latency": (
        _FORK, {**_FP8, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 128},
        {**_FP8, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 128}),
    "gb200-fp8/disagg/8k1k-low-latency": (
        _DYNAMO, {**_FP8, "chunked_prefill_size": 24576, "cuda_graph_max_bs": 512},
        {**_FP8, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 512}),
    # the FP4 decodes set no --max-running-requests (SGLang sizes it from the KV pool)
    "gb200-fp4/disagg/1k1k-low-latency": (
        _FP4_1K1K, {**_COMMON, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 256},
        {**_FP4_DECODE, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 256}),
    "gb200-fp4/disagg/8k1k-low-latency": (
        _FORK, {**_COMMON, "chunked_prefill_size": 24576, "cuda_graph_max_bs": 256},
        {**_FP4_DECODE, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 256}),
}
# the FP4 wide-EP scripts (module doc) -> where they were read; their flags: `pd_recipe_flags`
WIDE_EP_FP4 = {f"gb200-fp4/disagg/{name}": _FORK for name in
               ("1k1k-middle-curve", "1k1k-max-tpt", "8k1k-middle-curve", "8k1k-max-tpt")}
# the wide-EP scripts whose prefill runs TP over the worker (no DP attention, EP 1)
TP_PREFILL = frozenset({"gb200-fp4/disagg/8k1k-middle-curve", "gb200-fp4/disagg/8k1k-max-tpt"})
# the script renamed `1k1k-low-latency` on 2025-12-19 (module doc)
RENAMED = {"gb200-fp8/disagg/1p_4d": "gb200-fp8/disagg/1k1k-low-latency"}


# the groups naming no script, by InferenceX master-config version and ISL -> the script they ran
_FORK_SCRIPT, _DEFAULT_SCRIPT = "gb200-fp8", "gb200-fp8/disagg/default"
UNNAMED_FP8 = {("c2fe824e0", 1024): _FORK_SCRIPT, ("c2fe824e0", 8192): _FORK_SCRIPT,
               ("175fe5364", 1024): _DEFAULT_SCRIPT, ("175fe5364", 8192): _FORK_SCRIPT,
               ("93e1b3ca1", 1024): _DEFAULT_SCRIPT, ("93e1b3ca1", 8192): _FORK_SCRIPT}
UNNAMED_FP8_KEY = "dsr1-fp8-gb200-dynamo-sglang"
# where each was read: the fork's branch is not stored (module doc)
_UNNAMED_SOURCE = {
    _FORK_SCRIPT: ("Elnifio/dynamo update-result-file-name at an unstated commit: its base's "
                   "flags, read at ai-dynamo/dynamo@0ab6bc2b721a; its --attention-backend "
                   "cutlass_mla as one CTA pair walking a request's KV (num_kv_splits=1, "
                   "mla_kv_splits one) at the split-KV trtllm_mla tables' per-SM rate, "
                   "extrapolated"),
    _DEFAULT_SCRIPT: ("ai-dynamo/dynamo ishan/sa-1.1-sgl-dsr1-fp8, not stored: read at "
                      "ai-dynamo/dynamo@01a634d1bd9a")}


class ScriptFlags(NamedTuple):
    """A launch script's path, where it was read, and each side's `DeploymentSpec` fields (per
    DP rank; `max_running_requests` a cap), in `pd_recipe_flags.PDRecipe`'s order."""

    path: str
    source: str
    prefill: dict
    decode: dict


def unnamed_wide_ep_fp8(group) -> ScriptFlags | None:
    """The script a GB200 FP8 wide-EP group naming none ran (module doc) and its flags, each
    side's chunk and requests over its DP size (the worker's GPUs); None for any other group.

    Args:
        group: an `inferencex.Group` (duck-typed: `inferencex` imports this module).
    """
    script = UNNAMED_FP8.get((group.commit[:9], group.isl))
    if group.key != UNNAMED_FP8_KEY or script is None or group.prefill.script or not (
            group.prefill.wide_ep and group.decode.wide_ep):
        return None
    p_dp, d_dp = group.prefill.gpus_per_worker("gb200"), group.decode.gpus_per_worker("gb200")
    placed = ((group.prefill.nodes, group.prefill.workers, group.decode.nodes, group.decode.workers)
              == (6, 3, 12, 1))                 # submit_disagg.sh's --use-init-location
    slots = {"ep_num_redundant_experts": 32, "disable_shared_experts_fusion": True,
             "init_expert_location": "from_skew" if placed else "trivial"}
    prefill = {"max_total_tokens": 524288, "chunked_prefill_size": 131072 // p_dp,
               "disable_cuda_graph": True, "moe_a2a_backend": "deepep", "deepep_mode": "normal",
               "ep_dispatch_algorithm": "random", **slots}     # SGLang's `dynamic`: a random replica
    decode = {"chunked_prefill_size": 36864 // d_dp, "mem_fraction_static": 0.82,
              "moe_a2a_backend": "deepep", "deepep_mode": "low_latency",
              "ep_dispatch_algorithm": "static", **slots}
    if script == _FORK_SCRIPT:
        # --attention-backend cutlass_mla: SGLang's one-split MLA decode (`epsim.cost.mla_decode`)
        prefill.update(kv_cache_dtype="auto", max_running_requests=12288 // p_dp,
                       mla_kv_splits="one")
        decode.update(kv_cache_dtype="auto", max_running_requests=36864 // d_dp, cuda_graph_max_bs=512,
                      mla_kv_splits="one")
    else:
        prefill.update(kv_cache_dtype="fp8_e4m3", mem_fraction_static=0.75,
                       max_running_requests=30000 // p_dp)
        decode.update(kv_cache_dtype="fp8_e4m3", max_running_requests=45000 // d_dp,
                      cuda_graph_max_bs=768)
    where = "components" if script == _FORK_SCRIPT else "examples"   # the fork predates the move
    return ScriptFlags(f"{where}/backends/sglang/slurm_jobs/scripts/{script}.sh",
                       _UNNAMED_SOURCE[script], prefill, decode)


def tp_script(script: str) -> str | None:
    """The TP launch script `script` is (its name in `TP_SCRIPTS`), or None: a wide-EP script,
    another GPU type's, or none."""
    name = RENAMED.get(script, script)
    return name if name in TP_SCRIPTS else None


def tp_side(script: str, role: str) -> bool:
    """The script runs `role` ("prefill", "decode"; "" for either) as attention TP and MoE-TP
    over the worker: a TP script, or an FP4 wide-EP script's TP prefill."""
    return tp_script(script) is not None or role == "prefill" and script in TP_PREFILL


def known(script: str) -> bool:
    """The script's flags were read: a TP script or an FP4 wide-EP script."""
    return tp_script(script) is not None or script in WIDE_EP_FP4


def describe(script: str) -> str:
    """How an assumption names a script whose flags were read (`known(script)`) and where."""
    if script in WIDE_EP_FP4:
        prefill = "TP over the worker" if script in TP_PREFILL else "DP attention, EP 4, no all-to-all"
        return (f"launch script {script}.sh: P {prefill}, D DP attention and DeepEP over the worker "
                f"({WIDE_EP_FP4[script]})")
    name = tp_script(script)
    renamed = (f" (ai-dynamo@01a634d1's TP4 1p_4d.sh, renamed {name.rsplit('/', 1)[-1]} on "
               "2025-12-08)") if script in RENAMED else ""
    return f"launch script {script}.sh{renamed}: TP over the worker, EP 1 ({TP_SCRIPTS[name][0]})"
