"""The ai-dynamo launch scripts InferenceX's December 2025 GB200 groups ran, by `SCRIPT_MODE`.

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
  client counts and server flags): read as the TP script. The one stored `1p_4d.sh`
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
  (`pd_recipes`: `_FP4_PREFILL_1K`, `_fp4_decode_1k`, `_FP4_PREFILL_8K`, `_fp4_decode_8k`, with
  the decode's DP size from the worker's GPUs); no script sets `--init-expert-location`, so the
  32 slots sit as SGLang places them without EPLB. Read at wxsms/dynamo@cf433e68 (the fork's
  git history; added in 80dfb82c and 69817c2d, 2025-12-08/11; `8k1k-max-tpt.sh` is `8k1k-middle-curve.sh` byte for
  byte, `1k1k-max-tpt.sh` is `1k1k-middle-curve.sh` less `--enable-single-batch-overlap`). Not
  carried, having no field: `--context-length` (2176 / 9600), `--disable-radix-cache`,
  `--moe-runner-backend`, `--enable-single-batch-overlap`.

The server flags of the TP scripts, as `DeploymentSpec` fields (no DP attention: the flags are a
rank's as written). Not carried, having no field: the prefill's `--max-total-tokens` (8192 at
1k/1k, 32768 at 8k/1k: the prefill's KV pool), `--stream-interval 10`.
"""

from __future__ import annotations

# the repositories the scripts were read at (repository@commit)
_FORK, _DYNAMO = "wxsms/dynamo@cf433e6825d8", "ai-dynamo/dynamo@bc8ca754933a"
_FP4_1K1K = f"{_FORK}, ai-dynamo/dynamo@75b4a35fca94"
# no `--moe-a2a-backend`: SGLang's `none` (TP MoE over the worker's GPUs)
_COMMON = {"scheduler_recv_interval": 10, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.95,
           "max_running_requests": 512, "moe_a2a_backend": "none"}
_FP4_DECODE = {k: v for k, v in _COMMON.items() if k != "max_running_requests"}

# script (`inferencex.Recipe.script`) -> (where it was read, prefill fields, decode fields)
TP_SCRIPTS: dict[str, tuple[str, dict, dict]] = {
    "gb200-fp8/disagg/1k1k-low-latency": (
        _FORK, {**_COMMON, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 128},
        {**_COMMON, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 128}),
    "gb200-fp8/disagg/8k1k-low-latency": (
        _DYNAMO, {**_COMMON, "chunked_prefill_size": 24576, "cuda_graph_max_bs": 512},
        {**_COMMON, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 512}),
    # the FP4 decodes set no --max-running-requests (SGLang sizes it from the KV pool)
    "gb200-fp4/disagg/1k1k-low-latency": (
        _FP4_1K1K, {**_COMMON, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 256},
        {**_FP4_DECODE, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 256}),
    "gb200-fp4/disagg/8k1k-low-latency": (
        _FORK, {**_COMMON, "chunked_prefill_size": 24576, "cuda_graph_max_bs": 256},
        {**_FP4_DECODE, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 256}),
}
# the FP4 wide-EP scripts (module doc) -> where they were read; their flags: `pd_recipes`
WIDE_EP_FP4 = {f"gb200-fp4/disagg/{name}": _FORK for name in
               ("1k1k-middle-curve", "1k1k-max-tpt", "8k1k-middle-curve", "8k1k-max-tpt")}
# the wide-EP scripts whose prefill runs TP over the worker (no DP attention, EP 1)
TP_PREFILL = frozenset({"gb200-fp4/disagg/8k1k-middle-curve", "gb200-fp4/disagg/8k1k-max-tpt"})
# the script renamed `1k1k-low-latency` on 2025-12-19 (module doc)
RENAMED = {"gb200-fp8/disagg/1p_4d": "gb200-fp8/disagg/1k1k-low-latency"}


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
    renamed = (f" (renamed {name.rsplit('/', 1)[-1]} on 2025-12-19; the stored 1p_4d.sh's DEP4 "
               "cannot load FP8 R1)") if script in RENAMED else ""
    return f"launch script {script}.sh{renamed}: TP over the worker, EP 1 ({TP_SCRIPTS[name][0]})"
