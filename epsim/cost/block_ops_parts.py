"""Which of the MoE block's own ops (`epsim.cost.block_ops`) a step adds: those the experts'
kernels and the experts' fit do not already hold. An experts fit on aiconfigurator's fused MoE
tables holds the permute and the top-k weighting (`fused_moe_fit`), and on the fused Triton MoE
the top-k too (`topk_in_fit`); low-latency kernels do the permute and weighting themselves."""

from __future__ import annotations

from pathlib import PurePosixPath

from epsim.cost.block_ops import GATE
from epsim.cost.block_ops import PARTS as BLOCK_OPS_PARTS
from epsim.profile import Component

# aiconfigurator's table of SGLang's fused MoE call (`fused_moe_fit`)
FUSED_MOE_TABLE = "moe_perf.parquet"


def block_ops_parts(dedup: str, one_gpu: bool, fused: bool = False,
                    topk: bool = False) -> tuple[str, ...]:
    """The block ops a step adds (docs/model.md, "The block's own ops"): the router
    always; the permute and the top-k weighting unless the experts' kernels do them --
    low-latency (`pair`-copy) kernels write each copy into its expert's rows and weight the
    top-k outputs inside their combine, and an experts fit on the fused MoE call
    (`fused`, `fused_moe_fit`) holds SGLang's `moe_align_block_size` and `moe_sum_reduce`
    in its times. At EP 1 no backend runs: all three, unless `fused`. Where the fit timed a
    top-k of its own (`topk`, `topk_in_fit`) the router is its gate GEMM alone."""
    if topk:
        return (GATE,)
    return ("router",) if fused or (dedup == "pair" and not one_gpu) else BLOCK_OPS_PARTS


def fused_moe_fit(component: Component | None) -> bool:
    """Whether an experts component was fitted on aiconfigurator's `moe_perf` tables
    (`FUSED_MOE_TABLE`): its collector times SGLang's whole fused MoE call -- `select_experts`'
    top-k, `fused_moe` (`moe_align_block_size`, both GEMMs, the activation and its quantisation,
    `moe_sum_reduce` of the top-k outputs) -- so the permute and top-k weighting of
    `epsim.cost.block_ops` are in its times already (aiconfigurator's
    collector/sglang/collect_moe.py `run_op`). The router's gate GEMM is not (the step adds it;
    its fused top-k, a few µs, is then counted twice)."""
    return component is not None and any(PurePosixPath(t).name == FUSED_MOE_TABLE
                                         for t in component.tables)


def topk_in_fit(fused: bool, reread_gbps: float) -> bool:
    """Whether an experts fit on aiconfigurator's `moe_perf` tables (`fused`) timed a top-k of
    its own: the fused Triton MoE's rows (every BF16 row, and Hopper's quantised ones; no
    weight re-read term, `reread_gbps` 0) are timed over its collector's whole `run_op` --
    `select_experts` on the row's logits, three copies of its output, then `fused_moe`
    (collector/sglang/collect_moe.py) -- so the step's router adds its gate GEMM alone, the
    served top-k (`moe_fused_gate` and the ids' postprocess) standing in the fit's (the copies
    stay in it, uncounted). FlashInfer's TRT-LLM MoE fits on Blackwell (a re-read rate) keep
    the whole router (its NVFP4 rows are handed top-k ids computed before the timed call)."""
    return fused and not reread_gbps
