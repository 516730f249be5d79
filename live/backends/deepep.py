"""`deepep`: DeepEP's `Buffer`, normal (dedup per rank) and low-latency (one copy per pair).

Where it runs: `deep_ep` must import, which needs a DeepEP build for the installed torch and
CUDA. The `sgl-deep-ep` wheels need torch >= 2.13; `scripts/build_deepep.sh` builds DeepEP
v1.2.1 from source against the GPU image's torch 2.11 / CUDA 13 with NVSHMEM (all kernels). On
one H200 the low-latency path has run for real at EP 1 and matched the single-device block
(`python -m live.bench.deepep_smoke`, `benchmarks/results/deepep_build_h200/`); the normal
(intranode) kernels need 2, 4 or 8 ranks and have not run yet. Written against DeepEP's
`Buffer` API (`get_dispatch_layout`/`dispatch`/`combine`, `low_latency_dispatch`/
`low_latency_combine`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from epsim import vocab
from live.backends import packed
from live.backends.base import (A2ABackend, BackendSpec, Dispatched, DispatchStats,
                                dedup_expert_payload, dedup_expert_rows, shared_buffer,
                                slot_counts)
from live.backends.packed import LowLatencyHandle, LowLatencyLayout, check_low_latency_spec
from live.errors import LiveError

MODES = vocab.DEEPEP_MODES
LL_MAX_HIDDEN = 8192
LL_MAX_TOP_K = 9          # DeepEP low-latency combine keeps top-k in registers (kNumMaxTopk = 9)
NORMAL_MAX_RANKS_NVLINK = 8


@dataclass
class _NormalHandle:
    native: tuple                # DeepEP's handle; native[0] = rank_prefix_matrix [ranks, ranks]
    recv_x: torch.Tensor         # [received, H]
    recv_slot: torch.Tensor      # [received, top_k] local slot or -1
    recv_weight: torch.Tensor    # [received, top_k] float32
    send_counts: torch.Tensor    # [ranks] tokens sent to each rank
    pairs: tuple | None = None


class DeepEPBackend(LowLatencyLayout, A2ABackend):
    """DeepEP Buffer in `spec.mode` ("normal" or "low_latency")."""

    name = "deepep"
    requires_cuda = True

    def __init__(self, spec: BackendSpec, group=None):
        A2ABackend.__init__(self, spec, group)
        if group is None:
            raise LiveError("group (None) must be a torch.distributed process group for the "
                            "deepep backend")
        from deep_ep import Buffer

        self.low_latency = spec.mode == "low_latency"
        if self.low_latency:
            self.max_pairs = packed.max_pairs(self.ep_size, spec.max_tokens_per_rank, spec.top_k,
                                              self.num_local_slots)
            num_rdma_bytes = Buffer.get_low_latency_rdma_size_hint(
                spec.max_tokens_per_rank, spec.hidden_size, self.ep_size, spec.num_physical_experts)
            self.buffer = shared_buffer(
                ("deepep", "low_latency", id(group), self.num_local_slots), num_rdma_bytes,
                lambda: Buffer(group, 0, num_rdma_bytes, low_latency_mode=True,
                               num_qps_per_rank=self.num_local_slots))
        else:
            if self.ep_size > NORMAL_MAX_RANKS_NVLINK:
                raise LiveError(f"ep_size ({self.ep_size}) must be <= {NORMAL_MAX_RANKS_NVLINK} for "
                                f"deepep normal mode here (intranode kernels only)")
            hidden_bytes = spec.hidden_size * torch.empty((), dtype=spec.dtype).element_size()
            num_nvl_bytes = max(
                Buffer.get_dispatch_config(self.ep_size).get_nvl_buffer_size_hint(hidden_bytes, self.ep_size),
                Buffer.get_combine_config(self.ep_size).get_nvl_buffer_size_hint(hidden_bytes, self.ep_size))
            self.buffer = shared_buffer(("deepep", "normal", id(group)), num_nvl_bytes,
                                        lambda: Buffer(group, num_nvl_bytes, 0))

    @classmethod
    def check_spec(cls, spec: BackendSpec) -> None:
        if spec.mode not in MODES:
            raise LiveError(f"deepep_mode ({spec.mode!r}) must be one of {', '.join(MODES)}")
        if spec.mode == "low_latency":
            check_low_latency_spec(spec, "deepep low_latency", LL_MAX_HIDDEN, LL_MAX_TOP_K)
        elif spec.dtype != torch.bfloat16:
            raise LiveError(f"dtype ({spec.dtype}) must be torch.bfloat16 for the deepep backend")
        elif spec.dispatch_dtype == "fp8":
            raise LiveError("dispatch_dtype ('fp8') must be 'bf16' for deepep normal mode here "
                            "(FP8 normal dispatch needs pre-quantized tokens)")

    @classmethod
    def check_available(cls, device: torch.device) -> None:
        super().check_available(device)
        cls.require_module("deep_ep", "build it for this torch and CUDA with "
                                      "scripts/build_deepep.sh (sgl-deep-ep wheels need torch "
                                      ">= 2.13), or use 'torch' or 'mooncake'")

    def dispatch(self, x, topk_slots, topk_weights) -> Dispatched:
        topk_slots = topk_slots.contiguous()
        topk_weights = topk_weights.to(torch.float32).contiguous()
        num_experts = self.spec.num_physical_experts
        if self.low_latency:
            if x.shape[0] > self.spec.max_tokens_per_rank:
                raise LiveError(f"tokens ({x.shape[0]}) must be <= max_tokens_per_rank "
                                f"({self.spec.max_tokens_per_rank}) for the deepep buffer")
            recv_x, recv_count, native, _event, _hook = self.buffer.low_latency_dispatch(
                x.contiguous(), topk_slots, self.spec.max_tokens_per_rank, num_experts,
                use_fp8=self.spec.dispatch_dtype == "fp8")
            return Dispatched(LowLatencyHandle(recv_x, recv_count, native, topk_slots, topk_weights),
                              self._stats)
        num_per_rank, num_per_rdma_rank, num_per_expert, in_rank, _ = \
            self.buffer.get_dispatch_layout(topk_slots, num_experts)
        recv_x, recv_slot, recv_weight, _per_expert, native, _ = self.buffer.dispatch(
            x.contiguous(), topk_idx=topk_slots, topk_weights=topk_weights,
            num_tokens_per_rank=num_per_rank, num_tokens_per_rdma_rank=num_per_rdma_rank,
            is_token_in_rank=in_rank, num_tokens_per_expert=num_per_expert)
        # recv_slot holds local slot ids (-1 where the choice lives elsewhere)
        return Dispatched(_NormalHandle(native, recv_x, recv_slot, recv_weight,
                                        num_per_rank.to(torch.int64)), self._normal_stats)

    def _normal_stats(self, handle: _NormalHandle) -> DispatchStats:
        prefix = handle.native[0][:, self.rank].to(torch.int64)   # cumulative tokens by source
        recv_from = torch.diff(prefix, prepend=prefix.new_zeros(1))
        return DispatchStats(recv_tokens_from_rank=recv_from,
                             send_tokens_to_rank=handle.send_counts,
                             local_expert_tokens=slot_counts(handle.recv_slot, self.num_local_slots))

    def expert_rows(self, dispatched: Dispatched):
        if self.low_latency:
            return super().expert_rows(dispatched)
        return dedup_expert_rows(dispatched.handle, self.num_local_slots)

    def expert_payload(self, expert_y, dispatched: Dispatched):
        if self.low_latency:
            return super().expert_payload(expert_y, dispatched)
        return dedup_expert_payload(expert_y, dispatched.handle)

    def combine(self, payload, dispatched: Dispatched) -> torch.Tensor:
        handle = dispatched.handle
        if self.low_latency:
            combined, _event, _hook = self.buffer.low_latency_combine(
                payload, handle.topk_slots, handle.topk_weights, handle.native)
            return combined
        combined, _weights, _event = self.buffer.combine(payload, handle.native)
        return combined
