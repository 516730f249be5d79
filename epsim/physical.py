"""Physical bounds of cost-model parameters, by the unit their name carries.

A profile is user input like a scenario: a parameter that is NaN, negative or 1e308 would
give zero-step runs, `nan` throughput or SimPy's "Negative delay" deep inside a simulation.
Bounds are an order of magnitude around any datasheet (NVLink 5 is 900 GB/s per direction,
B200 HBM 8000 GB/s, FP8 peaks ~5000 TFLOP/s; a fixed cost of 10 s per call is no GPU's).
"""

from __future__ import annotations

import math

MAX_GBPS = 1e5          # GB/s (1e9 bytes/s): ~10x the fastest memory of any datasheet
MAX_TFLOPS = 1e5        # ~20x the largest FP8 peak
MAX_US = 1e7            # 10 s for a fixed or per-item cost
MIN_SIGNED_US = -1e4    # `sync_us` may be negative (a whole layer overlaps its parts), not by 10 ms

# (name suffix, low, high, low inclusive): first match wins; `sync_us` is the one signed term
BOUNDS = (
    ("sync_us", MIN_SIGNED_US, MAX_US, True),
    ("_gbps", 0.0, MAX_GBPS, False),
    ("tflops", 0.0, MAX_TFLOPS, False),
    ("_us", 0.0, MAX_US, True),
    ("_us_per_kb", 0.0, MAX_US, True),
    ("_us_per_slot", 0.0, MAX_US, True),
    # a share of the shorter branch a second stream hides (`epsim.cost.dual_stream`): may be none
    ("_overlap_frac", 0.0, 1.0, True),
    ("_frac", 0.0, 1.0, False),             # an efficiency: a fraction of the datasheet figure
    # a rate against the datasheet HBM that L2 may beat (MLA's re-reads, `epsim.cost.mla`)
    ("_hbm_ratio", 0.0, 10.0, False),
    # a call's extra time at a power-capped clock over the boost clock's (`cap_slowdown_ratio`,
    # `epsim.cost.collector_burst`): none, or up to 10x
    ("_slowdown_ratio", 0.0, 10.0, True),
)


def param_problem(name: str, value: float) -> str | None:
    """Why `value` is not a physical value of parameter `name` (None if it is).

    Returns:
        `must be > 0 and <= 100000 (GB/s)`-style rule text, or None.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "must be a finite number"
    for suffix, low, high, inclusive in BOUNDS:
        if name.endswith(suffix):
            above = value >= low if inclusive else value > low
            if not (above and value <= high):
                unit = {"_gbps": "GB/s", "tflops": "TFLOP/s", "_frac": "of the datasheet",
                        "_overlap_frac": "of the shorter branch",
                        "_hbm_ratio": "of the datasheet HBM",
                        "_slowdown_ratio": "of the boost clock's call time"}.get(
                    suffix, "µs")
                return f"must be {'>=' if inclusive else '>'} {low:g} and <= {high:g} ({unit})"
            return None
    return None


def range_problem(bounds) -> str | None:
    """Why a fitted `valid_range` entry is not `[low, high]` of finite numbers (None if it is)."""
    if not isinstance(bounds, (list, tuple)) or len(bounds) != 2:
        return "must be [low, high] (two numbers)"
    low, high = bounds
    if not all(isinstance(b, (int, float)) and math.isfinite(b) for b in bounds):
        return "must be [low, high] of finite numbers"
    if low > high:
        return "must have low <= high"
    return None
