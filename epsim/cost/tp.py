"""The tensor-parallel collectives of a step, where SGLang runs them (`layers/communicator.py`,
`layers/dp_attention.py`), for a deployment's layout (`epsim.spec.parallel.Parallel`).

Per layer, with `T_g` the tokens of the busiest attention group (a DP group, or the whole batch
without DP attention) and `H` the hidden size (BF16, 2 bytes):

  attention TP (attn_tp_size > 1): o_proj leaves each GPU of the group a partial sum of
    `[T_g, H]`. With an all-to-all MoE backend (`deepep`, `mooncake`, `torch`) the MoE takes
    its input scattered: a reduce-scatter over the group hands each GPU `T_g / attn_tp` tokens
    to dispatch, and an all-gather before the next layer's attention gives the group its
    tokens back (two NCCL ring passes). With `none` it is one all-reduce over the group.
  MoE (`none` backend): every GPU runs its experts (its EP rank's, the intermediate split over
    the `moe_tp_size` GPUs of the rank) on every token of the step, gathered first; the
    partial outputs are summed by one all-reduce over all `tp_size` GPUs: MoE-TP's reduce and
    EP's in one collective. SGLang's DP-attention gather is an all-reduce of a padded buffer
    (`dp_gather_partial`); the `none` backend prices it as the all-gather it measured.
  MoE, SGLang's FP4 all-gather (`DeploymentSpec.moe_fp4_allgather`; `StandardDispatcher`,
    `layers/moe/token_dispatcher/standard.py`): each DP rank quantises its tokens to NVFP4 and
    `all_gatherv`s the values, their E4M3 scales and its top-k weights and ids
    (`FP4_GATHER_BYTES_PER_TOKEN`: 4,096 bytes a DeepSeek token against BF16's 14,336); the
    experts' BF16 outputs go back by one `reduce_scatterv` (`combine`; `forward_normal` skips
    its all-reduce), a ring's one pass. Both priced as the all-gather above (NCCL's ring, one
    pass, at their bytes); the quantise and scale-swizzle kernels beside them are not priced.

Device time comes from the all-reduce model (`epsim.cost.allreduce`: custom one-shot /
two-shot or NCCL, as SGLang picks); an eager step adds `any/allreduce/host` per collective
where a profile has it. The `none` backend's eager collectives keep its measured
`none/allgather` and `none/allreduce` (the live block's, device + host) on the GPU counts they
were measured on; elsewhere its all-gather is NCCL's ring, one pass, of the all-reduce model.
"""

from __future__ import annotations

import math

from epsim import vocab
from epsim.cost.allreduce import allreduce_us, ring_us
from epsim.cost.attention import BatchCounts
from epsim.cost.comm import collective_us
from epsim.cost.params import CostParams

HIDDEN_BYTES = 2.0        # BF16 hidden states
NVFP4_GROUP = 16          # NVFP4: one E4M3 scale byte per 16 values
TOPK_ENTRY_BYTES = 8.0    # one top-k weight (float32) and id (int32)


def fp4_gather_bytes_per_token(hidden_size: int, top_k: int) -> float:
    """Bytes one token adds to SGLang's FP4 all-gather: its NVFP4 values (half a byte each),
    one scale byte per 16 of them, and its top-k weights and ids (`StandardDispatcher.dispatch`:
    `all_gatherv([topk_weights, topk_ids, x, x_sf])`)."""
    return 0.5 * hidden_size + hidden_size / NVFP4_GROUP + TOPK_ENTRY_BYTES * top_k
# the all-reduce fit an eager `none` reduce beyond its measured GPU counts names (the message
# sizes of a prefill run NCCL; `epsim.cost.allreduce`)
ALLREDUCE_KEY = "any/allreduce/graph/nccl"


def _span(params: CostParams, num_gpus: int) -> tuple[int, int]:
    """(NVLink domains, hosts) `num_gpus` consecutive GPUs of the deployment span."""
    tp = params.tp_collectives
    return math.ceil(num_gpus / tp.gpus_per_node), math.ceil(num_gpus / tp.gpus_per_host)


def tp_allreduce_us(num_bytes: float, num_gpus: int, params: CostParams, graph: bool) -> float:
    """One SGLang all-reduce of `num_bytes` over `num_gpus` GPUs: device time by algorithm,
    plus the host overhead in an eager step (µs)."""
    if num_gpus <= 1 or num_bytes <= 0:
        return 0.0
    tp = params.tp_collectives
    nodes, hosts = _span(params, num_gpus)
    t = allreduce_us(num_bytes, num_gpus, nodes, tp.allreduce, hosts, tp.sm100)
    return t if graph else t + tp.host_us


