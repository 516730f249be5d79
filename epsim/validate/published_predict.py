"""Predictions of published results from datasheet figures only (no calibration profile).

One function per kind of published result; each takes the entry's stated conditions and
returns the predicted figure in the published unit. Nothing here reads a published value:
the figures enter only `epsim.validate.published` to be compared with.
"""

from __future__ import annotations

from math import comb

import numpy as np

from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.cost.attention import BatchCounts
from epsim.eplb import Placement, compute_placement
from epsim.profile import Profile
from epsim.routing import skew_from_dict
from epsim.routing.popularity import zipf_shares
from epsim.sim.memory import GIB, kv_bytes_per_token, weight_bytes
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import ModelSpec
from epsim.zoo import get_hardware, get_model

FP8_FACTOR = (1 + 4 / 128) / 2       # DeepEP's tests: FP8 bytes per BF16 byte (payload + scales)
SEED = 0


def datasheet_profile(gpu: str) -> Profile:
    """A profile with no components: every coefficient is its datasheet default."""
    return Profile(name=f"datasheet-{gpu}", hardware=gpu)


def cost_model(model: ModelSpec, gpu: str, ep: int, backend: str = "deepep", mode: str = "auto",
               network: str | None = None, **deployment) -> CostModel:
    """A CostModel of `ep` ranks of `gpu` (nodes = ep / GPUs per node) on the datasheet profile."""
    per_node = get_hardware(gpu).gpus_per_node
    cluster = ClusterSpec(gpu=gpu, num_nodes=max(1, ep // per_node), network=network)
    spec = DeploymentSpec(ep_size=ep, moe_a2a_backend=backend, deepep_mode=mode, **deployment)
    return CostModel(model, cluster, spec, datasheet_profile(gpu))


def _hit(pool: int, held: int, top_k: int) -> float:
    """P(a token's `top_k` distinct experts, uniform over `pool`, include one of `held`)."""
    return 1.0 - comb(pool - held, top_k) / comb(pool, top_k)


def deepep_layer(gpu: str, ep: int, tokens: int, kernel: str, stage: str,
                 experts: int = 256, top_k: int = 8, group_limited: bool = True,
                 network: str | None = None) -> dict:
    """One DeepEP dispatch or combine of DeepSeek-V3 shapes, balanced (uniform) routing.

    `group_limited` follows DeepEP's internode test: groups = nodes, each token in its top
    min(nodes, 4) groups. Returns the time (µs) and DeepEP's logical bytes per rank: tokens x
    distinct destination nodes incl. its own (internode), tokens received incl. its own
    (intranode), tokens x top-k copies (low-latency); FP8 dispatch counts (1 + 4/128) bytes per
    value, BF16 combine 2.
    """
    per_node = get_hardware(gpu).gpus_per_node
    nodes = max(1, ep // per_node)
    model = get_model("DeepSeek-V3")
    if group_limited and kernel == "normal":
        model = model.model_copy(update={"num_expert_groups": nodes, "topk_group": min(nodes, 4)})
    cm = cost_model(model, gpu, ep, "deepep", kernel, network=network, dispatch_dtype="fp8")
    loads = np.full((1, experts), ep * tokens * top_k / experts)          # [layers, experts]
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, experts, ep), experts, ep,
                                               per_node))
    moe = cm.moe(loads, np.full(ep, float(tokens)), tables,
                 "decode" if kernel == "low_latency" else "prefill")
    time_us = float((moe.dispatch_us if stage == "dispatch" else moe.combine_us)[0])
    per_value = 2.0 * (FP8_FACTOR if stage == "dispatch" else 1.0)
    hidden = model.hidden_size
    if kernel == "low_latency":
        logical = tokens * top_k
    elif nodes == 1:
        logical = ep * tokens * _hit(experts, experts // ep, top_k)
    else:
        groups = min(nodes, 4) if group_limited else nodes
        per = experts // nodes
        logical = tokens * groups * _hit(groups * per, per, top_k)
    return {"time_us": time_us, "logical_bytes": logical * hidden * per_value,
            "cost_model": cm, "traffic": moe.traffic}


def deepep_bandwidth_gbps(gpu: str, ep: int, tokens: int, stage: str, version: int = 1) -> float:
    """DeepEP normal kernels: logical bytes / predicted time, GB/s. V2 counts every token sent to
    a node or received by a rank with its top-k indices and weights (12 bytes per choice)."""
    out = deepep_layer(gpu, ep, tokens, "normal", stage, group_limited=(version == 1))
    logical = out["logical_bytes"]
    if version == 2 and stage == "dispatch":
        hidden = get_model("DeepSeek-V3").hidden_size
        logical *= (hidden * 2 * FP8_FACTOR + 12 * 8) / (hidden * 2 * FP8_FACTOR)
    return logical / out["time_us"] * 1e-3                             # bytes/µs -> GB/s


def deepep_latency_us(gpu: str, ep: int, tokens: int, stage: str) -> float:
    """DeepEP low-latency kernels: predicted µs per dispatch or combine."""
    return deepep_layer(gpu, ep, tokens, "low_latency", stage)["time_us"]


def serving_throughput(phase: str, ep: int, gpu: str = "H100", redundant: int = 0,
                       tokens_per_rank: int = 0, input_len: int = 0, batch_per_rank: int = 0,
                       context: int = 0, model_name: str = "DeepSeek-V3") -> float:
    """Tokens/s per node of a steady batch: prefill input tokens or decode output tokens.

    One step of the cost model (DP attention, DeepEP normal for prefill / low-latency with CUDA
    graphs for decode, FP8 dispatch, two-batch overlap) at balanced routing; experts laid out
    contiguously, redundant slots replicating the first experts.
    """
    model = get_model(model_name)
    mode = "normal" if phase == "prefill" else "low_latency"
    cm = cost_model(model, gpu, ep, "deepep", mode, dispatch_dtype="fp8", enable_dp_attention=True,
                    enable_two_batch_overlap=True, enable_eplb=redundant > 0,
                    ep_num_redundant_experts=redundant, cuda_graph_max_bs=max(batch_per_rank, 1))
    e, layers = model.num_experts, model.num_moe_layers
    if phase == "prefill":
        requests = tokens_per_rank / input_len
        t = np.full(ep, float(tokens_per_rank))
        z = np.zeros(ep)
        batch = BatchCounts(z, z, t, t, np.full(ep, requests * input_len * (input_len + 1) / 2),
                            np.full(ep, requests), "prefill", np.full(ep, requests))
        tokens = tokens_per_rank
    else:
        batch = BatchCounts.uniform_decode(ep, batch_per_rank, context)
        tokens = batch_per_rank
    loads = np.full((layers, e), ep * tokens * model.top_k / e)           # [layers, experts]
    p2l = contiguous_placement(layers, e, ep, redundant)
    per_node = get_hardware(gpu).gpus_per_node
    tables = build_tables(Placement.on_cluster(p2l, e, ep, per_node))
    step = cm.step(batch, loads, tables)
    return per_node * tokens / (step.step_us * 1e-6)


def zipf_alpha_for_cv(cv: float, num_experts: int) -> float:
    """The Zipf exponent whose expert shares have coefficient of variation `cv` (bisection)."""
    lo, hi = 0.0, 5.0
    for _ in range(60):
        mid = (lo + hi) / 2
        shares = zipf_shares(num_experts, mid)
        if shares.std() / shares.mean() < cv:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def eplb_imbalance(ep: int, slots_per_rank: int, eplb: bool, expert_cv: float,
                   tokens: int, num_layers: int = 58, num_experts: int = 256, top_k: int = 8,
                   window: int = 100, iterations: int = 50) -> float:
    """Mean over layers and iterations of the rank imbalance ratio (max - mean) / mean.

    Expert popularity: Zipf with the given coefficient of variation, hot experts reshuffled per
    layer (epsim's SkewModel). With EPLB, DeepSeek's algorithm places `ep * slots_per_rank`
    slots from `window` iterations of statistics and each replica takes an equal share; the
    ratio is measured on `iterations` later iterations (fresh samples of the same popularity).
    """
    alpha = zipf_alpha_for_cv(expert_cv, num_experts)
    skew = skew_from_dict({"kind": "zipf", "alpha": alpha}, num_layers, num_experts, top_k,
                          seed=SEED)
    rng = np.random.default_rng([SEED, 0xE91B])
    slots = ep * slots_per_rank
    if eplb:
        stats = sum(skew.loads(tokens, rng) for _ in range(window))      # [layers, experts]
        placement = compute_placement("deepseek", stats, slots, 1, 1, ep)
        p2l, count = placement.physical_to_logical, placement.logical_count
    else:
        p2l = contiguous_placement(num_layers, num_experts, ep)
        count = np.ones((num_layers, num_experts))
    ratios = []
    for _ in range(iterations):
        loads = skew.loads(tokens, rng)                                  # [layers, experts]
        slot = np.take_along_axis(loads / count, p2l, axis=1)            # [layers, slots]
        rank = slot.reshape(num_layers, ep, -1).sum(axis=2)              # [layers, ranks]
        mean = rank.mean(axis=1)
        ratios.append((rank.max(axis=1) - mean) / mean)
    return float(np.mean(ratios))


def weight_bytes_per_gpu(model: ModelSpec, ep: int) -> float:
    """Weight bytes one GPU holds with DP attention (`epsim.sim.memory.weight_bytes`)."""
    return sum(weight_bytes(model, DeploymentSpec(ep_size=ep, enable_dp_attention=True)))


def offline_throughput_per_gpu(model_name: str, gpu: str, ep: int, isl: int, osl: int,
                               weight_dtype: str = "fp8", kv_mem_fraction: float = 0.9,
                               max_batch: int = 2048, backend: str = "none") -> dict:
    """Output tokens/s per GPU of an offline max-load run (every request `isl` in, `osl` out).

    The batch is what the KV cache holds: `kv_mem_fraction` of the HBM left after the weights,
    over `num_layers * kv_bytes_per_token_per_layer` (BF16 cache) per token at the mean context
    `isl + osl/2`, capped at `max_batch`. In steady state each step decodes the batch and
    prefills the requests that replace finished ones (`batch * isl / osl` tokens): one step of
    the cost model (DP attention, eager) at balanced routing gives the step time.
    """
    model = get_model(model_name).model_copy(update={"weight_dtype": weight_dtype})
    hw = get_hardware(gpu)
    kv_budget = kv_mem_fraction * (hw.hbm_gib * GIB - weight_bytes_per_gpu(model, ep))
    kv_per_token = kv_bytes_per_token(model, DeploymentSpec(ep_size=ep))
    context = isl + osl / 2
    batch = float(min(max_batch, kv_budget / kv_per_token / context))
    prefill = batch * isl / osl
    cm = cost_model(model, gpu, ep, backend, "auto", dispatch_dtype="fp8",
                    enable_dp_attention=True, chunked_prefill_size=max(int(prefill), 1))
    t = np.full(ep, batch)
    p = np.full(ep, prefill)
    counts = BatchCounts(t, t * context, p, p, p / isl * isl * (isl + 1) / 2, t + p / isl, "prefill",
                         p / isl)
    e, layers = model.num_experts, model.num_moe_layers
    loads = np.full((layers, e), ep * (batch + prefill) * model.top_k / e)
    tables = build_tables(Placement.on_cluster(contiguous_placement(layers, e, ep), e, ep,
                                               hw.gpus_per_node))
    step = cm.step(counts, loads, tables)
    return {"tokens_per_s_per_gpu": batch / (step.step_us * 1e-6), "batch_per_gpu": batch}
