"""Grouped-GEMM experts: torch._grouped_mm and the per-expert loop compute the same SwiGLU."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from live.errors import LiveError
from live.experts import expert_mlp, grouped_mm_supported


def _weights(rng, slots=4, hidden=32, inter=16):
    gate_up = torch.from_numpy(rng.standard_normal((slots, 2 * inter, hidden)).astype(np.float32))
    down = torch.from_numpy(rng.standard_normal((slots, hidden, inter)).astype(np.float32))
    return gate_up / hidden ** 0.5, down / inter ** 0.5


def test_loop_is_swiglu_per_slot(rng):
    gate_up, down = _weights(rng)
    counts = torch.tensor([3, 0, 2, 1])
    x = torch.from_numpy(rng.standard_normal((6, 32)).astype(np.float32))
    out = expert_mlp(x, counts, gate_up, down, impl="loop")
    slot_of_row = [0, 0, 0, 2, 2, 3]
    for row, slot in enumerate(slot_of_row):
        gate, up = (gate_up[slot] @ x[row]).chunk(2)
        torch.testing.assert_close(out[row], down[slot] @ (F.silu(gate) * up))


def test_grouped_mm_equals_loop_on_cpu(rng):
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("torch._grouped_mm is missing in this torch build")
    gate_up, down = _weights(rng)
    counts = torch.tensor([3, 0, 2, 1])
    x = torch.from_numpy(rng.standard_normal((6, 32)).astype(np.float32))
    try:
        grouped = expert_mlp(x, counts, gate_up, down, impl="grouped_mm")
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"torch._grouped_mm has no CPU kernel in this build ({exc})")
    torch.testing.assert_close(grouped, expert_mlp(x, counts, gate_up, down, impl="loop"))


def test_padding_rows_past_the_counts_are_left_alone(rng):
    gate_up, down = _weights(rng)
    counts = torch.tensor([1, 1, 0, 0])
    x = torch.from_numpy(rng.standard_normal((5, 32)).astype(np.float32))
    out = expert_mlp(x, counts, gate_up, down, impl="loop")
    torch.testing.assert_close(out[:2], expert_mlp(x[:2], counts, gate_up, down, impl="loop"))
    assert out.shape == (5, 32)


def test_auto_uses_the_loop_on_cpu_and_rejects_unknown_impls(rng):
    assert not grouped_mm_supported(torch.device("cpu"), torch.bfloat16, 64, 32)
    gate_up, down = _weights(rng)
    with pytest.raises(LiveError, match=r"experts_impl \('cutlass'\) must be one of auto, "
                                        r"grouped_mm, loop"):
        expert_mlp(torch.zeros(1, 32), torch.tensor([1, 0, 0, 0]), gate_up, down, impl="cutlass")
    assert expert_mlp(torch.zeros(0, 32), torch.zeros(4, dtype=torch.int64), gate_up, down).shape == (0, 32)
