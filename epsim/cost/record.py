"""Evaluate one cost component directly on a MeasurementRecord's counts.

The calibration fitter (least squares) needs, per record, the component it measures, that
component's design row and coefficient names; validation needs the predicted microseconds.
Both come from the same models the simulator runs (`comm`, `experts`), fed with the counts
the live bench measured instead of expected values:

  dispatch / combine  `send_tokens_per_rank`, `recv_tokens_per_rank`: link-crossing token
                      copies per rank (copies a rank sends to itself should be left out).
                      On one node all copies are NVLink; across nodes they split by the share
                      of remote peers, `(ep - gpus_per_node) / (ep - 1)`.
  experts             `local_expert_tokens` (pairs per local expert; active = nonzero), or
                      `expert_tokens_per_rank` with every local expert taken as active.
  allreduce           `bytes` if set, else `ep_size * num_tokens_per_rank * hidden * 2` (BF16),
                      priced by the all-reduce model (`epsim.cost.allreduce`,
                      `any/allreduce/graph/<algorithm>`; no design row: NCCL is a min of lines).
                      The `none` backend's dispatch is its all-gather (`none/allgather`, over
                      `none/allreduce`; an nccl-tests all-gather, `extra.kernel` "NCCL", is the
                      all-reduce model's NCCL ring, one pass: `allgather_record_us`), its
                      combine its measured all-reduce (`none/allreduce`).
  moe_layer           dispatch + experts + combine of the record's backend, plus the layer's
                      `sync_us` (`<backend>/moe_layer`; no design row: not one linear component).
  block_ops           tokens per rank and `extra.pairs` (one GPU: tokens x top_k), the block's
                      router, permute and weighting (`epsim.cost.block_ops`, `any/block_ops`).
  layer_part          the attention block (`extra.part` "attention_block", one GPU): the block's
                      own ops (`epsim.cost.attention_ops`, `any/attention_ops`) over the
                      attention kernel measured at the point and the priced projections.
A backend's `experts` stage is the kernel model (`any/experts...`) plus the block ops inside it
and the backend's own layout work (`<backend>/layout...`, `epsim.cost.layout`), whose row it is.
Components are looked up most specific first (keys and mode paths: `epsim.profile`): an FP8
dispatch reads `<backend>/dispatch/fp8` and `<backend>/experts/fp8` where fitted, else the BF16
ones.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from epsim.cost.allreduce import ALGORITHMS as ALLREDUCE_ALGORITHMS
from epsim.cost.allreduce import (allreduce_defaults, allreduce_us, carried_allreduce_rates,
                                  is_sm100, ring_us)
from epsim.cost.block_ops import KERNELS as BLOCK_OPS_KERNELS
from epsim.cost.block_ops import block_ops_defaults, block_ops_us
from epsim.cost.comm import (carried_comm_rates, check_backend, chunked, collective_defaults,
                             collective_features, combine_bytes_per_copy, comm_defaults,
                             comm_features, dedup_for, dispatch_bytes_per_copy, l2_bytes,
                             per_message, queue_copies)
from epsim.cost.experts import (ExpertGemm, carried_rates, even_row_tiles, experts_defaults,
                                experts_features, num_sms, record_projections, row_tiles)
from epsim.cost.layout import layout_defaults, layout_features
from epsim.cost.linear import COLLECTIVE_TERMS, COMM_TERMS, EXPERT_TERMS, LAYOUT_TERMS
from epsim.cost.moe import layer_defaults
from epsim.cost.record_kernels import KERNEL_KINDS, kernel_record_features
from epsim.cost.record_row import RecordFeatures, carried_from, device_path, record_cluster
from epsim.cost.record_single import (SINGLE_GPU_COMPONENTS, attention_ops_row, block_ops_row,
                                     single_gpu_row)
from epsim.eplb.placement import ranks_per_node
from epsim.errors import ProfileError, RecordError
from epsim.fused_moe_config import DEFAULT_TILE, default_tile_path, record_tuned_tile
from epsim.profile import (GRAPH, Profile, component_key, is_graph, kernel_mode,
                           record_mode_path)
from epsim.records import MeasurementRecord
from epsim.spec.hardware import ClusterSpec

PREDICTABLE_KINDS = ("dispatch", "combine", "experts", "moe_layer", "allreduce",
                     "attention_prefill", "attention_decode", "dense_mlp", "block_ops",
                     "attention_block",   # the layer bench's `layer_part` of the attention block
                     *KERNEL_KINDS)


def _counts(record: MeasurementRecord, name: str) -> np.ndarray:
    values = getattr(record, name)
    if not values:
        raise RecordError(f"{name} (empty) must hold ep_size ({record.ep_size}) counts for a "
                          f"{record.kind} record")
    return np.asarray(values, dtype=np.float64)


def _comm_row(record: MeasurementRecord, profile: Profile, kind: str) -> RecordFeatures:
    backend, mode = record.backend, kernel_mode(record)
    cluster = record_cluster(record, profile)
    if backend == "none":
        return _collective_row(record, profile, passes=1 if kind == "dispatch" else 2)
    dedup = dedup_for(backend, mode)
    copies = np.maximum(_counts(record, "send_tokens_per_rank"), _counts(record, "recv_tokens_per_rank"))
    per_node = ranks_per_node(record.ep_size, cluster.gpus_per_node_resolved)
    remote = (record.ep_size - per_node) / max(record.ep_size - 1, 1)
    if kind == "dispatch":
        per_copy = dispatch_bytes_per_copy(record.hidden_size, record.dispatch_dtype or "bf16",
                                           record.top_k, dedup)
    else:
        per_copy = combine_bytes_per_copy(record.hidden_size)
    path, host = device_path(record, profile, kind)
    params = profile.params(backend, kind, path, defaults=comm_defaults(backend, mode, cluster))
    fitted = profile.component(backend, kind, path)
    source = carried_from(profile, cluster)
    if fitted is not None and source is not None:
        # fitted on another GPU (a system hold-out): its link and HBM rates as fractions of
        # that GPU's datasheet, on this GPU's (`carried_comm_rates`, as the experts' rates);
        # the unfitted ones are this GPU's datasheet defaults already
        params = {**params, **carried_comm_rates(fitted.params, source, cluster.hardware,
                                                 not chunked(backend, mode))}
    hottest = staged = slots = remote_slots = 0.0
    if per_message(dedup):     # per-copy, busiest-slot, L2-spill, signal terms (`comm.per_message`)
        slots = float(record.num_physical_experts or record.num_experts)
        # the slots of other nodes' ranks (equal slots a rank)
        remote_slots = slots * (record.ep_size - per_node) / record.ep_size
        # the busiest (expert slot, source rank) queue (`traffic.Traffic.max_slot_pairs`): the
        # counts are what every source sends together, each of the equal sources 1 / ep_size
        hottest = max((max(row) for row in record.local_expert_tokens if row),
                      default=0.0) / record.ep_size
        staged = max((sum(row) for row in record.local_expert_tokens if row),
                     default=max(record.expert_tokens_per_rank, default=0.0))
    messages = copies if per_message(dedup) else np.zeros_like(copies)
    owner = queue = 0.0
    own_kind = kind if chunked(backend, mode) else ""
    if own_kind:               # owner tokens and per-channel queues (`comm.chunked`)
        owner = float(record.num_tokens_per_rank)
        queue = float(queue_copies((copies * (1 - remote)).max(), per_node - 1))
    row = comm_features(copies * (1 - remote), copies * remote, messages, per_copy, params, hottest,
                        staged, l2_bytes(cluster.gpu), slots, remote_slots, owner, queue,
                        own_kind)
    return RecordFeatures(component_key(backend, kind, path), COMM_TERMS.coef_names, row,
                          COMM_TERMS.coefficients(params), host)


def _collective_row(record: MeasurementRecord, profile: Profile, passes: int) -> RecordFeatures:
    cluster = record_cluster(record, profile)
    num_bytes = record.bytes or record.ep_size * record.num_tokens_per_rank * record.hidden_size * 2.0
    params = profile.params("none", "allreduce", defaults=collective_defaults(cluster))
    key = "none/allreduce"
    if passes == 1:             # the all-gather: its own fit where measured, else the all-reduce's
        params, key = profile.params("none", "allgather", defaults=params), "none/allgather"
    row = collective_features(num_bytes, record.ep_size, cluster.num_nodes, passes, params)
    return RecordFeatures(key, COLLECTIVE_TERMS.coef_names, row, COLLECTIVE_TERMS.coefficients(params))


def _allreduce_params(profile: Profile, cluster: ClusterSpec) -> dict[str, dict[str, float]]:
    """{algorithm: coefficients} of the all-reduce model on `cluster`'s GPU: the profile's
    `any/allreduce/graph/<algorithm>` over the GPU's datasheet defaults; fitted on another GPU
    (a system hold-out), its link rates carried to this GPU's NVLink and NCCL's tuner figures
    this GPU's (`carried_allreduce_rates`, as DeepEP's low-latency rates carry)."""
    defaults = allreduce_defaults(cluster)
    source = carried_from(profile, cluster)
    out = {}
    for algo in ALLREDUCE_ALGORITHMS:
        params = profile.params("any", "allreduce", f"{GRAPH}/{algo}", defaults=defaults[algo])
        fitted = profile.component("any", "allreduce", f"{GRAPH}/{algo}")
        if fitted is not None and source is not None:
            params = {**params, **carried_allreduce_rates(fitted.params, source, cluster.hardware)}
        out[algo] = params
    return out


def allreduce_record_us(record: MeasurementRecord, profile: Profile) -> float:
    """An `allreduce` record by the all-reduce model (`epsim.cost.allreduce`, coefficients
    `any/allreduce/graph/<algorithm>` over its datasheet defaults): an nccl-tests row
    (`extra.kernel` "NCCL") as NCCL at every size, any other as the algorithm SGLang runs at its
    size (`epsim.calibrate.allreduce.record_point` reads the records alike); an eager one adds
    `any/allreduce/host` where fitted (µs)."""
    cluster = record_cluster(record, profile)
    params = _allreduce_params(profile, cluster)
    num_bytes = record.bytes or record.ep_size * record.num_tokens_per_rank * record.hidden_size * 2.0
    nodes = cluster.num_nodes
    if record.extra.get("kernel") == "NCCL":
        return float(ring_us(num_bytes, record.ep_size, nodes, params["nccl"]))
    per_host = cluster.hardware.gpus_per_host or cluster.gpus_per_node_resolved
    us = allreduce_us(num_bytes, record.ep_size, nodes, params, -(-record.ep_size // per_host),
                      is_sm100(cluster.hardware))
    if record.timing == "eager":
        us += profile.params("any", "allreduce", "host", defaults={"base_us": 0.0})["base_us"]
    return us


def is_nccl_allgather(record: MeasurementRecord) -> bool:
    """An nccl-tests all-gather (the op tables' `none` dispatch, `extra.kernel` "NCCL"): NCCL's
    ring, priced by the all-reduce model's ring term (`allgather_record_us`), never fitted into
    `none/allgather` (the live block's all-gather, device + host)."""
    return (record.kind == "dispatch" and record.backend == "none"
            and record.extra.get("kernel") == "NCCL")


def allgather_record_us(record: MeasurementRecord, profile: Profile) -> float:
    """An nccl-tests all-gather by the all-reduce model's NCCL ring, one pass (`ring_us(...,
    passes=1)`: `n - 1` steps, `(n - 1) / n` of the gathered bytes; coefficients
    `any/allreduce/graph/nccl`, fitted on the all-reduce rows), µs."""
    cluster = record_cluster(record, profile)
    params = _allreduce_params(profile, cluster)["nccl"]
    num_bytes = record.bytes or record.ep_size * record.num_tokens_per_rank * record.hidden_size * 2.0
    return float(ring_us(num_bytes, record.ep_size, cluster.num_nodes, params, passes=1))


def _expert_counts(record: MeasurementRecord) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pairs, active experts, row tiles) per rank of an experts record (the measured rank
    alone for a single-GPU record)."""
    if record.local_expert_tokens:
        local = [np.asarray(row, dtype=np.float64) for row in record.local_expert_tokens]
        pairs = np.array([row.sum() for row in local])
        active = np.array([float((row > 0).sum()) for row in local])
        tiles = np.array([float(row_tiles(row)) for row in local])
    else:
        pairs = _counts(record, "expert_tokens_per_rank")
        slots = record.num_physical_experts or record.num_experts
        if not slots:
            raise RecordError("num_experts (0) must be > 0 for an experts record without "
                              "local_expert_tokens")
        active = np.full(record.ep_size, slots / record.ep_size)
        tiles = even_row_tiles(pairs, active)
    measured = record.extra.get("measured_rank")
    if measured is not None:          # a single-GPU record times one rank of its EP group
        pairs, active, tiles = (x[[int(measured)]] for x in (pairs, active, tiles))
    return pairs, active, tiles


def _kernel_row(record: MeasurementRecord, profile: Profile, path: str, cluster: ClusterSpec,
                pairs, active, tiles, tuned: bool = True) -> tuple[str, np.ndarray, np.ndarray, float]:
    """(key, design row, coefficients, fixed µs) of the grouped-GEMM kernel model at the
    record's counts: `local/experts...` for a single-GPU record, else the pooled
    `any/experts...`. With `tuned` (not for the pooled `any/experts...` fit, whose kernel
    model the simulator prices with no tile), a fused Triton MoE record whose tuned JSON is readable
    (`epsim.fused_moe_config.record_tuned_tile`) runs that JSON's tile at its M: its row tiles
    and waves at the tile, its MFLOPs column times the tile's `feed_ratio` (coefficient
    1 / tflops) and the rest of its MFLOPs at the datasheet peak, fixed (`experts._math_us`)."""
    if not record.moe_intermediate_size:
        raise RecordError("moe_intermediate_size (0) must be > 0 for an experts record")
    up = record_projections(record)
    gemm = ExpertGemm(record.hidden_size, record.moe_intermediate_size,
                      (up + 1.0) * record.hidden_size * record.moe_intermediate_size * 2.0,  # BF16
                      num_sms(cluster.gpu), num_up=up)
    owner = "local" if record.backend == "local" else "any"
    params = profile.params(owner, "experts", path, defaults=experts_defaults(cluster.hardware))
    source = carried_from(profile, cluster)
    if profile.component(owner, "experts", path) is not None and source is not None:
        # fitted on another GPU (a system hold-out): its HBM and tensor rates as fractions of
        # that GPU's datasheet, on this GPU's datasheet (`carried_rates`, as the dense MLP's)
        params = carried_rates(params, source, cluster.hardware)
    tile = record_tuned_tile(record) if tuned else None
    if tile is not None:
        gemm = dataclasses.replace(gemm, tile_rows=tile[0], tile_cols=tile[1])
        tiles = _tuned_row_tiles(record, pairs, active, tile[0])
        params = dict(params, peak_tflops=float(cluster.hardware.tensor_tflops("bf16")))
    row = experts_features(pairs, active, tiles, gemm, params)
    if DEFAULT_TILE in path.split("/"):     # its K loop's feed is its rate: no per-wave term
        row[..., 4] = 0.0
    fixed_us = 0.0
    if tile is not None and gemm.feed_ratio != 1.0:
        fixed_us = float(row[..., 3].max()) * (1.0 - gemm.feed_ratio) / params["peak_tflops"]
        row[..., 3] = row[..., 3] * gemm.feed_ratio
    return component_key(owner, "experts", path), row, EXPERT_TERMS.coefficients(params), fixed_us


def _tuned_row_tiles(record: MeasurementRecord, pairs, active, block_m: int) -> np.ndarray:
    """[ranks] `row_tiles` at a tuned tile's `block_m` rows (the measured rank's experts from
    `local_expert_tokens`; else rows split evenly over the active experts)."""
    if record.local_expert_tokens:
        local = [np.asarray(row, dtype=np.float64) for row in record.local_expert_tokens]
        tiles = np.array([float(row_tiles(row, block_m)) for row in local])
        measured = record.extra.get("measured_rank")
        return tiles[[int(measured)]] if measured is not None else tiles
    return even_row_tiles(pairs, active, block_m)


def _experts_row(record: MeasurementRecord, profile: Profile,
                 kernel: bool = False) -> RecordFeatures:
    """An experts record. A single-GPU record (`local`) is the grouped GEMM alone: the kernel
    model's row. A backend's stage is the kernel model plus what the stage holds besides
    (docs/model.md, section 4): the block's permute and weighting where the backend hands
    the block its pairs (not for low-latency `pair` copies, whose kernels lay rows out and
    weight them), and the backend's own layout work, whose row this is (`<backend>/layout`;
    kernel and block ops are its fixed offset; with `kernel`, the kernel model's row over the
    rest: a record set with no grouped GEMM timed alone fits the kernel on the stages). An
    eager record adds the host overhead of `<backend>/experts/host` and of the block ops
    inside the stage."""
    cluster = record_cluster(record, profile)
    pairs, active, tiles = _expert_counts(record)
    path, host = device_path(record, profile, "experts")
    key, row, coef, fixed_us = _kernel_row(
        record, profile, path if record.backend != "local"
        else default_tile_path(record, record_mode_path(record, "experts")), cluster, pairs, active, tiles,
        tuned=not kernel)
    if record.backend == "local":
        return RecordFeatures(key, EXPERT_TERMS.coef_names, row, coef, host, offset_us=fixed_us)
    kernel_row = row
    kernel_us = float(row @ coef)
    inside = _inside_parts(record)
    block_us, block_host = _inside_block_ops(record, profile, cluster, pairs, inside)
    rows = float(pairs.max())         # the pairs the busiest rank receives
    layout_path = record_mode_path(record, "layout")
    if not is_graph(record):
        layout_path = "/".join(p for p in (GRAPH, layout_path) if p)
    params = profile.params(record.backend, "layout", layout_path,
                            defaults=layout_defaults(cluster.hardware))
    own = profile.resolve(record.backend, "layout", layout_path)
    fitted = own is not None and own[0].split("/")[0] == record.backend
    layout_row = layout_features(rows, record.hidden_size)
    layout_coef = LAYOUT_TERMS.coefficients(params) if fitted else np.zeros(2)
    host = host + (block_host if not is_graph(record) else 0.0)
    if kernel:
        return RecordFeatures(key, EXPERT_TERMS.coef_names, kernel_row, coef, host,
                              offset_us=float(layout_row @ layout_coef) + block_us)
    return RecordFeatures(component_key(record.backend, "layout", layout_path),
                          LAYOUT_TERMS.coef_names, layout_row, layout_coef, host,
                          offset_us=kernel_us + block_us)


def _inside_parts(record: MeasurementRecord) -> tuple[str, ...]:
    """The block ops a backend's experts stage holds: the permute and the weighting, unless
    the backend's kernels do them (low-latency `pair` copies)."""
    if dedup_for(record.backend, kernel_mode(record)) == "pair":
        return ()
    return ("permute", "combine_weighting")


