"""How far to trust a plan's latencies: the p10-p90 band of a run's step time, carried to the
metrics an SLO constrains, and the verdict "marginal" for a point whose band crosses its bound.

The step-time band adds each component's measured p10/p90 ratio (`epsim.cost.provenance`:
pass-to-pass and machine-to-machine spread, measured/predicted) weighted by its share of step
time: p10 = sum(share x p10_ratio), p90 = sum(share x p90_ratio). Adding the ends treats the
components' errors as moving together, the cautious choice. A component with no measured spread
(a datasheet part, the fitted layer sync) counts at ratio 1: the band says nothing about it, and
`band.spread_share` says how much of the step the band covers.

Latencies scale with the step time (TPOT and ITL are step gaps; TTFT is a queue of steps), so a
latency's band is its value times the two ratios; throughput's is its value divided by them.
"""

from __future__ import annotations

import math

import numpy as np

BAND_COLUMNS = ("band.p10_ratio", "band.p90_ratio", "band.spread_share")
# metrics the step band scales: latencies (ms) up with the step, throughputs down
_LATENCY_PREFIXES = ("ttft_ms.", "tpot_ms.", "itl_ms.", "e2e_ms.", "step_ms.")
_THROUGHPUT = ("throughput_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
               "input_tokens_per_s_per_gpu")


def step_band(components: list[dict]) -> dict[str, float]:
    """`BAND_COLUMNS` of a run from its provenance components (`summary["provenance"]
    ["components"]`: share, p10_ratio, p90_ratio each); NaN ratios when there are none."""
    total = sum(c["share"] for c in components)
    if not total > 0:
        return dict.fromkeys(BAND_COLUMNS, math.nan)
    lo = hi = spread = 0.0
    for c in components:
        share = c["share"] / total
        has = c.get("p10_ratio") is not None and c.get("p90_ratio") is not None
        lo += share * (c["p10_ratio"] if has else 1.0)
        hi += share * (c["p90_ratio"] if has else 1.0)
        spread += share if has else 0.0
    return {"band.p10_ratio": float(lo), "band.p90_ratio": float(hi), "band.spread_share": float(spread)}


def has_band(metric: str) -> bool:
    """Whether the step band applies to `metric` (a latency or a throughput column)."""
    return metric.startswith(_LATENCY_PREFIXES) or metric in _THROUGHPUT


def band(row: dict, metric: str) -> tuple[float, float] | None:
    """(p10, p90) of a metric of a plan row; None where the band does not apply or is unknown."""
    value = row.get(metric)
    lo, hi = row.get("band.p10_ratio"), row.get("band.p90_ratio")
    if not has_band(metric) or value is None or lo is None or hi is None:
        return None
    if not all(math.isfinite(v) for v in (value, lo, hi)) or lo <= 0:
        return None
    if metric in _THROUGHPUT:
        return value / hi, value / lo
    return value * lo, value * hi


def band_columns(rows: list[dict], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """[rows] p10 and p90 of `metric` (the value itself where a row has no band)."""
    lo = np.empty(len(rows))
    hi = np.empty(len(rows))
    for i, row in enumerate(rows):
        b = band(row, metric)
        value = row.get(metric)
        value = math.nan if value is None else float(value)
        lo[i], hi[i] = b if b is not None else (value, value)
    return lo, hi


def band_text(row: dict, metric: str) -> str:
    """`p10-p90 19.4-22.4` of a metric, or '' where it has no band."""
    b = band(row, metric)
    return "" if b is None else f"p10-p90 {b[0]:.4g}-{b[1]:.4g}"
