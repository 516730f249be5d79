"""`torch`: our reference DeepEP-class dispatch/combine over `torch.distributed` collectives.

Like DeepEP's normal kernels it sends each token once per destination rank (however many of
its experts that rank holds), with the token's local slots and weights as metadata; the
receiver weights and sums its pairs per token, and combine sends one row per received token
back. Runs on NCCL (GPU) and gloo (CPU), in one of two layouts (`BackendSpec.mode`):

- "normal": exact, uneven splits over `all_to_all_single`. The split sizes must reach the
  host, so dispatch synchronizes with the device (DeepEP's normal mode does too, for its counts).
- "static": static shapes and no host sync, like DeepEP's low-latency kernels: every rank
  receives `max_tokens_per_rank` rows from every rank whatever the routing (as a CUDA-graph
  decode batch padded to its graph size does), so nothing waits on the host and dispatch and
  combine record into a CUDA graph.

The static layout sends every token (padded to C = `max_tokens_per_rank` rows) to every rank,
so its dispatch is an all-gather of the tokens and of their choices, token-aligned: row
`r * C + t` on every rank is source rank r's token t. Each receiver keeps the choices local to
it (the others read -1, as do padding rows) and counts on the device what it got. Combine sums,
for each token, the rows every rank returns for it (a rank's row is zero where the token chose
none of its experts: `expert_payload` adds nothing there): a reduce-scatter. Same rows on the
wire as an `all_to_all_single` of C rows to every rank, which is what the layout sent before.

Memory passes, per rank and call (R ranks, T tokens, H hidden, b bytes per element, 2 in bf16;
the choices, `[C, 2k]` int32, and index arithmetic on `[R*C, k]` are left out, being small
next to H * b; counted op by op by `benchmarks/a2a_bytes.py`):

    dispatch  pad x to [C, H] (only when T < C)            reads and writes T*H*b
              all_gather of [C, H] -> [R*C, H]              the exchange (raw floor)
    combine   R <= 2, or fp32: reduce_scatter [R*C, H] -> [C, H]; the exchange, nothing else
              R > 2 in bf16: all_to_all_single of [R*C, H], then a sum over ranks with fp32
              accumulation (reads R*C*H*b, writes C*H*b), since a reduce-scatter in bf16
              would round after every hop

A sum of two bf16 rows is exact in bf16 (one rounding of the fp32 sum), so up to two ranks the
reduce-scatter returns what an fp32 sum cast to bf16 gives; beyond that the local sum
accumulates in fp32 and rounds once. The layout before (kept in
benchmarks/results/h200x2_issue18/a2a/) gathered the send rows with `repeat_interleave` and
`index_copy_` into a zero-filled buffer, exchanged the counts in a third collective and
combined by an fp32 cast, concatenation, gather and sum of `[R*C, H]`: about 21 passes of
`[R*T, H]` in b outside the collectives at 4096 tokens against none now (`a2a_bytes.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from live.backends.base import (A2ABackend, BackendSpec, Dispatched, DispatchStats,
                                dedup_expert_payload, dedup_expert_rows, pack_choices, reduce_pairs,
                                slot_counts, token_ranks, unpack_choices)
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
    """State of a "static" (static-shape) dispatch; C = max_tokens_per_rank, row `r * C + t` is
    source rank r's token t."""

    topk_slots: torch.Tensor     # [tokens, top_k] int64 physical slots this rank chose
    recv_x: torch.Tensor         # [ranks * C, H]; padding rows (t >= a source's tokens) unused
    recv_slot: torch.Tensor      # [ranks * C, top_k] int64 local slot or -1 (padding: all -1)
    recv_weight: torch.Tensor    # [ranks * C, top_k] float32
    num_ranks: int
    num_local_slots: int
    pairs: tuple | None = None   # (pair_row, pair_k, counts) at a static size, once expert_rows ran

    @property
    def recv_counts(self) -> torch.Tensor:
        """[ranks] int64 tokens received from each rank that chose a local slot."""
        return (self.recv_slot >= 0).any(dim=1).view(self.num_ranks, -1).sum(dim=1)

    @property
    def send_counts(self) -> torch.Tensor:
        """[ranks] int64 tokens of this rank that chose a slot of each rank."""
        return token_ranks(self.topk_slots, self.num_local_slots, self.num_ranks).sum(dim=0)


def _all_gather(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    """The tensor form of all-gather (torch 2.13 renamed it, same signature)."""
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp, group=group)


def _reduce_scatter(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    """The tensor form of reduce-scatter (sum; torch 2.13 renamed it, same signature)."""
    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp, group=group)


