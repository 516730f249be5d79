"""A small, fast scenario for the plan tests: Qwen3-30B-A3B decode, about 0.15 s per point (a
window of 1.2 s: the keep-up verdict needs a few dozen steps of ~15 ms)."""

from __future__ import annotations

import copy

import yaml

TINY_PLAN_SCENARIO = {
    "name": "tiny_plan",
    "model": "Qwen3-30B-A3B",
    "cluster": {"gpu": "H200", "num_nodes": 2, "price_per_gpu_hour": 2.0},
    "deployment": {"ep_size": 8, "disaggregation_mode": "decode", "moe_a2a_backend": "deepep",
                   "max_running_requests": 32},
    "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 170},
                 "output_len": {"kind": "fixed", "value": 20},
                 "skew": {"kind": "zipf", "alpha": 0.5}, "duration_s": 1.5, "warmup_s": 0.3},
    "seed": 3,
}


def write_tiny_scenario(directory, rate_per_s: float | None = None) -> str:
    """The tiny plan's scenario file in `directory`, at its own offered load or `rate_per_s`."""
    data = copy.deepcopy(TINY_PLAN_SCENARIO)
    if rate_per_s is not None:
        data["workload"]["arrivals"]["rate_per_s"] = rate_per_s
    path = directory / "tiny_plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)
