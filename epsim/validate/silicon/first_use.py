"""Which silicon rows' servers compile kernels inside the measured run, and what their warm-up met.

InferenceX's single-node DeepSeek-R1 FP8 H200 script (`benchmarks/single_node/fixed_seq_len/
dsr1_fp8_h200.sh`) starts SGLang with no MoE runner named, so the block-FP8 experts run SGLang's
Triton fused MoE (`epsim.cost.first_use`); its B200 scripts name `--moe-runner-backend
flashinfer_trtllm` (precompiled TRT-LLM kernels: no Triton MoE). Each run starts a fresh
container (an empty Triton cache). The harness warms up with `--num-warmups 2N` copies of the
run's first prompt behind a semaphore of N (`utils/bench_serving/benchmark_serving.py`: every
warm-up request is `input_requests[0]`, and the script passes `--disable-radix-cache`, so each
copy is prefilled in full): two waves of N identical prompts, each one prefill batch of N x its
length. Runs before `agg_recipes.HARNESS_WARMUP_FROM` had no warm-up.

The compile time is our own measurement (`benchmarks/first_use_compile_aot.py`, record
`benchmarks/results/first_use_compile/aot_vm_records.jsonl`): Triton 3.6.0 compiling a kernel of
the same structure at the same shapes for sm90 ahead of time on this project's VM (Intel Xeon),
the median CPU seconds of the 16 BLOCK_M 64 compiles (the prefill keys; 0.43-0.68 s). It leaves
out what the JIT adds around the compile (its launcher, the cache, loading the module), so it is
a lower bound of the stall; the rows' host CPUs are not known. No GPU was lent to measure the
JIT path on H200 (`benchmarks/first_use_compile.py` does, when one is).
"""

from __future__ import annotations

from epsim.validate.silicon.agg_recipes import HARNESS_WARMUP_FROM
from epsim.validate.silicon.inferencex import moment
from epsim.validate.silicon.resolve import _MEASURED

# one fused-MoE kernel's compile at a new prefill key, CPU s (measured: module doc)
COMPILE_S = 0.46
SYSTEMS = ("h200_sxm",)           # the Triton fused MoE's GPUs among the rows (Hopper)


def first_use_compile(row) -> dict | None:
    """The `deployment.first_use_compile` of an InferenceX agg row whose server runs SGLang's
    Triton fused MoE (DeepSeek-R1 block FP8 on H200), else None."""
    if (row.backend != "sglang" or row.mode != "agg" or row.system not in SYSTEMS
            or row.gemm_quant_mode != "fp8"
            or "deepseek" not in row.model_path.lower() or row.concurrency is None):
        return None
    match = _MEASURED.search(row.source)
    warm = not (match and moment(match.group(1)) < moment(HARNESS_WARMUP_FROM))
    clients = row.concurrency
    return {"compile_s": COMPILE_S, "warmup_batches": [clients, clients] if warm else []}


def note(first_use: dict) -> str:
    """The assumption a row's plan states for the term."""
    warmup = (f"after a warm-up of {len(first_use['warmup_batches'])} prefill batches of "
              f"{first_use['warmup_batches'][0]} copies of the run's first prompt"
              if first_use["warmup_batches"] else "with no warm-up")
    return (f"first-use compiles: SGLang's Triton fused MoE compiles {first_use['compile_s']:.2f} s "
            f"a kernel (Triton 3.6 for sm90, measured on our VM: our record) on each prefill "
            f"batch's first new shape key, "
            f"{warmup}, a fresh Triton cache")
