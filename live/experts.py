"""Routed experts as fused weights, run with grouped GEMM over rows grouped by expert.

Weights follow transformers 5.x (`Qwen3MoeExperts`): `gate_up_proj [slots, 2*I, H]` (gate rows
first, then up) and `down_proj [slots, H, I]`. `torch._grouped_mm` runs the whole group in one
kernel where the device supports it; elsewhere a per-expert loop computes the same thing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from live.errors import LiveError

EXPERT_IMPLS = ("auto", "grouped_mm", "loop")


def grouped_mm_supported(device: torch.device, dtype: torch.dtype, hidden_size: int,
                         intermediate_size: int) -> bool:
    """Whether `auto` uses `torch._grouped_mm` here.

    CUDA only, compute capability >= 9.0 (H100/H200; torch <= 2.8 ran it on SM90 alone, and
    SM90 is what we measure), BF16, and rows 16-byte aligned (H and I multiples of 8). The CPU
    kernel exists in torch 2.13 but not in every version we run, so `auto` uses the loop there;
    pass `impl="grouped_mm"` to force it.
    """
    if device.type != "cuda" or dtype != torch.bfloat16 or not hasattr(torch, "_grouped_mm"):
        return False
    if hidden_size % 8 or intermediate_size % 8:
        return False
    return torch.cuda.get_device_capability(device) >= (9, 0)


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Rows of group g times `weight[g].T`, one `torch._grouped_mm` call.

    Args:
        x: [rows, in] rows grouped by expert, group g = rows offsets[g-1]:offsets[g].
        weight: [groups, out, in].
        offsets: [groups] int32, cumulative row ends.
    Returns:
        [rows, out].
    """
    return torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)


def swiglu_mlp(x: torch.Tensor, gate_up_weight: torch.Tensor,
               down_weight: torch.Tensor) -> torch.Tensor:
    """One SwiGLU MLP (an expert, a shared expert, a dense layer): `down(silu(gate(x)) * up(x))`.

    Args:
        x: [rows, H]; gate_up_weight: [2*I, H] (gate rows first, then up); down_weight: [H, I].
    Returns:
        [rows, H].
    """
    gate, up = F.linear(x, gate_up_weight).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, down_weight)


def expert_mlp(x: torch.Tensor, counts: torch.Tensor, gate_up_proj: torch.Tensor,
               down_proj: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    """SwiGLU experts on rows grouped by expert: `down(silu(gate(x)) * up(x))`.

    Args:
        x: [rows, H] token copies, rows of slot j contiguous and in slot order.
        counts: [slots] int64, rows per slot (sums to rows).
        gate_up_proj: [slots, 2*I, H]; down_proj: [slots, H, I].
        impl: "auto" | "grouped_mm" | "loop".
    Returns:
        [rows, H] expert outputs (not yet weighted by the router).
    """
    if impl not in EXPERT_IMPLS:
        raise LiveError(f"experts_impl ({impl!r}) must be one of {', '.join(EXPERT_IMPLS)}")
    if x.shape[0] == 0:
        return x.new_zeros((0, down_proj.shape[1]))
    if impl == "auto":
        impl = "grouped_mm" if grouped_mm_supported(
            x.device, x.dtype, x.shape[1], down_proj.shape[2]) else "loop"
    if impl == "grouped_mm":
        offsets = torch.cumsum(counts, dim=0).to(torch.int32)
        gate, up = grouped_linear(x, gate_up_proj, offsets).chunk(2, dim=-1)
        return grouped_linear(F.silu(gate) * up, down_proj, offsets)
    out = torch.empty((x.shape[0], down_proj.shape[1]), dtype=x.dtype, device=x.device)
    begin = 0
    for slot, count in enumerate(counts.tolist()):
        if count:
            out[begin:begin + count] = swiglu_mlp(x[begin:begin + count], gate_up_proj[slot],
                                                  down_proj[slot])
            begin += count
    return out


class FusedExperts(nn.Module):
    """The routed experts a rank holds: one weight row per local physical slot.

    Parameter names match transformers 5.x (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`),
    with the first dimension the rank's slots instead of all experts.
    """

    def __init__(self, num_slots: int, hidden_size: int, intermediate_size: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 impl: str = "auto"):
        super().__init__()
        if impl not in EXPERT_IMPLS:
            raise LiveError(f"experts_impl ({impl!r}) must be one of {', '.join(EXPERT_IMPLS)}")
        self.num_slots, self.impl = num_slots, impl
        self.gate_up_proj = nn.Parameter(torch.zeros(num_slots, 2 * intermediate_size, hidden_size,
                                                     dtype=dtype, device=device),
                                         requires_grad=False)
        self.down_proj = nn.Parameter(torch.zeros(num_slots, hidden_size, intermediate_size,
                                                  dtype=dtype, device=device),
                                      requires_grad=False)

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """[rows, H] grouped by slot, counts [slots] -> [rows, H] unweighted outputs."""
        return expert_mlp(x, counts, self.gate_up_proj, self.down_proj, self.impl)

    def weights(self) -> list[torch.Tensor]:
        """The tensors EPLB moves, first dimension = local slots: [gate_up_proj, down_proj]."""
        return [self.gate_up_proj.data, self.down_proj.data]
