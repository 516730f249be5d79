"""Correctness checks that run on spawned EP ranks: the same code for CPU tests and the GPU suite.

`equality_worker` runs the EP model next to a single-device reference on the same weights and
tokens and reports the largest difference, the dispatch counts, and a conservation run in
which every expert returns ones with unit weights, so each token must come back as exactly
`top_k` (no pair lost, none counted twice).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from epsim.routing import skew_from_dict
from live.config import MoeConfig
from live.dist import rank_device
from live.model import Qwen3MoeModel
from live.routing import Routing, forced_routing
from live.weights import random_weights, to_hf_names

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class EqualityCase:
    """One EP configuration checked against the single-device block.

    Attributes:
        config: block sizes (every layer of `config.num_layers` is run).
        backend: backend name.
        tokens_per_rank: [ranks] tokens each rank holds (uneven and 0 allowed).
        placement: [layers, physical] slot map, or None for the identity.
        skew: `epsim.routing` skew descriptor (forced routing), or None for the real router.
        load: "cache" (fused tensors, IPC path) or "checkpoint" (HF names via load_weights).
    """

    config: MoeConfig
    backend: str
    tokens_per_rank: tuple[int, ...]
    placement: np.ndarray | None = None
    skew: dict | None = None
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    dispatch_mode: str = "static"
    load: str = "cache"
    dispatch_dtype: str = "bf16"
    deepep_mode: str = "normal"
    label: str = ""


def case_inputs(case: EqualityCase, device: torch.device):
    """All ranks' tokens [total, H] and per-layer forced routing (None: router), seeded."""
    cfg, dtype = case.config, DTYPES[case.dtype]
    total = sum(case.tokens_per_rank)
    gen = torch.Generator().manual_seed(case.seed + 17)
    x = torch.randn(total, cfg.hidden_size, generator=gen).to(dtype=dtype, device=device)
    if case.skew is None:
        return x, None
    skew = skew_from_dict(case.skew, cfg.num_layers, cfg.num_experts, cfg.top_k, seed=case.seed)
    rng = np.random.default_rng([case.seed, 0x70C])
    routing = {layer: forced_routing(skew, total, rng, layer=layer, device=device)
               for layer in range(cfg.num_layers)}
    return x, routing


def _slice(routing, begin: int, end: int):
    if routing is None:
        return None
    return {layer: Routing(r.topk_ids[begin:end], r.topk_weights[begin:end])
            for layer, r in routing.items()}


def equality_worker(rank: int, world_size: int, group, case: EqualityCase) -> dict:
    """Run `case` on this rank; compare with the single-device model on all tokens.

    Returns:
        {"max_abs_err", "ref_max_abs", "stats": {layer: DispatchStats lists},
         "conserve_min", "conserve_max", "num_tokens"}.
    """
    cfg, dtype = case.config, DTYPES[case.dtype]
    device = rank_device(case.device)
    layers = range(cfg.num_layers)
    weights = random_weights(cfg, layers, seed=case.seed, dtype=dtype, device=device)
    if group is not None:
        for tensor in weights.values():     # identical weights on every rank, whatever the RNG
            dist.broadcast(tensor, src=0, group=group)
    x_all, routing_all = case_inputs(case, device)
    begin = sum(case.tokens_per_rank[:rank])
    end = begin + case.tokens_per_rank[rank]

    reference = Qwen3MoeModel(cfg, dtype=dtype, device=device)
    reference.load_weight_cache(weights)
    with torch.no_grad():
        y_ref = reference(x_all, routing_all)[begin:end]

    model = Qwen3MoeModel(cfg, placement=case.placement, backend=case.backend, group=group,
                          dtype=dtype, device=device, dispatch_mode=case.dispatch_mode,
                          max_tokens_per_rank=max(max(case.tokens_per_rank), 1),
                          dispatch_dtype=case.dispatch_dtype, deepep_mode=case.deepep_mode,
                          seed=case.seed)
    if case.load == "checkpoint":
        model.load_weights(to_hf_names(weights))
    else:
        model.load_weight_cache(weights)
    with torch.no_grad():
        y = model(x_all[begin:end], _slice(routing_all, begin, end))
    stats = {layer: model.block(layer).last_stats.to_host() for layer in model.layer_ids}

    # conservation: experts return ones, weights are ones -> every token must sum to top_k
    block = model.block(0)
    x_mine = x_all[begin:end]
    forced = _slice(routing_all, begin, end)
    ids = forced[0].topk_ids if forced is not None else block.route(x_mine).topk_ids
    ones = Routing(ids, torch.ones(ids.shape, dtype=torch.float32, device=device))
    with torch.no_grad():
        counted = block(x_mine, routing=ones, expert_fn=lambda rows, counts: torch.ones_like(rows))
    conserve_pairs = int(block.last_stats.local_expert_tokens.sum())
    return {"max_abs_err": float((y.float() - y_ref.float()).abs().max()) if end > begin else 0.0,
            "ref_max_abs": float(y_ref.float().abs().max()) if end > begin else 0.0,
            "stats": stats, "num_tokens": end - begin,
            "conserve_min": float(counted.float().min()) if end > begin else float(cfg.top_k),
            "conserve_max": float(counted.float().max()) if end > begin else float(cfg.top_k),
            "conserve_pairs": conserve_pairs}


def tolerance(dtype: str, ref_max_abs: float) -> float:
    """Largest acceptable |EP - reference|: summation order differs between the paths, so
    allow a few units in the last place of the output's scale (fp32: ~1e-5 relative; bf16,
    8 mantissa bits: 1/64 relative)."""
    scale = max(1.0, ref_max_abs)
    return (1e-5 if dtype == "float32" else 1.0 / 64) * scale


def equality_cases_worker(rank: int, world_size: int, group, cases: list[EqualityCase]) -> list[dict]:
    """`equality_worker` for several cases in one spawn (process start-up is the slow part)."""
    return [equality_worker(rank, world_size, group, case) for case in cases]
