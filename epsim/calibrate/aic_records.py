"""aiconfigurator-core's op tables as measurement records: one converter per table.

Each row becomes one `epsim.records.MeasurementRecord` (times in µs: AIC's `latency` columns
are milliseconds, its DeepEP columns microseconds) whose provenance names the system, framework
and version, the container image where the table's `collection_meta.yaml` gives one, the
package version, the table file and `source: aiconfigurator`. Records go to one of two sets:

  fit      what epsim's existing cost models fit (docs/aic_tables.md says which rows):
           BF16 grouped GEMM `experts` (SGLang's fused Triton MoE, balanced routing, one GPU
           holding every expert), `dense_mlp` composed of the two BF16 GEMMs of a SwiGLU MLP,
           GQA `attention_decode` and `attention_prefill` (BF16 KV, no window, the kernel
           SGLang runs on that GPU),
           DeepEP low-latency and normal `dispatch` / `combine` (EP 8, one node), NCCL's
           all-reduce and SGLang's custom all-reduce captured in a CUDA graph (the all-reduce
           model, `epsim.cost.allreduce`), NCCL's all-gather (the `none` backend's dispatch)
  pending  imported for the models still to come, written apart from the fit set (its `experts`
           and `allreduce` records are kinds existing models read: fitting that file as it is
           would pool other kernels and timings into their components):
           every GEMM (`gemm`, all dtypes), quantised MoE (`quant_experts`), BF16 MoE of other
           kernels, EP > 1 or MoE-TP > 1 (`experts`, intermediate size split), MLA (`mla_prefill`,
           `mla_decode`, whole-module `wideep_*` rows too), MLA's BMMs (`mla_bmm`), activation
           quantisation (`quantize`), SGLang's custom all-reduce timed eagerly (`allreduce`)
What no converter can represent (power-law routed MoE rows: the table has rank 0's time but
not its per-expert counts) is left out and counted in `notes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from epsim.calibrate.aic_tables import (AicSource, AicTable, _newest_not_after, package_version,
                                        zoo_gpu)
from epsim.cost.experts import expert_projections
from epsim.records import MeasurementRecord, Provenance
from epsim.spec.quant import WEIGHT_FORMATS, weight_bytes_per_element
from epsim.zoo import get_hardware

MS_TO_US = 1e3
SOURCE = "aiconfigurator"
TOKEN_DIM = 4096        # AIC's all-reduce collector shapes a message as [size / 4096, 4096]
DEEPEP_RANKS_PER_NODE = 8                 # AIC counts a DeepEP table's node as 8 ranks
DEEPEP_NORMAL_SMS = 20                    # DeepEP's default `Buffer.num_sms` (what SGLang runs)
# SwiGLU dense MLPs composed from two BF16 GEMM rows: hidden sizes x intermediate sizes whose
# GEMMs (gate+up [2I, H], down [H, I]) the gemm grid holds
DENSE_HIDDEN = (2048, 4096, 5120, 7168)
DENSE_INTER = (768, 1536, 2048, 3072, 6144, 8192)
# the GQA attention kernel SGLang runs by default (Hopper: FlashAttention-3; Blackwell: TRT-LLM)
ATTENTION_KERNEL = {"h100_sxm": "fa3", "h200_sxm": "fa3"}
BLACKWELL_ATTENTION_KERNEL = "trtllm_mha"
# the GQA shapes fitted: head_dim 128 (epsim's flash-kernel model, `epsim.cost.flash`), the query
# and KV heads one GPU holds in the MoE models of the zoo, whole or split by attention TP
ATTENTION_HEAD_DIM = 128
ATTENTION_HEADS = (8, 16, 32, 64, 96, 128)
ATTENTION_KV_HEADS = (1, 2, 4, 8)
FIT_MOE_KERNEL = "sglang_fused_moe_triton"     # the one BF16 MoE kernel on every system
BF16 = ("bfloat16", "float16", "bf16")
# The fit grid: a fit evaluates every record's design row in each of its rounds and starts
# (about a millisecond each), so the dense axes are thinned to powers of 4 -- tokens, GEMM
# rows, sequences, context lengths -- which keep their whole range (what the hold-outs need).
# Rows off the grid are left out of the fit set and counted.
FIT_DECODE_SEQS = (1, 4, 16, 64, 256, 1024)
FIT_PREFILL_SEQS = (1, 4, 16, 64)
# quantised GEMMs and experts fitted (`epsim.cost.quant`): the formats epsim prices, the GEMM
# sizes n and k of the fit grid (linear layers of the zoo's models, 512 to 16384), and the MoE
# kernel SGLang runs for a quantised format on each GPU (Hopper: the fused Triton kernel, the
# one it has; Blackwell: FlashInfer's TRT-LLM MoE, which covers every shape and format)
QUANT_FORMATS = ("fp8", "fp8_block", "nvfp4")
GEMM_FIT_SIZES = (512, 1536, 2048, 4096, 7168, 16384)
QUANT_MOE_KERNEL = {"h100_sxm": FIT_MOE_KERNEL, "h200_sxm": FIT_MOE_KERNEL}
BLACKWELL_QUANT_MOE_KERNEL = "sglang_flashinfer_trtllm_moe"
# Grouped routing in AIC's SGLang MoE collector (`collector/sglang/collect_moe.py` from its
# 0.5.14 upgrade, ai-dynamo/aiconfigurator e23be5a79): a model case with `num_expert_group`
# and `topk_group` is timed through SGLang's own `TopK` with grouped top-k, on the `balanced`
# logits too (`_benchmark_framework_quantized_moe`, on every GPU and kernel), and the only such
# case is DeepSeek-V3/R1's (`collector/cases/models/DeepseekV3ForCausalLM_cases.yaml`: 8 groups,
# 4 kept). Its rows are keyed by shape alone: (hidden, intermediate, experts, top-k) -> (groups,
# groups kept). The 0.5.10 collector routes every case with plain top-k.
GROUPED_ROUTING = {(7168, 2048, 256, 8): (8, 4)}
GROUPED_ROUTING_SINCE = "0.5.14"
# Non-gated experts in AIC's SGLang MoE collector (`collector/sglang/collect_moe.py`,
# `_NON_GATED_MOE_MODEL_PATTERNS`): NVIDIA's Nemotron-3 cases run `ActivationType.Relu2`, an up
# and a down projection (`mlp_hidden_act: relu2` in their configs), not SwiGLU's gate+up and
# down. Their rows are keyed by shape alone: (hidden, intermediate, experts, top-k) of
# Nemotron-3 Nano (2688 x 1856), Super (4096, and its 1024 latent, x 2688) and Ultra (8192,
# and its 2048 latent, x 5120), on the kernel the collector passes the activation to
# (FlashInfer's TRT-LLM MoE, `NON_GATED_KERNELS`): timed as SwiGLU its rows would stream their
# weights above the datasheet HBM rate (b200_sxm 0.5.14: BF16 Ultra at 1-4 tokens 10.6-11.1
# TB/s, NVFP4 Ultra-latent at 1 token 6.7 TB/s as SwiGLU, 4.4 as ReLU²). The fused Triton
# kernel's rows of these shapes stream as SwiGLU at its other shapes' rates (h200_sxm BF16
# Super-latent 3.0-4.0 TB/s, as ReLU² 2.0-2.7): kept SwiGLU
NON_GATED_SHAPES = frozenset({(2688, 1856, 128, 6), (4096, 2688, 512, 22), (1024, 2688, 512, 22),
                              (8192, 5120, 512, 22), (2048, 5120, 512, 22)})
NON_GATED_KERNELS = ("sglang_flashinfer_trtllm_moe",)
# Expert parallelism in AIC's SGLang MoE collector (`_benchmark_framework_quantized_moe`, every
# NVFP4 case): SGLang's `FusedMoE` built as EP rank 0 of `moe_ep_size` holds `E / ep` experts
# and is handed all `num_tokens` tokens with the full router logits, as SGLang's `none` backend
# hands each rank the group's tokens (and AIC's SDK queries `x * attention_dp_size`);
# FlashInfer's TRT-LLM MoE routes them all and computes the pairs of its local experts, its
# tile from `num_tokens x top_k / local experts`. So these rows are the fused kernel at EP > 1
# as it runs (`moe_records`): fitted for these formats on that kernel, EP on the fit grid.
# FP8-block too: its B200 balanced rows at EP 2-256 run long by a cost per input token that
# does not change with EP (17 ns at H 2048 to 62 ns at H 7168, top-8), ~0.85 µs per exiting
# CTA per SM (`epsim.cost.exiting_ctas`); an EP 1 fit has none of it (-35 % at EP 16-64)
EP_FIT_FORMATS = ("nvfp4", "fp8_block")
# Rows AIC re-collected with its rank-0 workload (`collection_meta.yaml` of h100_sxm / h200_sxm
# moe sglang 0.5.14: 3564 Nemotron-3 Super latent rows appended 2026-08-24 at AIC revision
# 1982d8d4; the base rows there are `provenance: legacy`). Its Triton path at EP > 1
# (`collector/sglang/collect_moe.py`, `build_rank0_workloads` since 2026-04, in the 0.5.14
# collector e23be5a79 and since): the kernel gets only rank 0's tokens -- those with a choice
# among its `E / ep` experts (`helper.build_rank0_local_workload`) -- and their remote choices,
# set to -1, are clamped to local expert 0 (`topk_ids.clamp(min=0)`, weight 0): every slot of
# those tokens is computed, the remote ones on expert 0 (`rank0_workload_counts`).
# Keyed (system, framework, version) -> (hidden, intermediate, experts, top-k), Triton only.
RANK0_WORKLOAD_ROWS = {("h100_sxm", "sglang", "0.5.14"): frozenset({(1024, 2688, 512, 22)}),
                       ("h200_sxm", "sglang", "0.5.14"): frozenset({(1024, 2688, 512, 22)})}
RANK0_WORKLOAD_KERNELS = ("sglang_fused_moe_triton",)


def on_grid(value: int, least: int = 1) -> bool:
    """Whether `value` is a power of 4 (1, 4, 16, ...) of at least `least`."""
    return value >= least and value & (value - 1) == 0 and (value.bit_length() - 1) % 2 == 0


@dataclass
class Imported:
    """Records from one source: `fit` (existing models), `pending` (models to come), notes on
    what was left out, and the tables read."""

    source: AicSource
    grid: bool = True             # thin the fit kinds to the fit grid (`on_grid`); False: all rows
    fit: list[MeasurementRecord] = field(default_factory=list)
    pending: list[MeasurementRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tables: list[AicTable] = field(default_factory=list)


def provenance(table: AicTable, gpu: str, device: str) -> Provenance:
    """Every record's provenance: where the table came from, `source: aiconfigurator`."""
    runtime = table.runtime
    extra = {k: v for k, v in (("image", runtime.get("image")),
                               ("image_digest", runtime.get("image_digest")),
                               ("collector_ref", table.meta.get("collector_ref")),
                               ("collected_at", table.meta.get("collected_at"))) if v}
    return Provenance(device=device or table.system, hardware=gpu, source=SOURCE,
                      aic_system=table.system, framework=table.framework,
                      framework_version=str(runtime.get("version") or table.version),
                      package=f"aiconfigurator-core {package_version()}".strip(),
                      table=table.rel, table_sha256=table.sha256, **extra)


