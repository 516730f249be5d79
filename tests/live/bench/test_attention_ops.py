"""`epsim.cost.attention_ops` counts transformers' Qwen3 attention block: the launches besides
the attention kernel (`KERNELS`) and the bytes its own ops move per token
(`bytes_per_token`), against the aten ops the block dispatches on the CPU in BF16."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from epsim.cost.attention_ops import KERNELS, bytes_per_token  # noqa: E402
from live.bench.layer_ops import Layer, LayerShape, StaticKV  # noqa: E402

NO_KERNEL = {"view", "t", "unsqueeze", "slice", "_unsafe_view", "expand", "alias", "transpose",
             "detach", "_reshape_alias", "as_strided"}
GEMM = {"mm", "addmm", "bmm"}
SHAPE = LayerShape("cpu-attention", 256, 8, 2, 32, 128, 16, 2)


class Count(TorchDispatchMode):
    """The kernels a forward dispatches, each with the bytes of its tensor arguments and
    result (what an elementwise kernel reads and writes)."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name not in NO_KERNEL:
            flat = [b for a in args for b in (a if isinstance(a, (list, tuple)) else (a,))]
            # an in-place op (`copy_`) writes into its first argument: its result adds no bytes
            tensors = [a for a in (*flat, *(() if name.endswith("_") else (out,)))
                       if isinstance(a, torch.Tensor)]
            self.ops.append((name, sum(t.numel() * t.element_size() for t in tensors)))
        return out


def _ops(tokens: int) -> list[tuple[str, int]]:
    layer = Layer(SHAPE, torch.device("cpu"), torch.bfloat16, 0)
    x = torch.randn(tokens, 1, SHAPE.hidden_size, dtype=torch.bfloat16)
    keys = torch.randn(tokens, SHAPE.num_kv_heads, 64, SHAPE.head_dim, dtype=torch.bfloat16)
    position = layer.rotary(x, torch.full((tokens, 1), 63))
    cache = StaticKV(keys, keys.clone())
    with torch.no_grad(), Count() as count:
        layer.attention_block(x, position, cache)
    return count.ops


def test_launches_besides_the_attention_kernel():
    ops = _ops(4)
    attention = [n for n, _ in ops if "attention" in n]
    assert len(attention) == 1                          # SDPA: the fitted kernel's
    assert len(ops) - len(attention) == KERNELS
    assert sum(n in GEMM for n, _ in ops) == 4          # q, k, v, o projections


def test_bytes_per_token_of_the_block_own_ops():
    """The elementwise kernels' bytes grow per token as `bytes_per_token` says, but for the
    cos and sin rows RoPE reads (8 bytes per head_dim element, which it leaves out)."""
    def own(tokens):
        return sum(b for n, b in _ops(tokens) if n not in GEMM and "attention" not in n)
    per_token = (own(8) - own(4)) / 4
    h, q, k = 256, 8 * 32, 2 * 32
    expected = bytes_per_token(h, q, k, q + k, 1 + 8 + 2, 2 * k)
    assert per_token == pytest.approx(expected + 8 * SHAPE.head_dim, rel=1e-9)
