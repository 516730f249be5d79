"""Design rows of the single-GPU records: the dense MLP and flash-attention kernels
(`any/dense`, `any/attention_decode|prefill`), the MoE block's own ops (`block_ops`,
`any/block_ops`) and the layer bench's attention block (`layer_part` "attention_block": the
block's own ops, `any/attention_ops`, as transformers runs them -- the block the bench times).
`epsim.cost.record.record_features` dispatches to them."""

from __future__ import annotations

import numpy as np

from epsim.cost.attention import attention_projections_us
from epsim.cost.attention_ops import attention_ops_defaults, attention_ops_features, block_ops
from epsim.cost.block_ops import block_ops_defaults, block_ops_features
from epsim.cost.experts import (TILE_M, carried_rates, dense_gemm, experts_defaults,
                                experts_features, num_sms)
from epsim.cost.flash import (attention_kernel_defaults, carried_kernel_rates, decode_work,
                              kernel_features, kernel_grids, prefill_work)
from epsim.cost.linear import ATTENTION_OPS_TERMS, ATTENTION_TERMS, BLOCK_OPS_TERMS, EXPERT_TERMS
from epsim.cost.record_row import RecordFeatures, carried_from, device_path, record_cluster
from epsim.errors import RecordError
from epsim.profile import GRAPH, Profile, component_key, is_graph
from epsim.records import MeasurementRecord
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import ModelSpec
from epsim.zoo import get_hardware, hardware_names

# single-GPU kinds and the component each fits (`any/<component>[/graph]`)
SINGLE_GPU_COMPONENTS = {"attention_prefill": "attention_prefill",
                         "attention_decode": "attention_decode", "dense_mlp": "dense"}


def single_gpu_row(record: MeasurementRecord, profile: Profile) -> RecordFeatures:
    """Design row of a single-GPU kernel record: a dense SwiGLU MLP (one expert's physics,
    `epsim.cost.experts.dense_us`) or a flash-attention kernel (`epsim.cost.flash`)."""
    cluster = record_cluster(record, profile)
    kind = SINGLE_GPU_COMPONENTS[record.kind]
    path = GRAPH if is_graph(record) else ""
    if record.kind != "dense_mlp":
        return attention_row(record, profile, kind, path, cluster)
    # fitted on another GPU (a system hold-out): its efficiencies on this GPU's datasheet
    fitted = profile.component("any", kind, path)
    carried = ({} if fitted is None or profile.hardware not in hardware_names() else
               carried_rates(fitted.params, get_hardware(profile.hardware), cluster.hardware))
    params = {**experts_defaults(cluster.hardware), **carried}
    if not (record.hidden_size and record.intermediate_size):
        raise RecordError("hidden_size and intermediate_size must be > 0 for a dense_mlp record")
    gemm = dense_gemm(record.hidden_size, record.intermediate_size, 2.0, cluster.gpu)
    t = float(record.num_tokens_per_rank)
    row = experts_features(np.array([t]), np.array([1.0 if t > 0 else 0.0]),
                           np.array([np.ceil(t / TILE_M)]), gemm, params)
    row[1] = 0.0          # one expert always: its per-expert term is the base's
    return RecordFeatures(component_key("any", kind, path), EXPERT_TERMS.coef_names, row,
                          EXPERT_TERMS.coefficients(params))


def attention_row(record: MeasurementRecord, profile: Profile, kind: str, path: str,
                   cluster: ClusterSpec) -> RecordFeatures:
    """An attention record: `num_seqs` causal chunks of `context_len` new tokens (prefill), or
    `num_seqs` single queries against `context_len` cached keys each (decode)."""
    h, kv, hd = record.num_attention_heads, record.num_kv_heads, record.head_dim
    seqs, ctx = record.num_seqs, record.context_len
    if not (h and kv and hd and seqs and ctx):
        raise RecordError("num_attention_heads, num_kv_heads, head_dim, num_seqs and "
                          "context_len must be > 0 for an attention record")
    one, sms = np.ones(1), num_sms(cluster.gpu)
    grids = kernel_grids(str(record.extra.get("kernel", "")))       # the kernel it timed
    if record.kind == "attention_prefill":
        work = prefill_work(one * seqs * ctx, one * seqs * ctx, one * seqs, h, kv, hd, sms,
                            grid=grids.prefill)
    else:
        work = decode_work(one * seqs, one * seqs * ctx, h, kv, hd, sms, grid=grids.decode)
    params = profile.params("any", kind, path, defaults=attention_kernel_defaults(cluster.hardware))
    source = carried_from(profile, cluster)
    if profile.component("any", kind, path) is not None and source is not None:
        # fitted on another GPU (a system hold-out): its efficiencies on this GPU's datasheet
        params = carried_kernel_rates(params, source, cluster.hardware,
                                      decode=record.kind == "attention_decode")
    return RecordFeatures(component_key("any", kind, path), ATTENTION_TERMS.coef_names,
                          kernel_features(work, params)[0], ATTENTION_TERMS.coefficients(params))


