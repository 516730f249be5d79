"""`mooncake`: Mooncake EP (`mooncake.mooncake_ep_buffer.Buffer`), derived from DeepEP low-latency.

One copy per (token, expert) pair travels (no per-rank dedup); dispatch returns the packed
per-local-expert layout of `live.backends.packed` and combine weights and sums on the token's
rank inside the kernel. Needs CUDA; over NVLink P2P when IBGDA is unavailable (it says so in
its log). A combine must use the handle of a recent dispatch on the same buffer, so the block
always calls dispatch and combine as a pair.

Limits, from the kernels (mooncake-ep `mooncake_ep_kernel.cu`, `mooncake_ep_buffer.py`):
BF16 tokens; hidden a multiple of 256 (combine reads 32 lanes x 8 BF16) and <= 8192 (one
thread per 8 channels, 1024 threads; FP8 scales <= 64 per token); top_k <= 17; experts
divisible by ranks; at most `max_tokens_per_rank` tokens per dispatch.
"""

from __future__ import annotations

import torch

from live.backends import packed
from live.backends.base import A2ABackend, BackendSpec, Dispatched, shared_buffer
from live.backends.packed import LowLatencyHandle, LowLatencyLayout, check_low_latency_spec
from live.errors import LiveError

MAX_HIDDEN = 8192
MAX_TOP_K = 17
DEFAULT_TIMEOUT_US = 30_000_000


class MooncakeBackend(LowLatencyLayout, A2ABackend):
    """Mooncake EP buffer: one copy per pair, packed per local expert, weighted combine."""

    name = "mooncake"
    requires_cuda = True

    def __init__(self, spec: BackendSpec, group=None, timeout_us: int = DEFAULT_TIMEOUT_US):
        A2ABackend.__init__(self, spec, group)
        if group is None:
            raise LiveError("group (None) must be a torch.distributed process group for the "
                            "mooncake backend")
        from mooncake.mooncake_ep_buffer import Buffer

        num_bytes = Buffer.get_ep_buffer_size_hint(spec.max_tokens_per_rank, spec.hidden_size,
                                                   self.ep_size, spec.num_physical_experts)
        self.buffer = shared_buffer(("mooncake", id(group)), num_bytes,
                                    lambda: Buffer(group, num_bytes))
        self.timeout_us = timeout_us
        self.use_fp8 = spec.dispatch_dtype == "fp8"
        self.max_pairs = packed.max_pairs(self.ep_size, spec.max_tokens_per_rank, spec.top_k,
                                          self.num_local_slots)
        # the kernels clear a rank's flag when it times out; we check it after combine
        self.active_ranks = torch.ones(self.ep_size, dtype=torch.int32, device=spec.device)
        self.expected_active = [True] * self.ep_size      # what EPLB masked on purpose
        self.check_active_ranks = True

    @classmethod
    def check_spec(cls, spec: BackendSpec) -> None:
        check_low_latency_spec(spec, cls.name, MAX_HIDDEN, MAX_TOP_K)

    @classmethod
    def check_available(cls, device: torch.device) -> None:
        super().check_available(device)
        cls.require_module("mooncake.ep", "install mooncake-transfer-engine-cuda13 (pip extra "
                                          "'mooncake')")

    def set_active_ranks(self, active) -> None:
        """Mask ranks (elastic EP): the kernels neither send to nor wait for a rank whose flag
        is 0 (`mooncake_ep_buffer.Buffer.dispatch/combine` take `active_ranks`), so a failed
        rank's peers go on without it. The dispatch map must not choose its slots."""
        flags = [bool(a) for a in active]
        if len(flags) != self.ep_size or not flags[self.rank]:
            raise LiveError(f"active ranks ({[int(f) for f in flags]}) must be {self.ep_size} flags "
                            f"with this rank ({self.rank}) active")
        self.active_ranks.copy_(torch.tensor(flags, dtype=torch.int32))
        self.expected_active = flags

    def dispatch(self, x, topk_slots, topk_weights) -> Dispatched:
        if x.shape[0] > self.spec.max_tokens_per_rank:
            raise LiveError(f"tokens ({x.shape[0]}) must be <= max_tokens_per_rank "
                            f"({self.spec.max_tokens_per_rank}) for the mooncake buffer")
        topk_slots = topk_slots.contiguous()
        recv_x, recv_count, native, _event, _hook = self.buffer.dispatch(
            x.contiguous(), topk_slots, self.active_ranks, self.spec.max_tokens_per_rank,
            self.spec.num_physical_experts, self.timeout_us, self.use_fp8)
        handle = LowLatencyHandle(recv_x, recv_count, native, topk_slots,
                                  topk_weights.to(torch.float32).contiguous())
        return Dispatched(handle, self._stats)

    def combine(self, payload, dispatched: Dispatched) -> torch.Tensor:
        handle = dispatched.handle
        combined, _event, _hook = self.buffer.combine(
            payload, handle.topk_slots, handle.topk_weights, self.active_ranks, self.timeout_us,
            handle.native)
        if self.check_active_ranks and self.active_ranks.sum().item() != sum(self.expected_active):
            flags = self.active_ranks.tolist()
            lost = [r for r, on in enumerate(self.expected_active) if on and not flags[r]]
            raise RuntimeError(f"mooncake marked ranks {lost} inactive (timed out after "
                               f"{self.timeout_us} us); the combined output is incomplete")
        return combined
