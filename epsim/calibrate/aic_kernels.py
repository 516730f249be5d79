"""aiconfigurator-core's MLA, MLA-BMM and DeepEP-MoE tables as measurement records.

  MLA kernel   `{context,generation}_mla_perf`: SGLang's MLA attention backend alone on one GPU
               (Hopper: FlashAttention-3's MLA path, absorbed form in both phases as AIC's
               collector sets it up; Blackwell: TRT-LLM MLA, per-head prefill), DeepSeek-V3's
               sizes, `num_heads` the heads the GPU holds (`num_heads / tp_size` of the model's
               64 or 128), BF16 or FP8 cache -> `mla_decode`, `mla_prefill` (`scope: kernel`),
               fitted on the grid of the GQA kernels (sequences, contexts a power of 4)
  MLA module   `wideep_{context,generation}_mla_perf`: the whole attention module with its
               FP8-block projections -> `scope: module`, pending (judged as the sum of parts)
  MLA BMMs     `mla_bmm_perf`: the absorbed `W_UK` (`mla_gen_pre`) and `W_UV` (`mla_gen_post`)
               BMMs per head, BF16 or FP8 (with its per-tensor activation quantisation) ->
               `mla_bmm`, fitted at tokens a power of 4
  DeepEP MoE   `wideep_{context,generation}_moe_perf`: SGLang's DeepEP MoE runner (DeepGEMM,
               FP8-block experts, DeepSeek-V3's shape) on rank 0 of an EP group, its hidden
               states arriving FP8 from the dispatch. Uniform rows give every local expert
               `T k / E` rows (AIC's collector: `num_tokens` is the group's batch) ->
               `quant_experts` with those counts, fitted (`deepep/experts_fp8_block/...`:
               decode = the low-latency layout's masked GEMM in a CUDA graph, prefill = the
               normal layout's contiguous GEMM, CUDA events around one eager call); power-law
               rows carry no counts -> pending
"""

from __future__ import annotations

from epsim.calibrate.aic_records import (BF16, FIT_DECODE_SEQS, FIT_PREFILL_SEQS, MS_TO_US,
                                         Imported, _record, faster_than_hbm, on_grid)
from epsim.calibrate.aic_tables import AicTable
from epsim.records import Provenance

KV_DTYPES = {"fp8": "fp8_e4m3"}            # AIC's KV dtype names -> SGLang's --kv-cache-dtype


def _dtype(value) -> str:
    """A table's dtype as epsim names weight and KV formats (`bfloat16` -> `bf16`)."""
    return "bf16" if value in BF16 else str(value)


def mla_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`{context,generation}_mla_perf` (the kernel: fitted on the grid) and
    `wideep_*_mla_perf` (the whole module: pending) as `mla_prefill` / `mla_decode`."""
    decode = "generation" in table.name
    scope = "module" if table.name.startswith("wideep") else "kernel"
    off = 0
    for row in frame.itertuples(index=False):
        context = int(row.isl) + int(row.step) if decode else int(row.isl)
        seqs = int(row.batch_size)
        extra = {"kernel": str(row.kernel_source), "scope": scope}
        for name in ("model", "gemm_type"):
            if hasattr(row, name):
                extra[name] = str(getattr(row, name))
        record = _record(
            "mla_decode" if decode else "mla_prefill", prov, float(row.latency) * MS_TO_US,
            num_tokens_per_rank=seqs if decode else seqs * context,
            num_attention_heads=int(row.num_heads), num_seqs=seqs, context_len=context,
            tp_size=int(row.tp_size), weight_dtype=_dtype(row.mla_dtype),
            kv_cache_dtype=KV_DTYPES.get(_dtype(row.kv_cache_dtype), _dtype(row.kv_cache_dtype)),
            extra=extra)
        if scope == "module":
            out.pending.append(record)
        elif out.grid and (seqs not in (FIT_DECODE_SEQS if decode else FIT_PREFILL_SEQS)
                           or not on_grid(context, 16)):
            off += 1
            out.pending.append(record)
        else:
            out.fit.append(record)
    if off:
        out.notes.append(f"{table.rel}: {off} kernel rows off the fit grid kept pending")


def mla_bmm_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`mla_bmm_perf`: the absorbed-weight BMMs before (`mla_gen_pre`) and after the kernel;
    fitted at tokens a power of 4, the rest pending."""
    for row in frame.itertuples(index=False):
        tokens = int(row.num_tokens)
        record = _record(
            "mla_bmm", prov, float(row.latency) * MS_TO_US, num_tokens_per_rank=tokens,
            num_attention_heads=int(row.num_heads), weight_dtype=_dtype(row.bmm_dtype),
            extra={"op": str(row.op_name), "kernel": str(row.kernel_source)})
        (out.fit if on_grid(tokens) or not out.grid else out.pending).append(record)


def wideep_moe_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`wideep_{context,generation}_moe_perf`: SGLang's DeepEP MoE runner on rank 0 of an EP
    group. Uniform rows: each local expert gets `num_tokens x top_k / num_experts` rows (the
    collector's `tokens_per_local_expert`; none below one row per expert) -> fitted
    `quant_experts`; power-law rows (routing by distribution name only) -> pending."""
    decode = "generation" in table.name
    below = implausible = 0
    for row in frame.itertuples(index=False):
        ep, e, k = int(row.moe_ep_size), int(row.num_experts), int(row.topk)
        tokens, tp = int(row.num_tokens), int(row.moe_tp_size)
        fields = dict(ep_size=ep, num_tokens_per_rank=-(-tokens // ep),
                      hidden_size=int(row.hidden_size), moe_intermediate_size=int(row.inter_size) // tp,
                      num_experts=e, num_local_experts=e // ep, top_k=k, moe_tp_size=tp,
                      weight_dtype=_dtype(row.moe_dtype), skew={"kind": str(row.distribution)})
        extra = {"kernel": str(row.kernel_source), "phase": str(row.op_name), "num_tokens": tokens}
        us = float(row.latency) * MS_TO_US
        per_expert = tokens * k // e
        if row.distribution != "uniform" or per_expert < 1:
            below += row.distribution == "uniform"
            out.pending.append(_record("quant_experts", prov, us,
                                       extra={**extra, "counts": "not in the table"}, **fields))
            continue
        if faster_than_hbm(table.system, e // ep, int(row.hidden_size), int(row.inter_size) // tp,
                           _dtype(row.moe_dtype), us):
            implausible += 1
            continue
        counts = [[float(per_expert)] * (e // ep)] * ep            # [ranks, local experts]
        out.fit.append(_record(
            "quant_experts", prov, us, backend="deepep",
            mode="graph/low_latency" if decode else "normal", local_expert_tokens=counts,
            expert_tokens_per_rank=[float(per_expert * (e // ep))] * ep,
            extra={**extra, "measured_rank": 0, "rows": float(per_expert * (e // ep)),
                   "timing_note": "decode: CUDA-graph replays; prefill: CUDA events around "
                                  "one eager call"}, **fields))
    if below:
        out.notes.append(f"{table.rel}: {below} uniform rows below one row per expert kept "
                         f"pending (the collector's layout for them is not reconstructed)")
    if implausible:
        out.notes.append(f"{table.rel}: {implausible} uniform rows faster than streaming rank 0's "
                         f"experts' weights at the datasheet HBM rate not imported")
