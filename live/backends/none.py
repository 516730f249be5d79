"""`none`: no all-to-all. Every rank computes its local experts for all tokens, then all-reduce.

With DP attention each rank holds its own tokens, so the tokens (with their expert choices)
are all-gathered first; each rank computes the pairs whose slot it holds, the partial outputs
are summed over ranks with one all-reduce of `[all tokens, H]` in the hidden dtype, and each
rank keeps its own slice. (SGLang's TP-MoE path can reduce-scatter instead; we all-reduce,
which moves the same bytes per rank on a ring and keeps gloo support.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from live.backends.base import A2ABackend, DispatchStats, pack_choices, unpack_choices


@dataclass
class GatheredTokens:
    """All ranks' tokens, padded to the largest rank's count.

    Attributes:
        x: [ranks * max_tokens, H]; topk_slots: [ranks * max_tokens, top_k] (-1 on padding);
        topk_weights: [ranks * max_tokens, top_k] float32; tokens_per_rank: [ranks] counts;
        max_tokens: the padded count per rank.
    """

    x: torch.Tensor
    topk_slots: torch.Tensor
    topk_weights: torch.Tensor
    tokens_per_rank: list[int]
    max_tokens: int


class AllReduceBackend(A2ABackend):
    """forward_normal's collectives: all-gather tokens, all-reduce outputs."""

    name = "none"
    requires_cuda = False

    def gather(self, x: torch.Tensor, topk_slots: torch.Tensor,
               topk_weights: torch.Tensor) -> GatheredTokens:
        """All-gather this rank's tokens and their choices (identity without a group)."""
        if self.group is None:
            return GatheredTokens(x, topk_slots, topk_weights.float(), [x.shape[0]], x.shape[0])
        count = torch.tensor([x.shape[0]], dtype=torch.int64, device=x.device)
        counts = [torch.empty_like(count) for _ in range(self.ep_size)]
        dist.all_gather(counts, count, group=self.group)
        tokens_per_rank = [int(c) for c in torch.cat(counts).tolist()]
        max_tokens = max(tokens_per_rank)
        pad = max_tokens - x.shape[0]
        top_k = topk_slots.shape[1]
        x_pad = torch.cat([x, x.new_zeros((pad, x.shape[1]))])
        meta = pack_choices(topk_slots, topk_weights)
        meta = torch.cat([meta, pack_choices(topk_slots.new_full((pad, top_k), -1),
                                             topk_weights.new_zeros((pad, top_k)))])
        xs = [torch.empty_like(x_pad) for _ in range(self.ep_size)]
        metas = [torch.empty_like(meta) for _ in range(self.ep_size)]
        dist.all_gather(xs, x_pad, group=self.group)
        dist.all_gather(metas, meta, group=self.group)
        slots, weights = unpack_choices(torch.cat(metas), top_k)
        return GatheredTokens(torch.cat(xs), slots, weights, tokens_per_rank, max_tokens)

    def reduce(self, partial: torch.Tensor, gathered: GatheredTokens) -> torch.Tensor:
        """Sum partial outputs [ranks * max_tokens, H] over ranks; keep this rank's tokens."""
        if self.group is not None:
            dist.all_reduce(partial, group=self.group)
        begin = self.rank * gathered.max_tokens
        return partial[begin:begin + gathered.tokens_per_rank[self.rank]]

    def stats(self, gathered: GatheredTokens, local_expert_tokens: torch.Tensor) -> DispatchStats:
        """Every rank receives every other rank's tokens and sends its own to all."""
        device = local_expert_tokens.device
        own = gathered.tokens_per_rank[self.rank]
        return DispatchStats(
            recv_tokens_from_rank=torch.tensor(gathered.tokens_per_rank, device=device),
            send_tokens_to_rank=torch.full((self.ep_size,), own, dtype=torch.int64, device=device),
            local_expert_tokens=local_expert_tokens)
