"""Evaluate the quantised-GEMM, quantised-experts and MLA components on a MeasurementRecord
(the kinds of the field's op tables, `epsim.calibrate.aic`): the fitter's design rows and the
validator's predictions, from the models the simulator prices with (`epsim.cost.quant`,
`epsim.cost.mla`).

  gemm           `num_tokens_per_rank` rows m, `hidden_size` k, `intermediate_size` n, weights in
                 `weight_dtype` (`any/gemm_<format>/graph`)
  mla_bmm        MLA's absorbed BMM per head (`extra.op`: `mla_gen_pre` [T, nope] x [nope, kv_lora],
                 `mla_gen_post` [T, kv_lora] x [kv_lora, v]) over `num_attention_heads` heads
                 (`any/mla_bmm_<format>/graph`, `epsim.cost.mla_bmm`; DeepSeek's sizes, which
                 the tables time)
  quant_experts  the grouped GEMM of quantised experts, `local_expert_tokens` per local expert
                 (`any/experts_<format>/graph`; DeepEP's MoE runner: `deepep/experts_<format>/...`
                 with the kernel mode of `mode`, its hidden states arriving quantised)
  mla_decode, mla_prefill   the MLA kernel (`extra.scope` "kernel") of `num_seqs` sequences of
                 `context_len`, `num_attention_heads` heads on the GPU, its cache at
                 `kv_cache_dtype` (`any/mla_decode|prefill_<bf16|fp8>/graph`); a whole-module record
                 (`scope` "module") is no one component
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from epsim.cost.exiting_ctas import EXIT_FORMATS, exiting_ctas_per_sm
from epsim.cost.experts import num_sms, record_projections, row_tiles
from epsim.cost.mla import (DEEPSEEK_MLA, MLA_PREFILL_TERMS, MLA_TERMS, absorbed_form,
                            absorbed_prefill, mla_defaults, mla_kernel_features, per_head_form,
                            prefill_kernel_work, transferred)
from epsim.cost.mla_l2 import fold_l2
from epsim.cost.mla_ragged import ragged
from epsim.cost.mla_bmm import BMM_TERMS, bmm_defaults, bmm_features, bmm_work
from epsim.cost.mla_decode import (MLA_DEQUANT_TERMS, MLA_PREFILL_DEQUANT_TERMS, DecodeLaunch,
                                   decode_block_heads, decode_dequantises,
                                   decode_features, decode_kernel_work, dequant_frac,
                                   dequant_sm_us, kernel_form, math_dtype)
from epsim.cost.collector_burst import RAMP_MEASURED_GPUS, burst_factor, burst_share
from epsim.cost.dense_gemm import (collector_in_l2, dense_gemm_defaults, gemm_features, gemm_terms,
                                   gemm_work, math_columns)
from epsim.cost.fallback_stream import (FALLBACK_STREAM_FORMATS, FALLBACK_STREAM_PARAMS,
                                        partial_tile_kb)
from epsim.cost.quant import (EXPERT_FALLBACK_TERMS, EXPERT_FEED_TERMS, EXPERT_QUANT_TERMS,
                              EXPERT_REREAD_FALLBACK_TERMS, EXPERT_REREAD_TERMS,
                              SM_STREAM_FORMATS, TRITON_MOE_GPUS, check_format, experts_quant_features,
                              gemm_defaults, layout_kb, quant_expert_gemm, remote_slot_bytes,
                              remote_token_weight, remote_tokens, trtllm_gemm, trtllm_tile)
from epsim.cost.masked_runner import masked_gemm, masked_rows
from epsim.cost.normal_runner import (EXPERT_LAYOUT_TERMS, contiguous_gemm, eager_floor,
                                      unaligned_blocks)
from epsim.cost.rereads import reread_kb
from epsim.errors import RecordError, SpecError
from epsim.profile import (GRAPH, Profile, component_key, decode_kv_kind, experts_mode_path,
                           format_kind, kv_kind)
from epsim.records import MeasurementRecord
from epsim.spec.quant import kv_bytes_per_element
from epsim.zoo import get_hardware, hardware_names

KERNEL_KINDS = ("gemm", "mla_bmm", "quant_experts", "mla_decode", "mla_prefill")
# MLA's absorbed BMMs: op -> (n, k) of each head's GEMM, DeepSeek's sizes
BMM_SHAPES = {"mla_gen_pre": (DEEPSEEK_MLA["kv_lora_rank"], DEEPSEEK_MLA["qk_nope_head_dim"]),
              "mla_gen_post": (DEEPSEEK_MLA["v_head_dim"], DEEPSEEK_MLA["kv_lora_rank"])}


class KernelRow(NamedTuple):
    """A record's component, coefficient names, `[terms]` design row and current coefficients."""

    component: str
    coef_names: tuple[str, ...]
    row: np.ndarray
    coefficients: np.ndarray