def inside_host_us(record: MeasurementRecord, profile: Profile) -> float:
    """Host overhead of the block ops an eagerly timed experts stage of a backend holds
    (`any/block_ops/host` times their share of the block's launches; 0 for other records):
    what the stage's own host overhead (`<backend>/experts/host`) must not count again."""
    if record.kind != "experts" or record.backend == "local" or is_graph(record):
        return 0.0
    parts = _inside_parts(record)
    host = profile.components.get(component_key("any", "block_ops", "host"))
    if not parts or host is None:
        return 0.0
    return host.params.get("base_us", 0.0) * _launch_share(parts)


def _launch_share(parts: tuple[str, ...]) -> float:
    return sum(BLOCK_OPS_KERNELS[p] for p in parts) / sum(BLOCK_OPS_KERNELS.values())


def _inside_block_ops(record: MeasurementRecord, profile: Profile, cluster: ClusterSpec,
                      pairs: np.ndarray, parts: tuple[str, ...]) -> tuple[float, float]:
    """(device µs of the slowest rank, host µs of an eager call) of the block's `parts` that a
    backend's experts stage holds (`any/block_ops`; host: `any/block_ops/host` times the
    parts' share of the block's launches)."""
    if not parts:
        return 0.0, 0.0
    device = profile.params("any", "block_ops", GRAPH, defaults=block_ops_defaults(cluster.hardware))
    us = float(block_ops_us(np.full(pairs.shape, float(record.num_tokens_per_rank)), pairs,
                            record.hidden_size, record.num_experts, record.top_k, device, parts))
    host = profile.components.get(component_key("any", "block_ops", "host"))
    return us, (host.params.get("base_us", 0.0) * _launch_share(parts) if host else 0.0)


