"""`torch`: our reference DeepEP-class dispatch/combine over `torch.distributed.all_to_all_single`.

Like DeepEP's normal kernels it sends each token once per destination rank (however many of
its experts that rank holds), with the token's local slots and weights as metadata; the
receiver weights and sums its pairs per token, and combine sends one row per received token
back. Runs on NCCL (GPU) and gloo (CPU), in one of two layouts (`BackendSpec.mode`):

- "normal": exact, uneven splits. The split sizes must reach the host, so dispatch
  synchronizes with the device (DeepEP's normal mode does too, for its counts).
- "static": static shapes and no host sync, like DeepEP's low-latency kernels: every rank
  sends `max_tokens_per_rank` rows to every rank (`[ranks, max_tokens, H]`, equal splits; the
  counts are exchanged on the device too) and the receiver masks the rows past each
  source's count. It moves `ranks * max_tokens_per_rank` rows per rank whatever the routing (as
  a CUDA-graph decode batch padded to its graph size does) and can be captured in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from live.backends.base import (A2ABackend, BackendSpec, Dispatched, DispatchStats,
                                dedup_expert_payload, dedup_expert_rows, pack_choices, reduce_pairs,
                                slot_counts, unpack_choices)
from live.backends.packed import compact_index
from live.errors import LiveError

MODES = ("normal", "static")   # exact splits with a host sync; static shapes without


@dataclass
class _Handle:
    src_token: torch.Tensor      # [sent] int64, which local token each sent row is
    send_counts: torch.Tensor    # [ranks] int64 rows sent to each rank
    recv_counts: torch.Tensor    # [ranks] int64 rows received from each rank
    send_splits: list[int]
    recv_splits: list[int]
    recv_x: torch.Tensor         # [received, H]
    recv_slot: torch.Tensor      # [received, top_k] int64 local slot or -1
    recv_weight: torch.Tensor    # [received, top_k] float32
    num_tokens: int
    pairs: tuple | None = None   # (pair_row, pair_k, counts) once expert_rows ran


@dataclass
class _StaticHandle:
    """State of a "static" (static-shape) dispatch; C = max_tokens_per_rank."""

    target: torch.Tensor         # [tokens, ranks] int64 row of (token, rank) in the send buffer, or ranks*C
    send_counts: torch.Tensor    # [ranks] int64 rows sent to each rank
    recv_counts: torch.Tensor    # [ranks] int64 rows received from each rank
    recv_x: torch.Tensor         # [ranks * C, H], rows past a source's count are padding
    recv_slot: torch.Tensor      # [ranks * C, top_k] int64 local slot or -1 (padding: all -1)
    recv_weight: torch.Tensor    # [ranks * C, top_k] float32
    pairs: tuple | None = None   # (pair_row, pair_k, counts) at a static size, once expert_rows ran


class TorchA2ABackend(A2ABackend):
    """DeepEP-class dispatch over `all_to_all_single` (dedup per destination rank), exact
    ("normal") or static-shape without host sync ("static")."""

    name = "torch"
    requires_cuda = False

    def __init__(self, spec: BackendSpec, group=None):
        super().__init__(spec, group)
        self.static = spec.mode == "static"

    @classmethod
    def check_spec(cls, spec: BackendSpec) -> None:
        if spec.mode not in MODES:
            raise LiveError(f"mode ({spec.mode!r}) must be one of {', '.join(MODES)} for the "
                            f"torch backend")

    def _all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits, in_splits) -> None:
        if self.group is None:
            out.copy_(inp)
        else:
            dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)

    def dispatch(self, x, topk_slots, topk_weights) -> Dispatched:
        if self.static:
            return self._dispatch_static(x, topk_slots, topk_weights)
        num_tokens, top_k = topk_slots.shape
        ranks = torch.arange(self.ep_size, device=x.device)
        dest = torch.where(topk_slots >= 0, topk_slots // self.num_local_slots, -1)  # [tokens, top_k]
        in_rank = (dest.unsqueeze(-1) == ranks).any(dim=1)                  # [tokens, ranks]
        send_rank, src_token = torch.nonzero(in_rank.T, as_tuple=True)      # rank-major order
        send_counts = in_rank.sum(dim=0).to(torch.int64)                    # [ranks]
        # metadata: the token's slots that are local to the destination, else -1
        local = torch.where(dest[src_token] == send_rank.unsqueeze(1),
                            topk_slots[src_token] - send_rank.unsqueeze(1) * self.num_local_slots,
                            -1)
        meta = pack_choices(local, topk_weights[src_token])

        recv_counts = torch.empty_like(send_counts)
        self._all_to_all(recv_counts, send_counts, None, None)
        send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
        num_recv = sum(recv_splits)
        recv_x = x.new_empty((num_recv, x.shape[1]))
        self._all_to_all(recv_x, x[src_token], recv_splits, send_splits)
        recv_meta = meta.new_empty((num_recv, meta.shape[1]))
        self._all_to_all(recv_meta, meta, recv_splits, send_splits)
        recv_slot, recv_weight = unpack_choices(recv_meta, top_k)
        handle = _Handle(src_token, send_counts, recv_counts, send_splits, recv_splits, recv_x,
                         recv_slot, recv_weight, num_tokens)
        return Dispatched(handle, self._stats)

    def _dispatch_static(self, x, topk_slots, topk_weights) -> Dispatched:
        """Equal splits of `max_tokens_per_rank` rows per rank; every shape is static."""
        num_tokens, top_k = topk_slots.shape
        capacity = self.spec.max_tokens_per_rank
        if num_tokens > capacity:
            raise LiveError(f"tokens ({num_tokens}) must be <= max_tokens_per_rank ({capacity}) "
                            f"for the torch backend in static mode")
        ranks = torch.arange(self.ep_size, device=x.device)
        dest = torch.where(topk_slots >= 0, topk_slots // self.num_local_slots, -1)  # [tokens, top_k]
        in_rank = (dest.unsqueeze(-1) == ranks).any(dim=1)                  # [tokens, ranks]
        position = torch.cumsum(in_rank.to(torch.int64), dim=0) - 1        # [tokens, ranks]
        spare = self.ep_size * capacity                                     # rows not sent
        target = torch.where(in_rank, ranks * capacity + position, spare)   # [tokens, ranks]
        # metadata: the token's slots that are local to each destination, else -1
        local = torch.where(dest.unsqueeze(1) == ranks.view(1, -1, 1),
                            topk_slots.unsqueeze(1) - ranks.view(1, -1, 1) * self.num_local_slots,
                            -1)                                             # [tokens, ranks, top_k]
        weights = topk_weights.unsqueeze(1).expand(-1, self.ep_size, -1)
        meta = pack_choices(local.reshape(-1, top_k), weights.reshape(-1, top_k))
        flat_target = target.reshape(-1)
        send_x = x.new_zeros((spare + 1, x.shape[1]))
        send_x.index_copy_(0, flat_target, x.repeat_interleave(self.ep_size, dim=0))
        send_meta = torch.full((spare + 1, meta.shape[1]), -1, dtype=meta.dtype, device=x.device)
        send_meta.index_copy_(0, flat_target, meta)
        send_counts = in_rank.sum(dim=0).to(torch.int64)                    # [ranks]

        recv_counts = torch.empty_like(send_counts)
        self._all_to_all(recv_counts, send_counts, None, None)
        recv_x = x.new_empty((spare, x.shape[1]))
        self._all_to_all(recv_x, send_x[:spare], None, None)
        recv_meta = meta.new_empty((spare, meta.shape[1]))
        self._all_to_all(recv_meta, send_meta[:spare], None, None)
        recv_slot, recv_weight = unpack_choices(recv_meta, top_k)
        # rows past a source's count carry the -1 fill; mask them anyway (stale-proof)
        valid = (torch.arange(capacity, device=x.device) < recv_counts[:, None]).reshape(-1, 1)
        recv_slot = torch.where(valid, recv_slot, -1)
        handle = _StaticHandle(target, send_counts, recv_counts, recv_x, recv_slot, recv_weight)
        return Dispatched(handle, self._stats)

    def _static_pairs(self, handle: _StaticHandle):
        """(row, k) pairs grouped by local slot at the static size `ranks * C * min(top_k,
        local slots)`; padding pairs point at the spare row `ranks * C`."""
        rows, top_k = handle.recv_slot.shape
        max_pairs = rows * min(top_k, self.num_local_slots)
        flat = handle.recv_slot.reshape(-1)
        key = torch.where(flat >= 0, flat, self.num_local_slots)           # padding sorts last
        order = torch.argsort(key, stable=True)
        valid = (key[order] < self.num_local_slots)
        picked = compact_index(valid, max_pairs, -1)                        # [max_pairs]
        pair = torch.where(picked >= 0, order[picked.clamp(min=0)], rows * top_k)
        pair_row, pair_k = pair // top_k, pair % top_k                      # spare row: rows
        return pair_row, pair_k, slot_counts(handle.recv_slot, self.num_local_slots)

    def _stats(self, handle) -> DispatchStats:
        return DispatchStats(recv_tokens_from_rank=handle.recv_counts,
                             send_tokens_to_rank=handle.send_counts,
                             local_expert_tokens=slot_counts(handle.recv_slot, self.num_local_slots))

    def expert_rows(self, dispatched: Dispatched):
        if not self.static:
            return dedup_expert_rows(dispatched.handle, self.num_local_slots)
        handle = dispatched.handle
        handle.pairs = self._static_pairs(handle)
        pair_row, _, counts = handle.pairs
        # the spare row reads as zeros; rows past counts.sum() are padding grouped GEMM skips
        padded_x = torch.cat([handle.recv_x, handle.recv_x.new_zeros((1, handle.recv_x.shape[1]))])
        return padded_x[pair_row], counts

    def expert_payload(self, expert_y, dispatched: Dispatched) -> torch.Tensor:
        if not self.static:
            return dedup_expert_payload(expert_y, dispatched.handle)
        handle = dispatched.handle
        pair_row, pair_k, _ = handle.pairs
        rows = handle.recv_x.shape[0]
        weight = torch.cat([handle.recv_weight, handle.recv_weight.new_zeros((1, handle.recv_weight.shape[1]))])
        per_row = reduce_pairs(expert_y, pair_row, weight[pair_row, pair_k], rows + 1)
        return per_row[:rows].to(expert_y.dtype)

    def combine(self, payload, dispatched: Dispatched) -> torch.Tensor:
        handle = dispatched.handle
        if self.static:
            back = torch.empty_like(payload)
            self._all_to_all(back, payload, None, None)
            back = torch.cat([back.float(), back.new_zeros((1, back.shape[1]), dtype=torch.float32)])
            return back[handle.target].sum(dim=1).to(payload.dtype)            # [tokens, H]
        back = payload.new_empty((len(handle.src_token), payload.shape[1]))
        self._all_to_all(back, payload, handle.send_splits, handle.recv_splits)
        out = torch.zeros((handle.num_tokens, payload.shape[1]), dtype=torch.float32,
                          device=payload.device)
        out.index_add_(0, handle.src_token, back.float())
        return out.to(payload.dtype)