class TorchA2ABackend(A2ABackend):
    """DeepEP-class dispatch: exact splits over `all_to_all_single` (one copy per token and
    destination rank, "normal"), or static shapes without host sync over all-gather and
    reduce-scatter ("static")."""

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
        dest = topk_slots // self.num_local_slots                           # [tokens, top_k]; -1: -1
        in_rank = token_ranks(topk_slots, self.num_local_slots, self.ep_size)   # [tokens, ranks]
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
        """Every rank's tokens, padded to `max_tokens_per_rank` rows, and their choices to every
        rank (two all-gathers, static shapes; memory passes: the module docstring)."""
        num_tokens, top_k = topk_slots.shape
        capacity = self.spec.max_tokens_per_rank
        if num_tokens > capacity:
            raise LiveError(f"tokens ({num_tokens}) must be <= max_tokens_per_rank ({capacity}) "
                            f"for the torch backend in static mode")
        hidden = x.shape[1]
        # choices as int32 (slot, then the fp32 weight's bits); padding rows choose nothing
        choices = torch.full((capacity, 2 * top_k), -1, dtype=torch.int32, device=x.device)
        choices[:num_tokens, :top_k] = topk_slots
        choices[:num_tokens, top_k:] = topk_weights.to(torch.float32).view(torch.int32)
        if num_tokens < capacity:                   # pad: the rows past num_tokens are unused
            padded = x.new_empty((capacity, hidden))
            padded[:num_tokens] = x
            x = padded
        recv_x = x.new_empty((self.ep_size * capacity, hidden))
        recv_choices = choices.new_empty((self.ep_size * capacity, 2 * top_k))
        self._gather(recv_x, x.contiguous())
        self._gather(recv_choices, choices)
        slots = recv_choices[:, :top_k].to(torch.int64)                    # [ranks * C, top_k]
        # a choice is local when its slot lies on this rank (slot -1 floor-divides to rank -1)
        recv_slot = torch.where(slots // self.num_local_slots == self.rank,
                                slots - self.rank * self.num_local_slots, -1)
        recv_weight = recv_choices[:, top_k:].contiguous().view(torch.float32)
        handle = _StaticHandle(topk_slots, recv_x, recv_slot, recv_weight, self.ep_size,
                               self.num_local_slots)
        return Dispatched(handle, self._stats)

    def _gather(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        if self.group is None:
            out.copy_(inp)
        else:
            _all_gather(out, inp, group=self.group)

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
        # padding pairs (past counts.sum(), which grouped GEMM skips) read the last row; their
        # outputs go to expert_payload's spare row, which is dropped
        last = handle.recv_x.shape[0] - 1
        return handle.recv_x.index_select(0, pair_row.clamp(max=last)), counts

    def expert_payload(self, expert_y, dispatched: Dispatched) -> torch.Tensor:
        if not self.static:
            return dedup_expert_payload(expert_y, dispatched.handle)
        handle = dispatched.handle
        pair_row, pair_k, _ = handle.pairs
        rows = handle.recv_x.shape[0]
        weight = torch.cat([handle.recv_weight, handle.recv_weight.new_zeros((1, handle.recv_weight.shape[1]))])
        per_row = reduce_pairs(expert_y, pair_row, weight[pair_row, pair_k], rows + 1)
        return per_row[:rows].to(expert_y.dtype)

    def _combine_static(self, payload: torch.Tensor, handle: _StaticHandle) -> torch.Tensor:
        """Each token's rows from every rank summed, [tokens, H]: a reduce-scatter where that
        is exact in the payload's dtype (two ranks, or fp32), else an all-to-all and a sum with
        fp32 accumulation (one rounding)."""
        rows, hidden = payload.shape
        capacity = rows // self.ep_size
        num_tokens = handle.topk_slots.shape[0]
        payload = payload.contiguous()
        if self.group is None:
            return payload[:num_tokens]
        if self.ep_size <= 2 or payload.dtype == torch.float32:
            out = payload.new_empty((capacity, hidden))
            _reduce_scatter(out, payload, group=self.group)
            return out[:num_tokens]
        back = torch.empty_like(payload)
        self._all_to_all(back, payload, None, None)
        return back.view(self.ep_size, capacity, hidden)[:, :num_tokens].sum(dim=0)

    def combine(self, payload, dispatched: Dispatched) -> torch.Tensor:
        handle = dispatched.handle
        if self.static:
            return self._combine_static(payload, handle)
        back = payload.new_empty((len(handle.src_token), payload.shape[1]))
        self._all_to_all(back, payload, handle.send_splits, handle.recv_splits)
        out = torch.zeros((handle.num_tokens, payload.shape[1]), dtype=torch.float32,
                          device=payload.device)
        out.index_add_(0, handle.src_token, back.float())
        return out.to(payload.dtype)