def record_features(record: MeasurementRecord, profile: Profile,
                    component: str = "") -> RecordFeatures:
    """The design row of the component a record measures (kinds dispatch, combine, experts,
    allreduce, ...); `component`: which one where a record measures two (a backend's experts
    stage: its layout work by default, the kernel model for `any/experts...`).

    Raises:
        ProfileError: a kind that is not one linear component (moe_layer, rebalance, ...).
        RecordError: counts the model needs are missing.
    """
    if record.kind in ("dispatch", "combine"):
        check_backend(record.backend)
        return _comm_row(record, profile, record.kind)
    if record.kind == "experts":
        return _experts_row(record, profile, kernel=component.startswith("any/experts"))
    if record.kind in SINGLE_GPU_COMPONENTS:
        return single_gpu_row(record, profile)
    if record.kind == "block_ops":
        return block_ops_row(record, profile)
    if record_kind(record) == "attention_block":
        return attention_ops_row(record, profile)
    if record.kind in KERNEL_KINDS:        # quantised GEMMs and experts, MLA: record_kernels
        return RecordFeatures(*kernel_record_features(record, profile))
    raise ProfileError(f"kind ({record.kind!r}) must be one of ['dispatch', 'combine', 'experts', "
                       f"...] for a design row (an all-reduce has none: `allreduce_record_us`)")