def _hardware(record: MeasurementRecord, profile: Profile):
    gpu = record.provenance.hardware or profile.hardware
    if gpu not in hardware_names():
        raise RecordError(f"provenance.hardware ({gpu!r}) must be one of {hardware_names()}")
    return get_hardware(gpu)


def _format(record: MeasurementRecord) -> str:
    try:
        return check_format(record.weight_dtype or "bf16")
    except SpecError:
        raise RecordError(f"weight_dtype ({record.weight_dtype!r}) must be a weight format "
                          f"epsim prices for a {record.kind} record") from None


def _bmm_row(record: MeasurementRecord, profile: Profile):
    hw, fmt = _hardware(record, profile), _format(record)
    shape = BMM_SHAPES.get(record.extra.get("op"))
    if shape is None or not record.num_attention_heads:
        raise RecordError(f"extra.op ({record.extra.get('op')!r}) must be one of "
                          f"{list(BMM_SHAPES)} and num_attention_heads > 0 for an mla_bmm record")
    (n, k), kind = shape, format_kind(record.kind, fmt)
    params = profile.params("any", kind, GRAPH, defaults=bmm_defaults())
    work = bmm_work(np.array([float(record.num_tokens_per_rank)]), n, k,
                    record.num_attention_heads, fmt)
    return KernelRow(component_key("any", kind, GRAPH), BMM_TERMS.coef_names,
                     bmm_features(work, params, hw, fmt)[0], BMM_TERMS.coefficients(params))


def _op_table(record: MeasurementRecord) -> bool:
    """Whether a record is an imported op-table row (its provenance names the table's system,
    `aic_system`), timed in that collector's burst (`epsim.cost.collector_burst`)."""
    return bool(getattr(record.provenance, "aic_system", ""))


def _gemm_row(record: MeasurementRecord, profile: Profile):
    hw, fmt = _hardware(record, profile), _format(record)
    n, k = record.intermediate_size, record.hidden_size
    if not (n and k):
        raise RecordError("hidden_size (k) and intermediate_size (n) must be > 0 for a gemm "
                          "record")
    key = component_key("any", format_kind(record.kind, fmt), GRAPH)
    params = profile.params("any", format_kind(record.kind, fmt), GRAPH,
                            defaults=dense_gemm_defaults())
    work = gemm_work(np.array([float(record.num_tokens_per_rank)]), n, k, fmt, num_sms(hw.name),
                     gpu=hw.name)
    terms = gemm_terms(fmt, hw.name)
    row, coef = gemm_features(work, params, hw, fmt)[0], terms.coefficients(params)
    if _op_table(record):                       # timed in the collector's burst: its clock
        math = math_columns(work)
        if hw.name in RAMP_MEASURED_GPUS:       # the measured ramp's capped ratio, held
            row = np.where(math, row * burst_factor(row @ coef), row)
        else:                                   # the capped ratio fitted: `cap_slowdown_ratio`'s
            row[-1] = burst_share(row @ coef) * (row[math] @ coef[math])  # column, compute µs
        if collector_in_l2(record.num_tokens_per_rank, n, k, fmt, hw.l2_bytes)[()]:
            row[-2] = 0.0                       # its copies' operands stay in L2: no DRAM start
    return KernelRow(key, terms.coef_names, row, coef)