def _record(kind: str, prov: Provenance, median_us: float, **fields) -> MeasurementRecord:
    fields.setdefault("backend", "local")
    fields.setdefault("ep_size", 1)
    fields.setdefault("num_tokens_per_rank", 0)
    fields.setdefault("hidden_size", 0)
    fields.setdefault("timing", "device")
    return MeasurementRecord(kind=kind, median_us=median_us, provenance=prov, **fields)


def moe_activation(hidden_size: int, inter_size: int, num_experts: int, top_k: int,
                   kernel: str) -> str:
    """The expert activation AIC's collector ran a `moe_perf` row with: "relu2" for a
    `NON_GATED_SHAPES` shape on a `NON_GATED_KERNELS` kernel, else "" (SwiGLU). A record keeps
    it in `extra.activation`."""
    shape = (hidden_size, inter_size, num_experts, top_k)
    return "relu2" if shape in NON_GATED_SHAPES and kernel in NON_GATED_KERNELS else ""


def faster_than_hbm(system: str, active_experts: float, hidden_size: int, inter_size: int,
                    weight_dtype: str, median_us: float, activation: str = "") -> bool:
    """Whether a MoE row's time is shorter than streaming its active experts' weights once at
    the GPU's datasheet HBM bandwidth (`3 H I` weights each, `2 H I` non-gated
    (`epsim.cost.experts.expert_projections`), at `weight_dtype`'s bytes): a row
    no GPU can produce, as the layout its table describes. Such rows are left out (AIC's
    h200_sxm fp8_block DeepSeek-V3 shape at EP 1 repeats its EP 2 times, 8 TB/s; its DeepEP
    MoE prefill rows at EP 2 and 4 run 128 experts' 5.6 GB in 0.4 ms)."""
    gpu = zoo_gpu(system)
    if not gpu or weight_dtype not in WEIGHT_FORMATS:
        return False
    matrices = expert_projections(activation) + 1.0
    weights = (active_experts * matrices * hidden_size * inter_size
               * weight_bytes_per_element(weight_dtype))
    return median_us < weights / get_hardware(gpu).hbm_gbps * 1e-3


