"""The low-latency packed layout (Mooncake EP, DeepEP LL): compaction without a host sync.

The layout is built here the way the kernels fill it (rows of expert j from each source rank,
back to back), so these run on CPU; the kernels themselves run in the GPU suite.
"""

import numpy as np
import pytest
import torch

from live.backends import packed
from live.backends.base import BackendSpec
from live.errors import LiveError


def _packed_layout(rng, counts, rows_per_expert=8, hidden=256, dtype=torch.float32):
    values = torch.from_numpy(rng.standard_normal((len(counts), rows_per_expert, hidden))
                              .astype(np.float32)).to(dtype)
    return values, torch.tensor(counts, dtype=torch.int32)


def test_compact_index_is_nonzero_padded():
    mask = torch.tensor([True, False, True, True, False, False, True])
    np.testing.assert_array_equal(packed.compact_index(mask, 6, fill=99).numpy(), [0, 2, 3, 6, 99, 99])
    np.testing.assert_array_equal(packed.compact_index(mask, 2, fill=99).numpy(), [0, 2])


def test_unpack_groups_valid_rows_by_expert_and_pack_restores_them(rng):
    values, counts = _packed_layout(rng, [2, 0, 5, 1])
    rows, index, out_counts = packed.unpack(values, counts, torch.float32, max_pairs=12)
    assert rows.shape == (12, 256) and out_counts.tolist() == [2, 0, 5, 1]
    expected = torch.cat([values[0, :2], values[2, :5], values[3, :1]])
    torch.testing.assert_close(rows[:8], expected)
    back = packed.pack(rows * 2, index)
    assert back.shape == values.shape and back.is_contiguous()
    for expert, count in enumerate([2, 0, 5, 1]):
        torch.testing.assert_close(back[expert, :count], values[expert, :count] * 2)


def test_fp8_rows_are_dequantized_with_their_block_scales(rng):
    values, counts = _packed_layout(rng, [3, 1])
    blocks = values.view(2, 8, 2, 128)
    amax = blocks.abs().amax(-1).clamp(min=1e-4)                         # [experts, rows, H/128]
    fp8 = (blocks * (448.0 / amax.unsqueeze(-1))).to(torch.float8_e4m3fn).view(2, 8, 256)
    scales = (amax / 448.0).transpose(1, 2).contiguous().transpose(1, 2)  # kernel's strided view
    rows, _, _ = packed.unpack((fp8, scales), counts, torch.float32, max_pairs=6)
    expected = torch.cat([values[0, :3], values[1, :1]])
    torch.testing.assert_close(rows[:4], expected, rtol=0.07, atol=0.02)


def test_send_and_receive_counts():
    slots = torch.tensor([[0, 5], [3, -1], [7, 6]])                      # 4 slots per rank
    assert packed.send_to_rank(slots, 4, 2).tolist() == [2, 3]
    layout = torch.tensor([[(0 << 32) | 2, (2 << 32) | 1], [0, (0 << 32) | 4]])
    assert packed.recv_from_rank(layout).tolist() == [2, 5]
    assert packed.max_pairs(2, 16, 8, 4) == 2 * 16 * 4


@pytest.mark.parametrize("hidden, top_k, message", [
    (100, 8, r"hidden_size \(100\) must be a multiple of 256 and <= 8192 for the mooncake"),
    (8448, 8, r"hidden_size \(8448\) must be a multiple of 256 and <= 8192"),
    (4096, 18, r"top_k \(18\) must be <= 17 for the mooncake backend"),
])
def test_low_latency_limits(hidden, top_k, message):
    spec = BackendSpec(hidden_size=hidden, num_physical_experts=16, top_k=top_k)
    with pytest.raises(LiveError, match=message):
        packed.check_low_latency_spec(spec, "mooncake", 8192, 17)