def _quant_experts_row(record: MeasurementRecord, profile: Profile):
    hw, fmt = _hardware(record, profile), _format(record)
    if not (record.local_expert_tokens and record.moe_intermediate_size and record.top_k):
        raise RecordError("local_expert_tokens, moe_intermediate_size and top_k must be given "
                          "for a quant_experts record")
    rank = int(record.extra.get("measured_rank", 0))
    rows = np.asarray(record.local_expert_tokens[rank], dtype=np.float64)
    pairs, active, tiles = (np.array([x]) for x in (rows.sum(), float((rows > 0).sum()),
                                                     float(row_tiles(rows))))
    backend = "deepep" if record.backend == "deepep" else "any"
    gemm = quant_expert_gemm(record.hidden_size, record.moe_intermediate_size, fmt,
                             num_sms(hw.name), record.top_k, input_quantised=backend == "deepep",
                             num_up=record_projections(record))
    kind, path = format_kind("experts", fmt), experts_mode_path(record)
    params = profile.params(backend, kind, path, defaults=gemm_defaults())
    layout, own_layout = 0.0, None
    if backend == "deepep" and path == "normal":     # the rank's received tokens, laid out
        own_layout = layout_kb(float(record.extra.get("num_tokens", 0)), record.hidden_size, fmt)
    elif backend == "deepep":       # low latency: DeepGEMM's masked GEMM, a group an expert
        gemm = masked_gemm(gemm, hw.name, fmt, len(rows))
        tiles = masked_rows(pairs, gemm, tiles)
    elif backend == "any":          # the fused kernel over the group's slots, remote ones too
        if hw.name in TRITON_MOE_GPUS and fmt in SM_STREAM_FORMATS:    # its CTAs' slices
            gemm = replace(gemm, sm_stream=True)
        # the slots the kernel ran: the group's tokens', or those AIC's rank-0 workload gave it
        # (`extra.kernel_tokens`, `epsim.calibrate.aic_records.RANK0_WORKLOAD_ROWS`: no slot
        # masked, the remote ones computed on expert 0 and counted in `rows`)
        given = record.extra.get("kernel_tokens", record.extra.get("num_tokens", 0))
        remote = float(given) * record.top_k - float(rows.sum())
        layout = max(remote, 0.0) * remote_slot_bytes(
            record.hidden_size, record.moe_intermediate_size, fmt, record.top_k, hw.name) * 1e-3
    terms, reread, remote_in, exiting, fallback = EXPERT_QUANT_TERMS, None, 0.0, 0.0, None
    if own_layout is not None:       # at its own rate (`EXPERT_LAYOUT_TERMS`)
        terms, params = EXPERT_LAYOUT_TERMS, {"layout_ratio": 1.0, "host_us": 0.0, **params}
        gemm = contiguous_gemm(gemm)            # DeepGEMM's contiguous layout, its block
        tiles = np.array([float(row_tiles(rows, gemm.tile_rows))])
        if _op_table(record):       # AIC's rows unpadded: its blocks and the experts they read
            tiles, active = unaligned_blocks(rows, gemm.tile_rows)
    if backend == "any" and hw.name not in TRITON_MOE_GPUS:   # FlashInfer's TRT-LLM MoE
        terms = EXPERT_REREAD_TERMS
        tokens = float(record.extra.get("num_tokens", 0)) or float(rows.sum()) / record.top_k
        # the group's tokens all reach the kernel (AIC's collector, SGLang's `none` backend)
        remote_in = float(remote_tokens(tokens, rows.sum(), record.top_k))
        # AIC's collector runs no autotune pass: the launcher's fallback tile
        tile = float(trtllm_tile(tokens * record.top_k / len(rows), fmt, tuned=False))
        gemm = trtllm_gemm(gemm, tile, fmt, record.top_k)
        terms = EXPERT_FEED_TERMS if gemm.sm_fed else terms
        reread = float(reread_kb(rows, tile, gemm.weight_bytes))
        params = {"reread_frac": 0.0, "wave_row_us": 0.0, "token_us": 0.0, "exit_us": 0.0,
                  **dict.fromkeys(FALLBACK_STREAM_PARAMS, 0.0), **params}
        # ... with the runner's default config at that tile (`FALLBACK_STREAM_FORMATS`)
        if fmt in FALLBACK_STREAM_FORMATS:
            fallback = float(partial_tile_kb(rows, tile, gemm.weight_bytes))
            terms = EXPERT_FALLBACK_TERMS if gemm.sm_fed else EXPERT_REREAD_FALLBACK_TERMS
        tiles = np.array([float(row_tiles(rows, tile))])
        if fmt in EXIT_FORMATS:      # the launch's worst case over the rank's local experts
            exiting = float(exiting_ctas_per_sm(tokens * record.top_k, len(rows), tiles[0], tile,
                                                gemm))
        # FP8-block: its activation kernel's CTAs a token, fewer at a large input
        # (`remote_token_weight`)
        remote_in *= float(remote_token_weight(fmt, gemm.intermediate_size, record.top_k,
                                               tokens, num_sms(hw.name)))
    row = experts_quant_features(pairs, active, tiles, gemm, params, hw, fmt, layout, reread,
                                 remote_in, exiting, fallback, own_layout)
    if own_layout is not None:       # as timed: around one eager call, its host floor
        row = eager_floor(row, terms.coefficients(params))
    return KernelRow(component_key(backend, kind, path), terms.coef_names, row,
                     terms.coefficients(params))


