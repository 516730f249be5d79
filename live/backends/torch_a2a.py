"""`torch`: our reference DeepEP-class dispatch/combine over `torch.distributed.all_to_all_single`.

Like DeepEP's normal kernels it sends each token once per destination rank (however many of
its experts that rank holds), with the token's local slots and weights as metadata; the
receiver weights and sums its pairs per token, and combine sends one row per received token
back. Uneven splits; runs on NCCL (GPU) and gloo (CPU). The split sizes must reach the host,
so dispatch synchronizes with the device (DeepEP's normal mode does too, for its counts).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from live.backends.base import (A2ABackend, Dispatched, DispatchStats, dedup_expert_payload,
                                dedup_expert_rows, pack_choices, slot_counts, unpack_choices)


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


class TorchA2ABackend(A2ABackend):
    """DeepEP-normal-class dispatch over `all_to_all_single` (dedup per destination rank)."""

    name = "torch"
    requires_cuda = False

    def _all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits, in_splits) -> None:
        if self.group is None:
            out.copy_(inp)
        else:
            dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)

    def dispatch(self, x, topk_slots, topk_weights) -> Dispatched:
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

    def _stats(self, handle: _Handle) -> DispatchStats:
        return DispatchStats(recv_tokens_from_rank=handle.recv_counts,
                             send_tokens_to_rank=handle.send_counts,
                             local_expert_tokens=slot_counts(handle.recv_slot, self.num_local_slots))

    def expert_rows(self, dispatched: Dispatched):
        return dedup_expert_rows(dispatched.handle, self.num_local_slots)

    def expert_payload(self, expert_y, dispatched: Dispatched) -> torch.Tensor:
        return dedup_expert_payload(expert_y, dispatched.handle)

    def combine(self, payload, dispatched: Dispatched) -> torch.Tensor:
        handle = dispatched.handle
        back = payload.new_empty((len(handle.src_token), payload.shape[1]))
        self._all_to_all(back, payload, handle.send_splits, handle.recv_splits)
        out = torch.zeros((handle.num_tokens, payload.shape[1]), dtype=torch.float32,
                          device=payload.device)
        out.index_add_(0, handle.src_token, back.float())
        return out.to(payload.dtype)
