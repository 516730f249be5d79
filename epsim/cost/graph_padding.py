"""SGLang's CUDA-graph batch padding of a decode step: the padded rows' MoE routing.

SGLang replays a decode step on the smallest captured batch size at least the running batch
(`CudaGraphRunner.replay_prepare`: `bisect_left(capture_bs, raw_bs)`). The captured sizes
(`ServerArgs._generate_cuda_graph_batch_sizes`, read alike in the 0.5.6.post2, 0.5.10 and 0.5.14
wheels) are 1, 2, 4, 8, 12, 16-256 by 8, 272-496 by 16 and 512 on by 32, up to
`cuda_graph_max_bs`: a batch of 3 runs as 4, 9 as 12; with speculative decoding (its draft
model's decode graphs) 1-8, 10-32 by 2, 40-64 by 4, 72-256 by 8, 272 on by 16.

The padded rows run through every kernel of the graph: `populate_from_forward_batch`
(`model_executor/input_buffers.py`) copies the first `raw_bs` rows of the input ids and positions
only, so the rest keep what the buffers hold -- zeros on a fresh server, whose warm-up and
capture write none of them -- with the attention backend's fill value as their sequence length.
Their router output leaves the MoE (`_mask_topk_ids_padded_region` sets their top-k ids to -1)
only where `enable_num_token_non_padded` holds: an MoE EP world size above 1. At EP 1 the fused
MoE runs them: rows of one input (token 0 at position 0) route alike, so they add one token's
top-k experts, `pad` rows each, to the step's loads: the expert weights the kernel streams
(`padded_loads`).

Left out: the padded rows' share of the GEMMs, block ops, attention and LM head (memory-bound at
the batches that pad: their weights are read once for the step either way) and their MoE
per-token work; a speculative verify step (its rows are sequences times draft tokens); DP
attention (its batch pads to the largest rank's).
"""

from __future__ import annotations

from bisect import bisect_left
from functools import lru_cache

import numpy as np

ENGINE = "sglang"            # whose CUDA graph runner pads (the live bench's transformers does not)


@lru_cache(maxsize=16)
def capture_sizes(max_bs: int, speculative: bool = False) -> tuple[int, ...]:
    """SGLang's captured decode batch sizes up to `max_bs` (module docstring); `speculative`:
    a deployment with speculative decoding."""
    if speculative:
        sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) \
            + list(range(72, 257, 8)) + list(range(272, max_bs + 1, 16))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) \
            + list(range(512, max_bs + 1, 32))
    return tuple(s for s in sizes if s <= max_bs)


def padded_size(raw_bs: int, max_bs: int, speculative: bool = False) -> int:
    """The captured batch a decode step of `raw_bs` requests replays (`raw_bs` itself above the
    largest captured size: no graph runs it)."""
    sizes = capture_sizes(max_bs, speculative)
    index = bisect_left(sizes, raw_bs)
    return sizes[index] if index < len(sizes) else raw_bs


def pad_rows(cost_model, batch) -> int:
    """Rows SGLang's graph adds to `batch` that the MoE runs (module docstring): 0 unless a
    plain decode step (one query per sequence) replays a graph of a deployment served by SGLang
    at EP 1 without DP attention.

    Args:
        cost_model: the step's `epsim.cost.model.CostModel` (its deployment, engine, graph rule).
        batch: the step's `BatchCounts`.
    """
    d = cost_model.deployment
    if (cost_model.engine != ENGINE or d.ep_size != 1 or d.enable_dp_attention
            or batch.phase != "decode" or batch.decode_queries_per_seq != 1.0
            or not cost_model.uses_graph(batch)):
        return 0
    raw_bs = int(round(float(batch.decode_tokens.max(initial=0.0))))
    if raw_bs <= 0:
        return 0
    return padded_size(raw_bs, d.cuda_graph_max_bs, d.speculative_algorithm is not None) - raw_bs


def padded_loads(loads: np.ndarray, one_token: np.ndarray, pad: int) -> np.ndarray:
    """A step's loads with its `pad` padded rows, which route alike: `loads` ([..., layers,
    experts]) plus `pad` times one token's loads `one_token` (the same shape)."""
    return loads + float(pad) * one_token