def _mla_row(record: MeasurementRecord, profile: Profile):
    if record.extra.get("scope", "kernel") != "kernel":
        raise RecordError(f"extra.scope ({record.extra.get('scope')!r}) must be 'kernel' for an "
                          f"MLA record to be one component (a module is its parts' sum)")
    hw = _hardware(record, profile)
    heads, seqs, ctx = record.num_attention_heads, record.num_seqs, record.context_len
    if not (heads and seqs and ctx):
        raise RecordError("num_attention_heads, num_seqs and context_len must be > 0 for an "
                          "MLA record")
    kv = kv_bytes_per_element(record.kv_cache_dtype or "bf16")
    d = DEEPSEEK_MLA
    one, sms = np.ones(1), num_sms(hw.name)
    kind = format_kind(record.kind, decode_kv_kind(record.kv_cache_dtype, hw.name)
                       if record.kind == "mla_decode" else kv_kind(record.kv_cache_dtype))
    params = profile.params("any", kind, GRAPH, defaults=mla_defaults())
    if record.kind == "mla_decode":
        # Hopper's FP8 cache: a cast pass, then the kernel over the BF16 copy (its own column)
        cache = absorbed_form(d["kv_lora_rank"], d["qk_rope_head_dim"], kv)
        cast = decode_dequantises(hw.name, kv)
        launch = DecodeLaunch(seqs, ctx, sms)      # Blackwell's kernel selection
        work = decode_kernel_work(one * seqs, one * seqs * ctx, heads, kernel_form(cache, cast),
                                  sms, decode_block_heads(hw.name, heads, launch))
        math = math_dtype(hw.name, kv)
        if cast:
            row = np.append(mla_kernel_features(work, params, hw, math)[0],
                            dequant_sm_us(one * seqs * ctx, cache, sms)[0])
            return KernelRow(component_key("any", kind, GRAPH), MLA_DEQUANT_TERMS.coef_names,
                             row, MLA_DEQUANT_TERMS.coefficients(
                                 {**params, "dequant_frac": dequant_frac(params)}))
        terms, rows = decode_features(work, params, hw, heads, math, launch)
        return KernelRow(component_key("any", kind, GRAPH), terms.coef_names, rows[0],
                         terms.coefficients(params))
    absorbed = absorbed_prefill(hw.name)
    if not absorbed:
        # the per-head records (Blackwell's) fit no L2 stream: the ragged kernel's
        # (`epsim.cost.mla_ragged`); one fitted on Hopper's absorbed records knows nothing of
        # its exponentials and bytes, and prices theirs as the flash kernel's tiles at the
        # rate its long chunk sustained (`transferred`; the system axis H200 -> B200)
        form = per_head_form(d["qk_nope_head_dim"], d["qk_rope_head_dim"], d["v_head_dim"], kv)
        kernel_gpu = hw.name if ragged(profile.hardware or hw.name) else ""
        work = prefill_kernel_work(one * seqs * ctx, one * seqs * ctx, one * seqs, heads, form,
                                   sms, kernel_gpu)
        params = transferred(params, profile.hardware, hw.name)
        work = replace(fold_l2(work, params, params["hbm_frac"] * hw.hbm_gbps), l2_kb=None)
        return KernelRow(component_key("any", kind, GRAPH), MLA_TERMS.coef_names,
                         mla_kernel_features(work, params, hw, "bf16")[0],
                         MLA_TERMS.coefficients(params))
    # the absorbed kernel (Hopper's): the L2 stream of its key tiles its own column, priced
    # where `l2_gbps` was fitted; an FP8 cache cast to BF16 first, as the decode's
    # (SGLang's FlashAttention-3 backend reads the whole pool `.to(q.dtype)`), a column too
    cache = absorbed_form(d["kv_lora_rank"], d["qk_rope_head_dim"], kv)
    cast = decode_dequantises(hw.name, kv)
    work = prefill_kernel_work(one * seqs * ctx, one * seqs * ctx, one * seqs, heads,
                               kernel_form(cache, cast), sms)
    row = mla_kernel_features(work, params, hw, "bf16")[0]
    coef = {"l2_gbps": np.inf, "dequant_frac": np.inf, **params}      # none: 0 a KB, a key
    terms = MLA_PREFILL_DEQUANT_TERMS if cast else MLA_PREFILL_TERMS
    if cast:
        row = np.append(row, dequant_sm_us(one * seqs * ctx, cache, sms)[0])
    return KernelRow(component_key("any", kind, GRAPH), terms.coef_names, row,
                     terms.coefficients(coef))


def kernel_record_features(record: MeasurementRecord, profile: Profile) -> KernelRow:
    """The design row of a record of `KERNEL_KINDS` (`epsim.cost.record.record_features` makes
    it its `RecordFeatures`).

    Raises:
        RecordError: a format epsim does not price, or sizes the model needs are missing.
    """
    if record.kind == "gemm":
        return _gemm_row(record, profile)
    if record.kind == "mla_bmm":
        return _bmm_row(record, profile)
    if record.kind == "quant_experts":
        return _quant_experts_row(record, profile)
    return _mla_row(record, profile)
