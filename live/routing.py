"""Router (softmax top-k as Qwen3 does it) and forced routing drawn from `epsim.routing`.

Forced routing lets the bench run the block on exactly the expert choices the simulator
draws: `SkewModel.topk` gives `[tokens, top_k]` ids from the same popularity and seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from live.errors import LiveError


@dataclass(frozen=True)
class Routing:
    """Expert choices of a batch.

    Attributes:
        topk_ids: [tokens, top_k] int64 logical expert ids.
        topk_weights: [tokens, top_k] float32 routing weights (fp32 as the DeepEP-class combine
            kernels take them; experts multiply in the hidden dtype, as transformers does).
    """

    topk_ids: torch.Tensor
    topk_weights: torch.Tensor

    def check(self, num_tokens: int, top_k: int, num_experts: int) -> None:
        """Raise LiveError when shapes or ids do not fit the block."""
        for name in ("topk_ids", "topk_weights"):
            shape = tuple(getattr(self, name).shape)
            if shape != (num_tokens, top_k):
                raise LiveError(f"{name} (shape {list(shape)}) must be [tokens, top_k] = "
                                f"[{num_tokens}, {top_k}]")
        if self.topk_ids.dtype != torch.int64:
            raise LiveError(f"topk_ids (dtype {self.topk_ids.dtype}) must be torch.int64")
        if num_tokens and (int(self.topk_ids.min()) < 0 or int(self.topk_ids.max()) >= num_experts):
            raise LiveError(f"topk_ids (range [{int(self.topk_ids.min())}, "
                            f"{int(self.topk_ids.max())}]) must lie in [0, {num_experts})")


def route(hidden_states: torch.Tensor, gate_weight: torch.Tensor, top_k: int,
          norm_topk_prob: bool = True) -> Routing:
    """Qwen3's router: logits in the model dtype, softmax in fp32, top-k, optional renorm.

    Args:
        hidden_states: [tokens, H]; gate_weight: [experts, H] (no bias).
    Returns:
        Routing with fp32 weights.
    """
    logits = F.linear(hidden_states, gate_weight)                          # [tokens, experts]
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return Routing(topk_ids=ids, topk_weights=weights)


def forced_routing(skew, num_tokens: int, rng: np.random.Generator, layer: int = 0,
                   step: int = 0, device: torch.device | str = "cpu") -> Routing:
    """Expert choices from an `epsim.routing.SkewModel`, with random normalized weights.

    The ids are `skew.topk(num_tokens, rng, layer)` — the simulator's own generator — so a
    measured skew is exactly the simulated one. Weights are drawn from the same `rng` (uniform,
    renormalized to sum to 1 per token); they do not change traffic or expert load.

    Returns:
        Routing on `device`.
    """
    ids = skew.topk(num_tokens, rng, layer=layer, step=step)               # [tokens, top_k]
    raw = rng.uniform(0.05, 1.0, ids.shape)
    weights = raw / raw.sum(axis=1, keepdims=True)
    return Routing(topk_ids=torch.from_numpy(np.ascontiguousarray(ids)).to(device),
                   topk_weights=torch.from_numpy(weights.astype(np.float32)).to(device))