def attention_collectives_us(params: CostParams, batch: BatchCounts, graph: bool) -> float:
    """The collectives around one layer's attention of the busiest attention group (µs): the
    reduce-scatter and all-gather (all-to-all backends) or the all-reduce (`none`) over the
    group's `attn_tp_size` GPUs; 0 with one GPU per group."""
    attn_tp = params.parallel.attn_tp_size
    if attn_tp <= 1:
        return 0.0
    num_bytes = float(batch.tokens.max(initial=0.0)) * params.model.hidden_size * HIDDEN_BYTES
    if num_bytes <= 0:
        return 0.0
    if not vocab.is_deepep_class(params.backend):
        return tp_allreduce_us(num_bytes, attn_tp, params, graph)
    tp = params.tp_collectives
    nodes, _ = _span(params, attn_tp)
    passes = float(ring_us(num_bytes, attn_tp, nodes, tp.allreduce["nccl"], passes=1))
    return 2.0 * (passes if graph else passes + tp.host_us)


def measured_none_reduce(params: CostParams) -> bool:
    """Whether an eager step prices the `none` backend's reduce by its measured component
    (`none/allreduce`: a fit measured on the deployment's `tp_size` GPUs,
    `CollectiveParams.allreduce_gpus`); else by the all-reduce model (`none_collectives_us`),
    which owns the all-reduce's physics."""
    gpus = params.collectives.allreduce_gpus
    return bool(gpus) and gpus[0] <= params.parallel.tp_size <= gpus[-1]


def none_collectives_us(params: CostParams, num_tokens: float, graph: bool) -> tuple[float, float]:
    """(gather, reduce) µs of the `none` backend's MoE layer for `num_tokens` tokens of the step,
    over the instance's `tp_size` GPUs (the gather only with DP attention: without it every GPU
    holds the group's tokens already): both by the all-reduce model (the gather its NCCL ring's
    one pass, `nccl_allgather_us`) in a CUDA-graph step, as measured (`none/allgather`,
    `none/allreduce`) in an eager one -- on the GPU counts that fit was measured on
    (`CollectiveParams.allreduce_gpus`; the live block's two GPUs for the shipped H200
    profile). Beyond them an eager reduce is SGLang's all-reduce as TP attention's is (the
    all-reduce model plus its host): the two-GPU fit's fixed cost and bus rate stretched to 8
    GPUs priced DeepSeek-R1's 8-GPU MoE-TP reduce of an 8192-token prefill (117 MB) at 826 µs,
    where aiconfigurator-core's h200_sxm NCCL table (nccl 2.26.2 / 2.29.2, 8 GPUs) has ~500."""
    par = params.parallel
    num_bytes = num_tokens * params.model.hidden_size * HIDDEN_BYTES
    nodes, _ = _span(params, par.tp_size)
    if params.deployment.moe_fp4_allgather:      # NVFP4 gathered, BF16 reduce-scattered
        m = params.model
        fp4_bytes = num_tokens * fp4_gather_bytes_per_token(m.hidden_size, m.top_k)
        if graph or not measured_none_reduce(params):
            return (nccl_allgather_us(fp4_bytes, par.tp_size, params, graph),
                    nccl_allgather_us(num_bytes, par.tp_size, params, graph))
        gather = params.collectives.allgather
        return (float(collective_us(fp4_bytes, par.tp_size, nodes, 1, gather)),
                float(collective_us(num_bytes, par.tp_size, nodes, 1, gather)))
    if graph or not measured_none_reduce(params):
        gather = (nccl_allgather_us(num_bytes, par.tp_size, params, graph)
                  if par.dp_size > 1 else 0.0)
        return gather, tp_allreduce_us(num_bytes, par.tp_size, params, graph)
    gather = (float(collective_us(num_bytes, par.tp_size, nodes, 1, params.collectives.allgather))
              if par.dp_size > 1 else 0.0)
    return gather, float(collective_us(num_bytes, par.tp_size, nodes, 2, params.collectives.allreduce))


def nccl_allgather_us(num_bytes: float, num_gpus: int, params: CostParams, graph: bool) -> float:
    """NCCL's all-gather of `num_bytes` (the gathered whole) over `num_gpus` GPUs: the
    all-reduce model's ring, one pass (`ring_us(..., passes=1)`, `any/allreduce/graph/nccl`),
    plus the host overhead in an eager step (µs). On aiconfigurator-core's nccl-tests
    all-gathers, fitted on the all-reduce rows alone, it is within 8-10 % on every system."""
    if num_gpus <= 1 or num_bytes <= 0:
        return 0.0
    nodes, _ = _span(params, num_gpus)
    t = float(ring_us(num_bytes, num_gpus, nodes, params.tp_collectives.allreduce["nccl"], passes=1))
    return t if graph else t + params.tp_collectives.host_us