def block_ops_row(record: MeasurementRecord, profile: Profile) -> RecordFeatures:
    """Design row of a `block_ops` record (`epsim.cost.block_ops`): the measured GPU's own
    tokens and the pairs its experts compute (`extra.pairs`, else tokens x top_k: one GPU
    holds every expert)."""
    if not (record.hidden_size and record.num_experts and record.top_k):
        raise RecordError("hidden_size, num_experts and top_k must be > 0 for a block_ops record")
    cluster = record_cluster(record, profile)
    path, host = device_path(record, profile, "block_ops")
    params = profile.params("any", "block_ops", path, defaults=block_ops_defaults(cluster.hardware))
    tokens = float(record.num_tokens_per_rank)
    pairs = float(record.extra.get("pairs", tokens * record.top_k))
    row = block_ops_features(tokens, pairs, record.hidden_size, record.num_experts, record.top_k,
                             params)
    return RecordFeatures(component_key("any", "block_ops", path), BLOCK_OPS_TERMS.coef_names, row,
                          BLOCK_OPS_TERMS.coefficients(params), host)


def layer_model(record: MeasurementRecord) -> ModelSpec:
    """A layer-bench record's shape as a one-layer `ModelSpec` (GQA attention with the record's
    heads; a shared expert where the record has one, of the experts' width)."""
    width = record.moe_intermediate_size or 1
    return ModelSpec(name=record.model, num_layers=1, hidden_size=record.hidden_size,
                     moe_intermediate_size=width, num_experts=record.num_experts or 1,
                     top_k=record.top_k or 1,
                     num_shared_experts=record.intermediate_size // width,
                     num_attention_heads=record.num_attention_heads,
                     num_key_value_heads=record.num_kv_heads, head_dim=record.head_dim)


ATTENTION_KERNEL_US = "attention_kernel_us"   # extra field: the kernel measured at the point


def attention_ops_row(record: MeasurementRecord, profile: Profile) -> RecordFeatures:
    """A `layer_part` record of the attention block (`extra.part` "attention_block": input
    RMSNorm, attention, residual; decode, `num_seqs` tokens at `context_len`): the block's own
    ops' row (`any/attention_ops`); its fixed offset is the attention kernel measured at the
    same point (`extra.attention_kernel_us`, paired by `epsim.calibrate.layer_parts`; else the
    fitted kernel model) and the projections as the simulator prices them."""
    if not (record.num_attention_heads and record.num_kv_heads and record.head_dim
            and record.num_seqs and record.context_len and record.hidden_size):
        raise RecordError("num_attention_heads, num_kv_heads, head_dim, num_seqs, context_len "
                          "and hidden_size must be > 0 for an attention_block record")
    cluster = record_cluster(record, profile)
    model = layer_model(record)
    path = GRAPH if is_graph(record) else ""
    tokens = np.array([float(record.num_seqs)])
    kernel = record.extra.get(ATTENTION_KERNEL_US)
    if kernel is None:
        twin = record.model_copy(update={"kind": "attention_decode", "extra": {}})
        kernel = attention_row(twin, profile, "attention_decode", path, cluster).predicted_us
    dense = profile.params("any", "dense", GRAPH, defaults=experts_defaults(cluster.hardware))
    projections = float(attention_projections_us(tokens, model, dense)[0])
    params = profile.params("any", "attention_ops", path,
                            defaults=attention_ops_defaults(cluster.hardware))
    # the bench times transformers' block: its kernels and bytes (`epsim.cost.attention_ops`)
    row = attention_ops_features(tokens, block_ops(model, "transformers"))[0]
    return RecordFeatures(component_key("any", "attention_ops", path),
                          ATTENTION_OPS_TERMS.coef_names, row,
                          ATTENTION_OPS_TERMS.coefficients(params),
                          offset_us=float(kernel) + projections)
