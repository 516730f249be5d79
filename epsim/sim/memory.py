"""One GPU's memory as SGLang lays it out: weights, the KV-cache pool, and the rest.

SGLang (python/sglang/srt/model_executor/model_runner.py, `profile_max_num_token`) measures the
free memory after the distributed init (`total`, GiB), loads the weights, and gives the KV pool
what a static share of `total` leaves:

    kv_pool = total * mem_fraction_static - weights          (SGLang: available_after_load -
                                                                total * (1 - mem_fraction_static))
    max_total_num_tokens = floor(kv_pool / bytes per token of every layer's KV)
                           (at most `--max-total-tokens`, `DeploymentSpec.max_total_tokens`:
                            model_runner_kv_cache_mixin.py `init_memory_pool`, 0.5.8)

The other `1 - mem_fraction_static` of `total` holds the activations of a prefill chunk and the
CUDA-graph buffers; `default_mem_fraction_static` is SGLang's own estimate of them
(server_args.py, `_handle_gpu_memory_settings`), used when the deployment sets no fraction.
`total` is the device's HBM (`HardwareSpec.hbm_gib`, GiB as the device reports it) less what the
CUDA context and communicators take before the weights load (`INIT_OVERHEAD_GIB`).

The layout is the deployment's (`DeploymentSpec.parallel`, `epsim.spec.parallel`): a GPU holds
`(experts + redundant) / ep_size` expert slots of every MoE layer, each a `1/moe_tp_size` share
(MoE-TP splits an expert's intermediate over its EP rank's GPUs), and `1/attn_tp_size` of the
attention, embeddings, shared experts and dense layers (a full copy with one GPU per DP group).
Weights are in the formats the deployment serves them in (`Scenario.served_model`: experts at
`weight_dtype`, the rest at `dense_weight_dtype`, embedding and LM head BF16), bytes per weight
from `epsim.spec.quant.weight_bytes_per_element`.

Bytes per token and layer (`ModelSpec.kv_bytes_per_token`, at `kv_cache_dtype` through
`epsim.spec.quant.kv_bytes_per_element`): MLA keeps the latent and the rope key, `(kv_lora_rank
+ qk_rope_head_dim)` elements (one head, shared by all); GQA keeps keys and values of its KV
heads, `2 * kv_heads * head_dim`. A GPU keeps its share of its DP group's (`kv_share`: the KV
heads split over the attn_tp_size GPUs, at least one each; all of MLA's latent). A speculative
draft (DeepSeek's MTP module: one more decoder layer) keeps its own pool of the same tokens, so
its layer joins the count, as its weights join the weights.

A deployment whose weights leave no KV pool is infeasible (`MemoryPlan.reason`); SGLang stops at
start-up with "Not enough memory" in that case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from epsim.cost.attention import kv_share

GIB = float(1 << 30)
INIT_OVERHEAD_GIB = 2.5     # CUDA context + communicators before the weights load (an SGLang
                            # log on 8 x H200, TP 8: 140.40 GiB total, 137.90 available at load)
EMBEDDING_BYTES_PER_PARAM = 2.0   # embedding and LM head stay BF16 in FP8 checkpoints
DRAFT_LAYERS = 1            # DeepSeek-V3/R1's MTP module: num_nextn_predict_layers = 1


def draft_layers(deployment) -> int:
    """Decoder layers of the speculative draft model (0 without speculative decoding)."""
    return DRAFT_LAYERS if getattr(deployment, "speculative_algorithm", None) else 0


def kv_bytes_per_token(model, deployment) -> float:
    """KV-cache bytes one token keeps on one GPU, every layer (and the draft's) together, at the
    deployment's `kv_cache_dtype`, the GPU's share of its DP group's heads (`kv_share`)."""
    layers = model.num_layers + draft_layers(deployment)
    share = kv_share(model, deployment.parallel.attn_tp_size)
    return model.kv_bytes_per_token(deployment.kv_cache_dtype) * share * layers


def weight_bytes(model, deployment) -> tuple[float, float, float]:
    """(routed experts, the rest, the draft) weight bytes one GPU holds (module doc); `model` in
    the formats the deployment serves it in (`Scenario.served_model`).

    Routed experts: `(experts + redundant) / ep_size` slots of every MoE layer, each a
    `1/moe_tp_size` share. The rest: attention, shared experts and dense FFN layers at the dense
    format, embedding and LM head in BF16, `1/attn_tp_size` of them. The draft (speculative
    decoding): one more MoE decoder layer, its experts split like the others', and its input
    projection (2 * hidden -> hidden); it shares the embedding and LM head.
    """
    par = deployment.parallel
    b, dense_b = model.weight_bytes_per_param, model.dense_weight_bytes_per_param
    slots = (model.num_experts + deployment.ep_num_redundant_experts) / deployment.ep_size
    experts = slots * model.num_moe_layers * model.expert_params * b / par.moe_tp_size
    dense = (model.attention_params * model.num_layers
             + model.num_shared_experts * model.expert_params * model.num_moe_layers
             + model.num_dense_layers * 3 * model.hidden_size * model.intermediate_size) * dense_b
    embedding = 2.0 * model.vocab_size * model.hidden_size * EMBEDDING_BYTES_PER_PARAM
    tp = par.attn_tp_size
    other = dense / tp + embedding / tp
    draft = 0.0
    if draft_layers(deployment):
        layer = (model.attention_params + model.num_shared_experts * model.expert_params
                 + 2 * model.hidden_size * model.hidden_size) * dense_b / tp
        draft = draft_layers(deployment) * (layer + slots * model.expert_params * b
                                            / par.moe_tp_size)
    return experts, other, draft


def default_mem_fraction_static(hbm_gib: float, deployment) -> float:
    """SGLang's `mem_fraction_static` when none is given (server_args.py,
    `_handle_gpu_memory_settings`): the device's memory less a reserve for activations and CUDA
    graphs, in MiB: 512 + 1.5 * max(chunked_prefill_size, 2048) + 2 * cuda_graph_max_bs +
    1024 * tp_size / 8, with DP attention + 3 * cuda_graph_max_bs * dp_size (+ 1.5 * ... when
    cuda_graph_max_bs > 300), at least 10 GiB on GPUs over 60 GiB, + 2 GiB for an EAGLE draft;
    `tp_size` and `dp_size` the deployment's layout (SGLang's `--tp-size`: every GPU of the
    instance, `--dp-size`).
    """
    par = deployment.parallel
    tp_size, dp_size = par.tp_size, par.dp_size
    gpu_mib = hbm_gib * 1024.0
    graph_bs = deployment.cuda_graph_max_bs
    reserved = (512 + max(deployment.chunked_prefill_size, 2048) * 1.5 + graph_bs * 2
                + tp_size / 8 * 1024)
    if deployment.enable_dp_attention:
        reserved += graph_bs * dp_size * 3
        if graph_bs > 300:
            reserved += graph_bs * dp_size * 1.5
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if draft_layers(deployment):
        reserved += 2 * 1024
    return round((gpu_mib - reserved) / gpu_mib, 3)


def kv_running_limit(max_total_num_tokens: int, context_tokens: float, reserve_tokens: int) -> int:
    """Requests of `context_tokens` each that one rank's pool admits, each with its reserve
    (`epsim.sim.kv_pool`'s rule: running * (context + reserve) <= capacity)."""
    return max(0, int(max_total_num_tokens // (context_tokens + reserve_tokens)))


def min_mem_fraction_static(weights_gib: float, total_gib: float) -> float:
    """The least `mem_fraction_static` that leaves any KV pool: weights / total."""
    return weights_gib / total_gib


@dataclass(frozen=True)
class MemoryPlan:
    """One GPU of a deployment (GiB unless named otherwise; module doc).

    Attributes:
        total_gib: the memory SGLang profiles (`hbm_gib - INIT_OVERHEAD_GIB`).
        reserved_gib: `total * (1 - mem_fraction_static)`: activations and CUDA graphs.
        kv_pool_gib: what the static share leaves after the weights (<= 0: no pool).
        kv_bytes_per_token: every layer's KV of one token (bytes).
        max_total_num_tokens: tokens the pool holds (SGLang's name), per DP group (0: none).
        reason: why the deployment cannot start ('' when it can).
    """

    hbm_gib: float
    total_gib: float
    mem_fraction_static: float
    mem_fraction_source: str
    expert_weights_gib: float
    other_weights_gib: float
    draft_weights_gib: float
    reserved_gib: float
    kv_pool_gib: float
    kv_bytes_per_token: float
    max_total_num_tokens: int
    reason: str

    @property
    def weights_gib(self) -> float:
        return self.expert_weights_gib + self.other_weights_gib + self.draft_weights_gib

    @property
    def fits(self) -> bool:
        return not self.reason

    def as_dict(self) -> dict:
        return {"hbm_gib": self.hbm_gib, "total_gib": self.total_gib,
                "mem_fraction_static": self.mem_fraction_static,
                "mem_fraction_source": self.mem_fraction_source,
                "weights_gib": self.weights_gib, "expert_weights_gib": self.expert_weights_gib,
                "other_weights_gib": self.other_weights_gib,
                "draft_weights_gib": self.draft_weights_gib, "reserved_gib": self.reserved_gib,
                "kv_pool_gib": self.kv_pool_gib, "kv_bytes_per_token": self.kv_bytes_per_token,
                "max_total_num_tokens": self.max_total_num_tokens}


def memory_plan(scenario) -> MemoryPlan:
    """The memory of one GPU of `scenario`'s deployment (module doc)."""
    m, c, d = scenario.served_model, scenario.cluster, scenario.deployment
    hbm = c.hardware.hbm_gib
    total = hbm - INIT_OVERHEAD_GIB
    fraction = getattr(d, "mem_fraction_static", None)
    source = "deployment"
    if fraction is None:
        fraction = default_mem_fraction_static(hbm, d)
        source = "SGLang's default for this GPU"
    experts, other, draft = (b / GIB for b in weight_bytes(m, d))
    weights = experts + other + draft
    kv_pool = total * fraction - weights
    per_token = kv_bytes_per_token(m, d)
    tokens = max(0, math.floor(kv_pool * GIB / per_token))
    cap = getattr(d, "max_total_tokens", None)
    if cap is not None:      # SGLang's --max-total-tokens: the least of it and the profiled pool
        tokens = min(tokens, int(cap))
    reason = ""
    if tokens == 0:
        reason = (f"the weights ({weights:.1f} GiB per GPU: experts {experts:.1f}, the rest "
                  f"{other + draft:.1f}) leave no KV cache under mem_fraction_static "
                  f"({fraction:g}, {source}) of {total:.1f} GiB on {c.gpu}; set "
                  f"deployment.mem_fraction_static above "
                  f"{min_mem_fraction_static(weights, total):.3f}, or use more GPUs")
    return MemoryPlan(hbm, total, fraction, source, experts, other, draft,
                      total * (1.0 - fraction), kv_pool, per_token, tokens, reason)
