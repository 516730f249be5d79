"""aiconfigurator-core's communication tables as measurement records: DeepEP dispatch and
combine (low-latency and normal kernels), NCCL's collectives and SGLang's custom all-reduce.

DeepEP's tables come from DeepEP's own tests run by AIC's collector (`deep_collector`), one
node of 8 ranks, `num_token` tokens per rank, each token's top-k experts drawn from random
scores: uniform routing. Per-rank counts are therefore expected values, not measured ones:
  low-latency  one copy per (token, expert) pair; a rank sends `T k (ep-1)/ep` of them to other
               ranks and receives as many; each expert receives `ep T k / E` pairs
  normal       one copy per (token, destination rank); a token reaches another given rank with
               probability `1 - C(E - E/ep, k) / C(E, k)`
The low-latency dispatch is FP8 (DeepEP's test dispatches FP8; the table's bandwidth column is
`T k (H + H/128 x 4 + 16)` bytes over its time, which the importer checks) and is timed per
kernel (`bench_kineto`: device time); the normal dispatch recorded is the FP8 one, tuned over
NVLink chunk sizes at the table's SM count, timed with CUDA events around each call; both
combines are BF16.
"""

from __future__ import annotations

from math import comb

from epsim.calibrate.aic_records import (BF16, DEEPEP_NORMAL_SMS, DEEPEP_RANKS_PER_NODE,
                                         MS_TO_US, TOKEN_DIM, Imported, _record)
from epsim.calibrate.aic_tables import AicTable
from epsim.records import Provenance

FP8_BYTES_PER_VALUE = 1 + 4 / 128          # FP8 payload plus one float32 scale per 128 values
LL_HEADER_BYTES = 16                       # DeepEP low-latency's per-copy header
COUNTS_NOTE = ("expected under uniform routing (DeepEP's test: top-k of random scores), "
               "not measured")


def _hit(pool: int, held: int, top_k: int) -> float:
    """P(a token's `top_k` distinct experts, uniform over `pool`, include one of `held`)."""
    return 1.0 - comb(pool - held, top_k) / comb(pool, top_k)


