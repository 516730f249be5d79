"""Fit of `any/rebalance` (EPLB weight moves, `epsim.eplb.cost`) on live measurements.

The model of `epsim.eplb.cost` on one node, per rebalance of `L` layers:

    t = base_us + per_layer_us * L + max_r(bytes_r) / nvlink_gbps * 1e-3
        + nvlink_latency_us * transfers_r*

(`L`: the layers the updater went through, `extra.chunk_layers`, else `num_layers`)

with `bytes_r` the busier direction of rank r's point-to-point bytes and `r*` that rank. Two
kinds of records feed one joint least-squares fit (relative error, coefficients >= 0, bandwidth
<= the datasheet's):
  p2p_copy   one copy of `bytes` between two GPUs: `latency + bytes / bandwidth`;
  rebalance  `live.eplb` moves, with `extra.send_bytes_per_rank`, `recv_bytes_per_rank`,
             `transfers_per_rank` (totals over the rebalance; the chunks' busiest ranks are
             taken to be the busiest overall, exact for one chunk).
The EPLB algorithm's own time is not in these records and stays the modelled default.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import lsq_linear

from epsim.calibrate.inputs import RecordWarning, SourcedRecord
from epsim.profile import Component

PARAMS = ("base_us", "per_layer_us", "nvlink_gbps", "nvlink_latency_us")
_NEEDED = ("send_bytes_per_rank", "recv_bytes_per_rank", "transfers_per_rank")


def _row(s: SourcedRecord) -> np.ndarray | None:
    """[4] design row (1, layers, busiest KB, its transfers), or None (warned) if unusable."""
    r = s.record
    if r.kind == "p2p_copy":
        return np.array([0.0, 0.0, r.bytes * 1e-3, 1.0])
    missing = [k for k in _NEEDED if not r.extra.get(k)]
    if missing:
        warnings.warn(f"{s.where}: extra.{missing[0]} (missing) must list per-rank values for a "
                      f"rebalance record -- skipped", RecordWarning, stacklevel=3)
        return None
    busy = np.maximum(np.asarray(r.extra["send_bytes_per_rank"], dtype=np.float64),
                      np.asarray(r.extra["recv_bytes_per_rank"], dtype=np.float64))
    rank = int(busy.argmax())
    chunks = r.extra.get("chunk_layers")               # the layers the updater went through
    layers = sum(len(c) for c in chunks) if chunks else r.num_layers
    return np.array([1.0, float(layers), busy[rank] * 1e-3,
                     float(r.extra["transfers_per_rank"][rank])])


def fit_rebalance(records: list[SourcedRecord], nvlink_peak_gbps: float) -> Component | None:
    """`any/rebalance` from p2p_copy and rebalance records; None with fewer than two usable."""
    rows, used = [], []
    for s in records:
        if s.record.kind in ("p2p_copy", "rebalance") and (s.record.kind == "rebalance"
                                                          or s.record.bytes > 0):
            row = _row(s)
            if row is not None:
                rows.append(row)
                used.append(s)
    if len(used) < 2:
        return None
    a = np.stack(rows)
    measured = np.array([s.measured_us for s in used])
    fitted = np.abs(a).max(axis=0) > 0
    scale = np.abs(a[:, fitted] / measured[:, None]).max(axis=0)
    lower_used = np.array([0.0, 0.0, 1.0 / nvlink_peak_gbps, 0.0])[fitted] * scale
    sol = lsq_linear(a[:, fitted] / measured[:, None] / scale, np.ones_like(measured),
                     bounds=(lower_used, np.inf), method="bvls")
    coef = np.full(4, np.nan)
    coef[fitted] = sol.x / scale
    params = {}
    for name, value in zip(PARAMS, coef):
        if not np.isfinite(value):
            continue
        params[name] = float(1.0 / value) if name == "nvlink_gbps" else float(value)
    predicted = a @ np.nan_to_num(coef)
    ape = np.abs(predicted - measured) / measured * 100.0
    kinds = sorted({s.record.kind for s in used})
    unfitted = [p for p, f in zip(PARAMS, fitted) if not f]
    return Component(params=params, source="fit",
                     residuals={"mape": round(float(ape.mean()), 3),
                                "max_ape": round(float(ape.max()), 3),
                                "num_records": float(len(used))},
                     valid_range={"bytes": [float(min(s.record.bytes for s in used)),
                                            float(max(s.record.bytes for s in used))]},
                     note=f"from {' and '.join(kinds)} records"
                          + (f"; not in the data, defaults kept: {', '.join(unfitted)}"
                             if unfitted else ""))
