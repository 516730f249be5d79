"""The low-latency packed layout shared by Mooncake EP and DeepEP low-latency kernels.

Dispatch returns `[local_experts, ranks * max_tokens, H]` with `recv_count[j]` valid rows for
expert j (grouped by source rank), and `layout_range [local_experts, ranks]` int64 holding
`(begin << 32) | count` per source rank. One copy per (token, expert) pair travels.

The experts want rows grouped by expert, back to back. `unpack` gathers them into a buffer of
a fixed size (the most pairs a rank can receive) so no step waits on the host for the count;
rows past `sum(recv_count)` are padding, which grouped GEMM skips and `pack` drops.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from live.backends.base import BackendSpec, Dispatched, DispatchStats
from live.errors import LiveError

FP8_BLOCK = 128  # elements per FP8 scale (DeepEP / Mooncake per-token, per-128-channel scales)
HIDDEN_MULTIPLE = 256  # combine kernels read 32 lanes x 8 BF16 per step


@dataclass
class PackIndex:
    """Where each unpacked row lives in the packed layout.

    Attributes:
        target: [max_pairs] int64 flat packed row of each unpacked row; padding rows point at
            the spare row `num_experts * rows_per_expert`.
        num_experts, rows_per_expert: packed shape.
    """

    target: torch.Tensor
    num_experts: int
    rows_per_expert: int


def compact_index(valid: torch.Tensor, size: int, fill: int) -> torch.Tensor:
    """Positions of the True entries of a flat bool mask, padded with `fill` to `size` entries,
    without a host sync (what `nonzero` would return, at a static size).

    Returns:
        [size] int64.
    """
    position = torch.cumsum(valid, dim=0) - 1                             # [n]
    target = torch.where(valid & (position < size), position, size)       # invalid -> spare
    out = torch.full((size + 1,), fill, dtype=torch.int64, device=valid.device)
    out.scatter_(0, target, torch.arange(valid.numel(), device=valid.device))
    return out[:size]


def unpack(recv_x, recv_count: torch.Tensor, dtype: torch.dtype, max_pairs: int):
    """Packed dispatch output -> (rows [max_pairs, H] grouped by local expert, index, counts).

    Args:
        recv_x: [local_experts, rows, H] in `dtype`, or a tuple (fp8 values, fp32 scales
            [local_experts, rows, H / 128]) which is dequantized to `dtype`.
        recv_count: [local_experts] int, valid rows per expert.
        max_pairs: static row count of the result (>= any possible sum of recv_count).
    Returns:
        (rows, PackIndex, counts [local_experts] int64).
    """
    values, scales = recv_x if isinstance(recv_x, tuple) else (recv_x, None)
    num_experts, rows_per_expert, hidden = values.shape
    counts = recv_count.to(torch.int64)
    valid = torch.arange(rows_per_expert, device=counts.device) < counts[:, None]   # [experts, rows]
    spare = num_experts * rows_per_expert
    target = compact_index(valid.view(-1), max_pairs, spare)                      # [max_pairs]
    source = target.clamp(max=spare - 1)          # padding rows read row 0's slot, harmlessly
    if scales is None:
        rows = values.view(spare, hidden).index_select(0, source)
    else:
        # gather through uint8: fp8 indexing kernels are missing in some torch builds
        raw = values.view(torch.uint8).view(spare, hidden).index_select(0, source).view(values.dtype)
        row_scales = scales[source // rows_per_expert, source % rows_per_expert]  # [max_pairs, H/128]
        rows = (raw.float().view(max_pairs, hidden // FP8_BLOCK, FP8_BLOCK)
                * row_scales.unsqueeze(-1)).view(max_pairs, hidden).to(dtype)
    return rows, PackIndex(target, num_experts, rows_per_expert), counts


def pack(expert_y: torch.Tensor, index: PackIndex) -> torch.Tensor:
    """Unpacked rows [max_pairs, H] back into a contiguous `[local_experts, rows, H]` for combine
    (padding rows land in a spare row past the end)."""
    flat = expert_y.new_empty((index.num_experts * index.rows_per_expert + 1, expert_y.shape[1]))
    flat.index_copy_(0, index.target, expert_y)
    return flat[:-1].view(index.num_experts, index.rows_per_expert, expert_y.shape[1])


def recv_from_rank(layout_range: torch.Tensor) -> torch.Tensor:
    """[ranks] int64 pairs received from each source rank (sum over local experts)."""
    return (layout_range & 0xFFFFFFFF).sum(dim=0)


def send_to_rank(topk_slots: torch.Tensor, num_local_slots: int, num_ranks: int) -> torch.Tensor:
    """[ranks] int64 pairs this rank sends to each destination (one per valid choice)."""
    valid = (topk_slots >= 0).to(torch.int64).reshape(-1)
    dest = (topk_slots.clamp(min=0) // num_local_slots).reshape(-1)
    counts = torch.zeros(num_ranks, dtype=torch.int64, device=topk_slots.device)
    return counts.scatter_add_(0, dest, valid)


def max_pairs(num_ranks: int, max_tokens_per_rank: int, top_k: int, num_local_slots: int) -> int:
    """Most (token, expert) pairs a rank can receive: each source token brings at most
    min(top_k, local slots) of them."""
    return num_ranks * max_tokens_per_rank * min(top_k, num_local_slots)


@dataclass
class LowLatencyHandle:
    """State between a low-latency dispatch and its combine (Mooncake and DeepEP LL)."""

    recv_x: object              # [local_experts, ranks * max_tokens, H] (or fp8 values, scales)
    recv_count: torch.Tensor    # [local_experts] int32
    native: tuple               # the library's handle: (src_info, layout_range, max_tokens, hidden, experts)
    topk_slots: torch.Tensor    # [tokens, top_k] int64
    topk_weights: torch.Tensor  # [tokens, top_k] float32
    index: PackIndex | None = None   # set by expert_rows


def check_low_latency_spec(spec: BackendSpec, name: str, max_hidden: int, max_top_k: int) -> None:
    """Shape limits of the low-latency kernel family (Mooncake EP, DeepEP low-latency)."""
    hidden = spec.hidden_size
    if hidden % HIDDEN_MULTIPLE or hidden > max_hidden:
        raise LiveError(f"hidden_size ({hidden}) must be a multiple of {HIDDEN_MULTIPLE} and "
                        f"<= {max_hidden} for the {name} backend; use 'torch' for other sizes")
    if spec.top_k > max_top_k:
        raise LiveError(f"top_k ({spec.top_k}) must be <= {max_top_k} for the {name} backend")
    if spec.dtype != torch.bfloat16:
        raise LiveError(f"dtype ({spec.dtype}) must be torch.bfloat16 for the {name} backend")


class LowLatencyLayout:
    """expert_rows / expert_payload / stats over the packed layout (shared with DeepEP LL)."""

    spec: BackendSpec
    num_local_slots: int
    ep_size: int
    max_pairs: int

    def expert_rows(self, dispatched: Dispatched):
        handle = dispatched.handle
        rows, handle.index, counts = unpack(handle.recv_x, handle.recv_count, self.spec.dtype,
                                            self.max_pairs)
        return rows, counts

    def expert_payload(self, expert_y, dispatched: Dispatched) -> torch.Tensor:
        return pack(expert_y, dispatched.handle.index)

    def _stats(self, handle: LowLatencyHandle) -> DispatchStats:
        return DispatchStats(
            recv_tokens_from_rank=recv_from_rank(handle.native[1]),
            send_tokens_to_rank=send_to_rank(handle.topk_slots, self.num_local_slots, self.ep_size),
            local_expert_tokens=handle.recv_count.to(torch.int64))
