"""A per-layer timeline of one step as a Chrome trace (`chrome://tracing`, Perfetto).

Built from one step's `StepCost` (no extra simulation): each MoE layer's attention,
dispatch, experts and combine back to back on one track, or, with two-batch overlap, the
stages of micro-batches A and B in SGLang's issue order on the compute stream and each
exchange's part off it on a communication track (`epsim.cost.tbo.schedule_events`, from the
stages the step was priced with).
"""

from __future__ import annotations

import json
from pathlib import Path

from epsim.cost.comm import per_message
from epsim.cost.step import StepCost
from epsim.cost.tbo import schedule_events
from epsim.io.write import write_text


def _event(name: str, start_us: float, dur_us: float, tid: int, layer: int) -> dict:
    return {"name": name, "ph": "X", "ts": round(start_us, 3), "dur": round(dur_us, 3),
            "pid": 0, "tid": tid, "args": {"layer": layer}}


def step_trace(cost: StepCost, two_batch_overlap: bool = False) -> dict:
    """Chrome trace events of one step, microseconds from the step's start."""
    events = []
    t = 0.0
    overlap = two_batch_overlap and cost.stages is not None
    if overlap:
        for who, name, start, dur, layer, track in schedule_events(
                cost.stages, "decode" if cost.phase == "decode" else "prefill",
                per_message(cost.traffic.dedup)):
            if name != "end" and dur > 0:
                events.append(_event(f"{who} {name}", start, dur, track, layer))
        t = float(cost.layer_us.sum())
    else:
        for layer in range(cost.layer_us.shape[0]):
            for part in ("attention_us", "dispatch_us", "experts_us", "combine_us"):
                dur = float(getattr(cost, part)[layer])
                if part == "experts_us":     # the rank's own compute: shared experts, block ops
                    dur += float(cost.shared_experts_us[layer] + cost.block_ops_us[layer])
                events.append(_event(part[:-3], t, dur, 0, layer))
                t += dur
    events.append(_event("dense + lm_head", t, cost.dense_us, 0, -1))
    t += cost.dense_us
    events.append(_event("step overhead", t, cost.overhead_us, 0, -1))
    names = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "compute"}}]
    if overlap:
        names.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": 1,
                      "args": {"name": "exchanges off the compute stream"}})
    return {"traceEvents": names + events, "displayTimeUnit": "ms",
            "otherData": {"phase": cost.phase, "mode": cost.mode, "step_us": cost.step_us}}


def write_timeline(cost: StepCost, path: str | Path, two_batch_overlap: bool = False) -> Path:
    """`timeline.json` of one step, written atomically; returns its path."""
    return write_text(path, json.dumps(step_trace(cost, two_batch_overlap)) + "\n")