def _balanced_choices(num_tokens: int, num_experts: int, top_k: int) -> np.ndarray:
    """[tokens, top_k] the experts AIC's `balanced_logits` marks for each token: choice i of
    token t is expert `(t + i s) mod E` when T >= s, else `floor(t s / T + i s) mod E`, with
    stride `s = ceil(E / k)`."""
    stride = math.ceil(num_experts / top_k)
    t = np.arange(num_tokens, dtype=np.float64)[:, None]
    i = np.arange(top_k, dtype=np.float64)[None, :]
    if num_tokens >= stride:
        chosen = (t + i * stride) % num_experts
    else:
        chosen = np.floor(t * stride / num_tokens + i * stride) % num_experts
    return chosen.astype(np.int64)


def balanced_counts(num_tokens: int, num_experts: int, top_k: int) -> np.ndarray:
    """[experts] pairs per expert under AIC's `balanced` routing (its collectors' helper
    `balanced_logits`, plain top-k: the marked experts, `_balanced_choices`); deterministic."""
    chosen = _balanced_choices(num_tokens, num_experts, top_k)
    return np.bincount(chosen.ravel(), minlength=num_experts).astype(np.float64)


@lru_cache(maxsize=256)
def _grouped_counts(num_tokens: int, num_experts: int, top_k: int, groups: int,
                    topk_group: int) -> tuple[float, ...]:
    marked = _balanced_choices(num_tokens, num_experts, top_k)
    logits = np.zeros((num_tokens, num_experts), dtype=np.float32)
    np.put_along_axis(logits, marked, 1.0, axis=1)
    per_group = logits.reshape(num_tokens, groups, num_experts // groups)
    score = np.sort(per_group, axis=2)[:, :, -2:].sum(axis=2)               # [tokens, groups]
    kept = np.argsort(-score, axis=1, kind="stable")[:, :topk_group]
    allowed = np.zeros((num_tokens, groups), dtype=bool)
    np.put_along_axis(allowed, kept, True, axis=1)
    masked = np.where(np.repeat(allowed, num_experts // groups, axis=1), logits, -1.0)
    chosen = np.argsort(-masked, axis=1, kind="stable")[:, :top_k]
    return tuple(np.bincount(chosen.ravel(), minlength=num_experts).astype(np.float64))


def grouped_balanced_counts(num_tokens: int, num_experts: int, top_k: int, groups: int,
                            topk_group: int) -> np.ndarray:
    """[experts] pairs per expert that grouped top-k makes of AIC's `balanced_logits` (what its
    SGLang collector from 0.5.14 runs for a grouped-routing model, `GROUPED_ROUTING`): each of
    `groups` equal groups scored by the sum of its top two logits, the best `topk_group` groups
    kept, the top `top_k` experts inside them, ties to the lowest index both times (as the
    tables' times bear out: benchmarks/aic_grouped_routing.py). The logits mark one expert per
    group and leave the rest equal, so the lowest groups win and the lowest-index unmarked
    experts of them fill the choices the marked ones leave. Deterministic; cached per shape."""
    return np.array(_grouped_counts(num_tokens, num_experts, top_k, groups, topk_group))


def collector_counts(table: AicTable, num_tokens: int, hidden_size: int, inter_size: int,
                     num_experts: int, top_k: int) -> tuple[np.ndarray, dict]:
    """([experts] pairs per expert, skew) of a `balanced` `moe_perf` row as the collector
    routed it: grouped top-k for a grouped-routing model's shape in a table of the collector
    that routes it so (`GROUPED_ROUTING`, SGLang from `GROUPED_ROUTING_SINCE`), else the plain
    balanced counts."""
    groups = GROUPED_ROUTING.get((hidden_size, inter_size, num_experts, top_k))
    if (groups and table.framework == "sglang"
            and _newest_not_after([GROUPED_ROUTING_SINCE], table.version)):
        return (grouped_balanced_counts(num_tokens, num_experts, top_k, *groups),
                {"kind": "balanced", "routing": "grouped", "num_expert_group": groups[0],
                 "topk_group": groups[1]})
    return balanced_counts(num_tokens, num_experts, top_k), {"kind": "balanced"}


def rank0_workload_counts(num_tokens: int, num_experts: int, top_k: int,
                          ep: int) -> tuple[np.ndarray, int]:
    """([ep, E / ep] rows per local expert, rank 0's tokens) of a row timed on AIC's rank-0
    workload (`RANK0_WORKLOAD_ROWS`): rank 0's row holds its local pairs plus every remote slot
    of its tokens on expert 0 (the collector clamps -1 to 0); the other ranks' rows their
    local pairs, as `balanced_counts` (not timed)."""
    local = num_experts // ep
    chosen = _balanced_choices(num_tokens, num_experts, top_k)             # [tokens, k]
    mine = (chosen < local).any(axis=1)                                    # rank 0's tokens
    counts = balanced_counts(num_tokens, num_experts, top_k).reshape(ep, local)
    slots = chosen[mine]
    rank0 = np.bincount(np.where(slots < local, slots, 0).ravel(), minlength=local)
    counts[0] = rank0.astype(np.float64)
    return counts, int(mine.sum())


# -- MoE ------------------------------------------------------------------------------------------
def moe_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`moe_perf`: rank 0 of an EP group runs its `E / ep` local experts on the pairs the
    group's `num_tokens` tokens route to them (AIC's collector), intermediate split by MoE-TP."""
    skipped = off = implausible = 0
    for row in frame.itertuples(index=False):
        if row.distribution != "balanced":
            skipped += 1
            continue
        ep, tp, e, k = int(row.moe_ep_size), int(row.moe_tp_size), int(row.num_experts), int(row.topk)
        tokens = int(row.num_tokens)
        counts, skew = collector_counts(table, tokens, int(row.hidden_size), int(row.inter_size),
                                        e, k)
        counts = counts.reshape(ep, e // ep)                                  # [ranks, local]
        kernel_tokens = tokens           # the tokens the measured rank's kernel is given
        if (ep > 1 and str(row.kernel_source) in RANK0_WORKLOAD_KERNELS
                and (int(row.hidden_size), int(row.inter_size), e, k)
                in RANK0_WORKLOAD_ROWS.get((table.system, table.framework, table.version), ())):
            counts, kernel_tokens = rank0_workload_counts(tokens, e, k, ep)
        bf16 = row.moe_dtype in BF16
        fmt = "bf16" if bf16 else str(row.moe_dtype)
        activation = moe_activation(int(row.hidden_size), int(row.inter_size), e, k,
                                    str(row.kernel_source))
        if faster_than_hbm(table.system, float((counts[0] > 0).sum()), int(row.hidden_size),
                           int(row.inter_size) // tp, fmt, float(row.latency) * MS_TO_US,
                           activation):
            implausible += 1
            continue
        record = _record(
            "experts" if bf16 else "quant_experts", prov, float(row.latency) * MS_TO_US,
            ep_size=ep, num_tokens_per_rank=-(-tokens // ep), hidden_size=int(row.hidden_size),
            moe_intermediate_size=int(row.inter_size) // tp, num_experts=e,
            num_local_experts=e // ep, top_k=k, moe_tp_size=tp,
            weight_dtype=fmt, skew=skew,
            local_expert_tokens=counts.tolist(), expert_tokens_per_rank=counts.sum(axis=1).tolist(),
            extra={"measured_rank": 0, "num_tokens": tokens, "inter_size": int(row.inter_size),
                   "kernel": str(row.kernel_source), "rows": float(counts[0].sum()),
                   **({"activation": activation} if activation else {}),
                   **({"kernel_tokens": kernel_tokens} if kernel_tokens != tokens else {})})
        # fitted: one GPU holding every expert. With EP > 1 AIC's collector masks the remote
        # slots of rank 0's tokens (-1), and the fused Triton path still runs its alignment,
        # activation and sum over all `T x k` slots: work the BF16 grouped-GEMM model has no
        # term for; the quantised one prices it (`epsim.cost.quant.remote_slot_bytes`), and
        # their EP and MoE-TP rows are judged (benchmarks/aic_holdout.py). FlashInfer's
        # TRT-LLM MoE at EP > 1 is fitted for `EP_FIT_FORMATS` (its per-token work on the
        # tokens routed elsewhere: `epsim.cost.quant.remote_tokens`), EP 4, 16, 64, 256
        kernel = FIT_MOE_KERNEL if bf16 else QUANT_MOE_KERNEL.get(table.system,
                                                                 BLACKWELL_QUANT_MOE_KERNEL)
        fit = (tp == 1 and row.kernel_source == kernel
               and (bf16 or row.moe_dtype in QUANT_FORMATS)
               and (ep == 1 or (kernel == BLACKWELL_QUANT_MOE_KERNEL
                                and row.moe_dtype in EP_FIT_FORMATS and on_grid(ep))))
        if fit and out.grid and not on_grid(tokens):
            off += 1
            continue
        (out.fit if fit else out.pending).append(record)
    if off:
        out.notes.append(f"{table.rel}: {off} fit-kind rows off the fit grid (tokens not a power "
                         f"of 4) not imported")
    if skipped:
        out.notes.append(f"{table.rel}: {skipped} power-law rows not imported (rank 0's per-expert "
                         f"counts are not in the table)")
    if implausible:
        out.notes.append(f"{table.rel}: {implausible} balanced rows faster than streaming their "
                         f"active experts' weights at the datasheet HBM rate not imported")


# -- GEMM -----------------------------------------------------------------------------------------
def gemm_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`gemm_perf`: every row a pending `gemm`; BF16 pairs make `dense_mlp` fit records: a
    SwiGLU MLP of width I on hidden H is its gate+up GEMM `[m, H] x [H, 2I]` then its down GEMM
    `[m, I] x [I, H]` (the SwiGLU between them, a small elementwise kernel, is not in the
    table: a stated part of the fit's base time missing), at rows m on the fit grid."""
    bf16 = {}
    for row in frame.itertuples(index=False):
        m, n, k = int(row.m), int(row.n), int(row.k)
        dtype = "bf16" if row.gemm_dtype in BF16 else str(row.gemm_dtype)
        us = float(row.latency) * MS_TO_US
        fit = (dtype == "bf16" or dtype in QUANT_FORMATS) and n in GEMM_FIT_SIZES \
            and k in GEMM_FIT_SIZES and (on_grid(m) or not out.grid)
        (out.fit if fit else out.pending).append(
            _record("gemm", prov, us, num_tokens_per_rank=m, hidden_size=k, intermediate_size=n,
                    weight_dtype=dtype, extra={"kernel": str(row.kernel_source)}))
        if dtype == "bf16":
            bf16[(m, n, k)] = (us, str(row.kernel_source))
    for h in DENSE_HIDDEN:
        for i in DENSE_INTER:
            for m in sorted({m for (m, n, k) in bf16
                             if n == 2 * i and k == h and (on_grid(m) or not out.grid)}):
                up, down = bf16.get((m, 2 * i, h)), bf16.get((m, h, i))
                if up is None or down is None:
                    continue
                out.fit.append(_record(
                    "dense_mlp", prov, up[0] + down[0], num_tokens_per_rank=m, hidden_size=h,
                    intermediate_size=i, weight_dtype="bf16",
                    extra={"kernel": up[1], "composed_from": [[m, 2 * i, h], [m, h, i]],
                           "gemm_us": [up[0], down[0]],
                           "note": "two GEMM rows timed apart; the SwiGLU kernel not included"}))


# -- attention ------------------------------------------------------------------------------------
def attention_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`{context,generation}_attention_perf`: GQA over `num_heads` query and
    `num_key_value_heads` KV heads on one GPU. Fitted: BF16 KV, full attention (window 0), the
    kernel SGLang runs on the GPU (`ATTENTION_KERNEL`), the GQA shapes of `ATTENTION_HEADS` x
    `ATTENTION_KV_HEADS` at head_dim 128, on the fit grid (`FIT_*_SEQS`, contexts a power of
    4 from 16); other rows are left out (counted)."""
    kernel = ATTENTION_KERNEL.get(table.system, BLACKWELL_ATTENTION_KERNEL)
    decode = table.name.startswith("generation")
    left = 0
    for row in frame.itertuples(index=False):
        heads, kv = int(row.num_heads), int(row.num_key_value_heads)
        if (row.kernel_source != kernel or row.kv_cache_dtype not in BF16
                or row.attn_dtype not in BF16 or int(row.window_size) != 0
                or int(row.head_dim) != ATTENTION_HEAD_DIM or heads not in ATTENTION_HEADS
                or kv not in ATTENTION_KV_HEADS or heads <= kv):
            left += 1
            continue
        context = int(row.isl) + int(row.step) if decode else int(row.isl)
        seqs = int(row.batch_size)
        if out.grid and (seqs not in (FIT_DECODE_SEQS if decode else FIT_PREFILL_SEQS)
                         or not on_grid(context, 16)):
            left += 1
            continue
        out.fit.append(_record(
            "attention_decode" if decode else "attention_prefill", prov,
            float(row.latency) * MS_TO_US, num_tokens_per_rank=seqs if decode else seqs * context,
            num_attention_heads=heads, num_kv_heads=kv, head_dim=int(row.head_dim),
            num_seqs=seqs, context_len=context, kv_cache_dtype="bf16",
            extra={"kernel": str(row.kernel_source)}))
    if left:
        out.notes.append(f"{table.rel}: {left} rows not imported (FP8 KV or attention, sliding "
                         f"windows, kernels other than {kernel}, other head shapes, off the "
                         f"fit grid)")


def quantize_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`scale_matrix_perf`, `computescale_perf`: activation quantisation of `[m, k]`; rows timed
    at 0 (below the timer) are left out."""
    zero = 0
    for row in frame.itertuples(index=False):
        if not float(row.latency) > 0:
            zero += 1
            continue
        out.pending.append(_record(
            "quantize", prov, float(row.latency) * MS_TO_US, num_tokens_per_rank=int(row.m),
            hidden_size=int(row.k), weight_dtype=str(row.quant_dtype),
            extra={"op": str(row.op_name), "kernel": str(row.kernel_source)}))
    if zero:
        out.notes.append(f"{table.rel}: {zero} rows with latency 0 not imported")
