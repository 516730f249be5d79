"""Synthetic measurement records whose times come from the cost models with known parameters,
so a fit can be checked against the truth (shared by the calibrate and validate tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from epsim.cost.record import predict_record
from epsim.profile import Component, Profile
from epsim.records import MeasurementRecord, Provenance, write_records

PROVENANCE = Provenance(device="2x NVIDIA H200", hardware="H200", torch="2.11.0", nccl="2.28.9",
                        commit="abc123")
TRUTH = Profile(name="truth", hardware="H200", components={
    # torch (NCCL, rank-deduplicated copies) pays bytes, no per-copy terms (`comm.per_message`);
    # its dispatch hides 10 us of fixed work under transfers larger than that (from ~200 tokens)
    "torch/dispatch": Component(params={"base_us": 900.0, "overlap_us": 10.0, "nvl_gbps": 150.0}),
    "torch/combine": Component(params={"base_us": 200.0, "nvl_gbps": 200.0}),
    # the experts: the kernel model (the single-GPU `local` records below) for every backend,
    # plus, in torch's eager stage, the block's permute and weighting and the host overhead
    "any/experts/graph": Component(params={"base_us": 30.0, "per_expert_us": 2.0, "hbm_gbps": 3000.0,
                                           "tflops": 300.0, "wave_us": 0.5}),
    "torch/experts/host": Component(params={"base_us": 700.0}),
    "torch/moe_layer": Component(params={"sync_us": 40.0}),
})
SHAPES = {"Qwen3-30B-A3B": (2048, 768), "Qwen3-235B-A22B": (4096, 1536)}
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SKEWS = ({"kind": "uniform"}, {"kind": "zipf", "alpha": 1.0},
         {"kind": "hotset", "num_hot": 16, "hot_frac": 0.5, "shuffle_per_layer": False})


def point_counts(tokens: int, skew: dict, rng: np.random.Generator, num_experts: int = 128,
                 top_k: int = 8, ep: int = 2, per_pair: bool = False) -> dict:
    """Per-rank counts of one dispatch of `tokens` per rank under `skew`: one copy per (token,
    rank) (`torch`), or per (token, expert) with `per_pair` (`mooncake`)."""
    from epsim.routing import skew_from_dict
    model = skew_from_dict(skew, 1, num_experts, top_k, seed=0)
    per = num_experts // ep
    local = np.zeros((ep, per))
    send = np.zeros(ep)
    recv = np.zeros(ep)
    for src in range(ep):
        ids = model.topk(tokens, rng)                                      # [tokens, top_k]
        np.add.at(local, (ids // per, ids % per), 1.0)
        for dst in range(ep):
            if dst != src:
                hit = ids // per == dst
                copies = float(hit.sum() if per_pair else hit.any(axis=1).sum())
                send[src] += copies
                recv[dst] += copies
    return {"send_tokens_per_rank": send.tolist(), "recv_tokens_per_rank": recv.tolist(),
            "local_expert_tokens": local.tolist(),
            "expert_tokens_per_rank": local.sum(axis=1).tolist()}


def synthetic_records(noise: float = 0.0, seed: int = 0, tokens=TOKENS, skews=SKEWS,
                      truth: Profile = TRUTH, backend: str = "torch",
                      dispatch_dtype: str = "bf16", shapes: dict = SHAPES,
                      scale: float = 1.0, mode: str = "",
                      kernel: bool = True) -> list[MeasurementRecord]:
    """dispatch, experts, combine and moe_layer records of `backend` over the grid (`mode`
    "graph": timed device-only), and with `kernel` the grouped GEMM alone on the same counts (a
    single-GPU `local` experts record, device time), timed by `truth` times `scale` (another
    machine) times a log-normal factor of sd `noise`."""
    rng = np.random.default_rng(seed)
    kernel_rng = np.random.default_rng([seed, 1])
    out = []
    for model, (hidden, inter) in shapes.items():
        for skew in skews:
            for t in tokens:
                counts = point_counts(t, skew, rng, per_pair=backend == "mooncake")
                kinds = [("dispatch", backend), ("experts", backend), ("combine", backend),
                         ("moe_layer", backend)] + ([("experts", "local")] if kernel else [])
                for kind, owner in kinds:
                    base = dict(kind=kind, backend=owner, ep_size=2, num_tokens_per_rank=t,
                                hidden_size=hidden, moe_intermediate_size=inter, num_experts=128,
                                num_physical_experts=128, top_k=8, model=model, skew=skew,
                                dispatch_dtype=dispatch_dtype if owner != "local" else "",
                                median_us=1.0, provenance=PROVENANCE, num_iters=20,
                                mode=mode if owner != "local" else "",
                                timing="device" if owner == "local" else "", **counts)
                    rec = MeasurementRecord(**base)
                    # the kernel records' noise from their own stream: the others' as before
                    draw = kernel_rng if owner == "local" else rng
                    us = predict_record(rec, truth) * scale * float(np.exp(draw.normal(0.0, noise)))
                    out.append(rec.model_copy(update={"median_us": us, "p10_us": us * 0.95,
                                                      "p90_us": us * 1.05}))
    return out


def write_synthetic(path: Path, **kwargs) -> Path:
    write_records(synthetic_records(**kwargs), path, append=False)
    return path