def _deepep_counts(tokens: int, experts: int, top_k: int, ep: int, pair: bool) -> dict:
    """Expected per-rank counts of one uniform dispatch (`[ranks]` lists)."""
    per_expert = ep * tokens * top_k / experts
    copies = (tokens * top_k * (ep - 1) / ep if pair
              else tokens * (ep - 1) * _hit(experts, experts // ep, top_k))
    return {"send_tokens_per_rank": [copies] * ep, "recv_tokens_per_rank": [copies] * ep,
            "expert_tokens_per_rank": [float(tokens * top_k)] * ep,
            "local_expert_tokens": [[per_expert] * (experts // ep)] * ep}


def _deepep_pair(prov: Provenance, row, mode: str, timing: str, dispatch_us: float,
                 combine_us: float, extra: dict) -> list:
    ep = DEEPEP_RANKS_PER_NODE * int(row.node_num)
    tokens, experts, top_k = int(row.num_token), int(row.num_experts), int(row.num_topk)
    counts = _deepep_counts(tokens, experts, top_k, ep, pair=mode == "low_latency")
    common = dict(backend="deepep", mode=mode, timing=timing, ep_size=ep,
                  num_tokens_per_rank=tokens, hidden_size=int(row.hidden_size),
                  num_experts=experts, top_k=top_k, skew={"kind": "uniform"},
                  extra={"counts": COUNTS_NOTE, "node_num": int(row.node_num), **extra}, **counts)
    return [_record("dispatch", prov, dispatch_us, dispatch_dtype="fp8", **common),
            _record("combine", prov, combine_us, dispatch_dtype="bf16", **common)]


def deepep_ll_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`wideep_deepep_ll_perf`: low-latency dispatch (FP8) and combine (BF16), device time."""
    for row in frame.itertuples(index=False):
        out.fit += _deepep_pair(prov, row, "low_latency", "device", float(row.dispatch_avg_t_us),
                                float(row.combine_avg_t_us),
                                {"dispatch_bytes_implied": float(row.dispatch_bandwidth_gbps)
                                 * float(row.dispatch_avg_t_us) * 1e3})
    if len(frame):
        ratio = (frame.dispatch_bandwidth_gbps * frame.dispatch_avg_t_us * 1e3
                 / (frame.num_token * frame.num_topk
                    * (frame.hidden_size * FP8_BYTES_PER_VALUE + LL_HEADER_BYTES)))
        out.notes.append(f"{table.rel}: dispatch bytes implied by its bandwidth column / FP8 "
                         f"bytes of T x k copies: median {ratio.median():.3f}")


def deepep_normal_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`wideep_deepep_normal_perf`: normal (intranode) FP8 dispatch and BF16 combine at DeepEP's
    default SM count (`DEEPEP_NORMAL_SMS`); other SM counts left out (counted). Times are CUDA
    events around each call (device time plus any launch gap): timing "" (an eager stage)."""
    left = 0
    for row in frame.itertuples(index=False):
        if int(row.dispatch_sms) != DEEPEP_NORMAL_SMS:
            left += 1
            continue
        out.fit += _deepep_pair(
            prov, row, "normal", "",
            float(row.dispatch_transmit_us) + float(row.dispatch_notify_us),
            float(row.combine_transmit_us) + float(row.combine_notify_us),
            {"sms": int(row.dispatch_sms)})
    if left:
        out.notes.append(f"{table.rel}: {left} rows at SM counts other than "
                         f"{DEEPEP_NORMAL_SMS} not imported")


def _message(prov: Provenance, kind: str, row, timing: str, extra: dict, **fields):
    """A collective of `message_size` BF16 elements on `num_gpus` ranks, shaped as AIC's
    collector shapes it (`[size / 4096, 4096]` rows, else one row of `size`)."""
    size = int(row.message_size)
    return _record(kind, prov, float(row.latency) * MS_TO_US, backend="none", timing=timing,
                   ep_size=int(row.num_gpus), num_tokens_per_rank=max(1, size // TOKEN_DIM),
                   hidden_size=min(size, TOKEN_DIM), bytes=2.0 * size, extra=extra, **fields)


def allreduce_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`custom_allreduce_perf`: SGLang's custom all-reduce, captured in a CUDA graph (device
    time: fitted, `epsim.calibrate.allreduce`, as the algorithm SGLang runs at its size) and
    eager: pending (its host overhead is not this table's device time)."""
    for row in frame.itertuples(index=False):
        if row.allreduce_dtype not in BF16:
            continue
        graph = "graph" in str(row.kernel_source).lower()
        (out.fit if graph else out.pending).append(
            _message(prov, "allreduce", row, "device" if graph else "eager",
                     {"kernel": str(row.kernel_source)}))


def nccl_records(table: AicTable, frame, prov: Provenance, out: Imported) -> None:
    """`nccl_perf` (nccl-tests, FP16 buffers, back-to-back launches): all-reduce fits the NCCL
    all-reduce (`any/allreduce/graph/nccl`, `epsim.calibrate.allreduce`), all-gather (the
    `none` backend's dispatch) `none/allgather`; reduce-scatter, all-to-all and INT8 rows are
    left out (counted)."""
    left = 0
    note = {"kernel": "NCCL", "timing": "nccl-tests average of back-to-back launches"}
    for row in frame.itertuples(index=False):
        if row.nccl_dtype != "half" or row.op_name not in ("all_reduce", "all_gather"):
            left += 1
            continue
        if row.op_name == "all_reduce":
            out.fit.append(_message(prov, "allreduce", row, "", note))
        else:
            out.fit.append(_message(prov, "dispatch", row, "", note, dispatch_dtype=""))
    if left:
        out.notes.append(f"{table.rel}: {left} reduce-scatter, all-to-all or INT8 rows not imported")
