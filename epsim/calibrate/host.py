"""Fit of host overhead (`<backend>/<kind>/host`, pooled `any/<kind>/host`): what an eager step
adds to a stage's device time.

For every eager record of a stage whose device time was measured too (a `graph` component;
for the block's own ops, the single-GPU `block_ops` records timed eager and device-only; for
a backend's experts stage, the kernel model with the block ops inside the stage and the
backend's layout work), a host sample is `measured - device prediction` at the record's own
counts (less the host part of the block ops the stage holds, `any/block_ops/host`): the
launch, synchronization and Python time the eager harness exposed. The component stores the median as
`base_us` (>= 0: a host cannot give time back) and the samples' p10/p90 relative to it as
`spread` (`p10_ratio`, `p90_ratio`): host overhead has its own distribution, wider than the
device's and moving between machines (docs/calibration.md).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from epsim.calibrate.inputs import SourcedRecord
from epsim.cost.record import inside_host_us, predict_record
from epsim.profile import GRAPH, Component, Profile, component_key

HOST = "host"
HOST_KINDS = ("dispatch", "combine", "experts", "block_ops")


def device_twin(record):
    """The record as a device-only timing (`mode` with a `graph` part): what its device time
    is predicted from."""
    parts = [p for p in record.mode.split("/") if p]
    return record.model_copy(update={"mode": "/".join([GRAPH, *parts])})


def host_samples(records: list[SourcedRecord], profile: Profile
                 ) -> dict[str, list[tuple[SourcedRecord, float, float]]]:
    """(record, measured µs, device µs) per host key, for eager records of the host kinds."""
    out: dict[str, list] = defaultdict(list)
    for s in records:
        r = s.record
        if r.kind not in HOST_KINDS:
            continue
        # device time, and the host part of the block ops an experts stage holds (fitted
        # apart, `any/block_ops/host`): what the stage's own host overhead is measured over
        device = predict_record(device_twin(r), profile) + inside_host_us(r, profile)
        if r.backend != "local":                  # single-GPU records: the pooled key alone
            out[component_key(r.backend, r.kind, HOST)].append((s, s.measured_us, device))
        out[component_key("any", r.kind, HOST)].append((s, s.measured_us, device))
    return out


def fit_host(samples: list[tuple[SourcedRecord, float, float]]) -> Component:
    """The host component of one key from its samples (see the module docstring)."""
    measured = np.array([m for _, m, _ in samples])
    device = np.array([d for _, _, d in samples])
    host = measured - device
    raw_median = float(np.median(host))
    median = max(raw_median, 0.0)             # a host cannot give time back
    predicted = device + median
    ape = np.abs(predicted - measured) / measured * 100.0
    spread = {}
    if median > 0:
        spread = {"p10_ratio": round(max(float(np.percentile(host, 10)), 0.0) / median, 4),
                  "p90_ratio": round(float(np.percentile(host, 90)) / median, 4)}
    tokens = [s.record.num_tokens_per_rank for s, _, _ in samples]
    backends = sorted({s.record.backend for s, _, _ in samples})
    return Component(
        params={"base_us": median}, source="fit", spread=spread,
        residuals={"mape": round(float(ape.mean()), 3), "max_ape": round(float(ape.max()), 3),
                   "num_records": float(len(samples))},
        valid_range={"num_tokens_per_rank": [float(min(tokens)), float(max(tokens))]},
        note=f"eager minus device time of {', '.join(backends)} records: median, p10/p90 as spread"
             + (f"; the median ({raw_median:.1f} µs) is below 0, held at 0 (the device time "
                f"predicted holds the whole eager time)" if raw_median < 0 else ""))