def record_kind(record: MeasurementRecord) -> str:
    """What a record is predicted and judged as: its `kind`, or for a layer bench part
    (`layer_part`) the part (`extra.part`: `attention_block`, `moe_block`, ...)."""
    return record.extra.get("part", "") if record.kind == "layer_part" else record.kind


def predict_record(record: MeasurementRecord, profile: Profile) -> float:
    """Predicted microseconds of what `record` measured (kinds `PREDICTABLE_KINDS`).

    Raises:
        ProfileError: a kind the cost models do not predict.
        RecordError: counts the model needs are missing.
    """
    if record.kind == "moe_layer":
        check_backend(record.backend)
        sync = profile.params(record.backend, "moe_layer", GRAPH if is_graph(record) else "",
                              defaults=layer_defaults())["sync_us"]
        return (_comm_row(record, profile, "dispatch").predicted_us
                + _experts_row(record, profile).predicted_us
                + _comm_row(record, profile, "combine").predicted_us + sync)
    if record_kind(record) not in PREDICTABLE_KINDS:
        raise ProfileError(f"kind ({record_kind(record)!r}) must be one of "
                           f"{list(PREDICTABLE_KINDS)} to be predicted")
    if record.kind == "allreduce":
        return allreduce_record_us(record, profile)
    if is_nccl_allgather(record):
        return allgather_record_us(record, profile)
    return record_features(record, profile).predicted_us
