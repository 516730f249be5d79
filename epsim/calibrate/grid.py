"""The calibration bench's grid, defined once: `live.bench.sweep` measures it and
`epsim.validate.scaling` predicts it before it is measured (stdlib only, no torch).

GPU: Qwen3-30B-A3B (H 2048, I 768) and Qwen3-235B-A22B (H 4096, I 1536), 128 experts, top-8;
tokens per rank 1, 2, 4, ..., 4096; skews uniform, Zipf(1.0) and a hot set of 16 experts taking
half the traffic, all on rank 0 (`shuffle_per_layer: false`) so the busiest rank slows. CPU
(gloo): two small shapes with two hidden sizes, so per-copy and per-byte terms separate in a fit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """One MoE layer as the bench runs it (the `live.config.MoeConfig` sizes, no torch)."""

    name: str
    hidden_size: int
    moe_intermediate_size: int
    num_experts: int
    top_k: int


GPU_MODELS = ("Qwen3-30B-A3B", "Qwen3-235B-A22B")
GPU_TOKENS = tuple(2 ** i for i in range(13))                          # 1 .. 4096 per rank
NONE_TOKENS = (1, 8, 64, 512, 4096)          # `none` is a reference: a few points suffice
SPLIT_ABOVE_TOKENS = 512   # low-latency buffers for more tokens are a separate (later) case
UNIFORM = {"kind": "uniform"}
HOTSET = {"kind": "hotset", "num_hot": 16, "hot_frac": 0.5, "shuffle_per_layer": False}
SKEWS = (UNIFORM, {"kind": "zipf", "alpha": 1.0}, HOTSET)

CPU_SHAPES = {"cpu-h256": Shape("cpu-h256", 256, 128, 8, 2),
              "cpu-h512": Shape("cpu-h512", 512, 128, 8, 2)}
CPU_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CPU_SKEWS = (UNIFORM, {"kind": "zipf", "alpha": 1.0},
             {"kind": "hotset", "num_hot": 2, "hot_frac": 0.5, "shuffle_per_layer": False})
