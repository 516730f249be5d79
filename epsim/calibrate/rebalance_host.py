"""Fit of `any/rebalance_host`: the host work of a rebalance, one line per timed implementation.

Each `rebalance_term` record (`live.bench.eplb_host`) times one term of one implementation on
one shape and names its work (`extra.work`: layers x physical slots for a placement algorithm
or a move plan; steps x layers x experts x redundant slots per node for SGLang 0.4.6's
chunkwise algorithm; map elements for a metadata update). Per implementation:

    t_us = <key>_coef_us * work ** <key>_exponent

by least squares on the logarithms (relative error; a power law, since a memory-bound
implementation's time per unit grows once its arrays outgrow the caches, as SGLang 0.4.6's
[steps, layers, experts] work does). `<key>` is the implementation's name made a parameter name (`IMPL_KEYS`).
Device terms (`timing == "device"`) are not host work and are not fitted here.
"""

from __future__ import annotations

import re

import numpy as np

from epsim.calibrate.inputs import SourcedRecord
from epsim.profile import Component


def impl_key(term: str, impl: str) -> str:
    """Parameter stem of an implementation: `algorithm` of `epsim.eplb:sticky` -> `sticky`;
    the SGLang files -> `sglang_reference_<policy>` / `sglang046_prefill`."""
    if impl.startswith("epsim.eplb:"):
        name = impl.split(":", 1)[1]
        return name if term == "algorithm" else name.replace("plan_moves", "plan")
    if "eplb_algorithms/deepseek.py" in impl:
        return "sglang_reference_" + impl.rsplit(":", 1)[1]
    if "managers/deepseek_eplb.py" in impl:
        return "sglang046_" + impl.rsplit(":", 1)[1]
    return re.sub(r"[^a-z0-9]+", "_", f"{term}").strip("_")


def fit_rebalance_host(records: list[SourcedRecord]) -> Component | None:
    """`any/rebalance_host` from `rebalance_term` host records; None without any."""
    groups: dict[str, list[SourcedRecord]] = {}
    for s in records:
        r = s.record
        if r.kind != "rebalance_term" or r.timing == "device" or "work" not in r.extra:
            continue
        groups.setdefault(impl_key(r.extra["term"], r.extra["impl"]), []).append(s)
    if not groups:
        return None
    params, apes, ranges = {}, [], {}
    for key, members in sorted(groups.items()):
        work = np.array([float(s.record.extra["work"]) for s in members])
        measured = np.array([s.measured_us for s in members])
        if len(set(work.tolist())) > 1:
            exponent, log_coef = np.polyfit(np.log(work), np.log(measured), 1)
        else:                               # one shape: linear in work through it
            exponent, log_coef = 1.0, float(np.log(measured.mean() / work[0]))
        params[f"{key}_coef_us"] = float(np.exp(log_coef))
        params[f"{key}_exponent"] = float(exponent)
        apes += (np.abs(np.exp(log_coef) * work ** exponent - measured) / measured * 100.0).tolist()
        ranges[f"{key}_work"] = [float(work.min()), float(work.max())]
    machines = sorted({s.record.provenance.device for s in records
                       if s.record.kind == "rebalance_term"})
    return Component(params=params, source="fit",
                     residuals={"mape": round(float(np.mean(apes)), 3),
                                "max_ape": round(float(np.max(apes)), 3),
                                "num_records": float(sum(len(m) for m in groups.values()))},
                     valid_range=ranges,
                     note="host time of a rebalance's terms, one thread, measured on "
                          + "; ".join(machines))
