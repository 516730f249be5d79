"""Device time and host overhead: which profile component gives a stage's time in a step.

A stage (a backend's dispatch, experts or combine) costs **device time** — what the GPU
spends, measured launched ahead of the GPU as a CUDA graph replays it (`<backend>/<kind>/graph
[/...]` components) — and, in an **eager** step only, **host overhead** (launch, sync, Python;
`<backend>/<kind>/host`, else the pooled `any/<kind>/host`), fitted on its own as eager minus
device time, with its own p10/p90. SGLang replays decode steps within `cuda_graph_max_bs` as
CUDA graphs (device time); prefill and mixed steps run eagerly (device + host).

Where no device-only timing exists (`torch`, whose split sizes pass through the host, so it
cannot be captured), the eager component is used in both modes: its time holds the host's
inside (`device_only` False), a stated upper bound for a graph step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from epsim.profile import GRAPH, Component, Profile, component_key

HOST = "host"
TIME_MODES = ("auto", "graph", "eager")    # auto: what SGLang runs (decode graph, prefill eager)
P10_Z = 1.2815515655446004                 # standard normal quantile of 0.9


def graph_path(mode_path: str) -> str:
    """The CUDA-graph (device-only) variant of a component mode path (`fp8` -> `graph/fp8`)."""
    return "/".join(p for p in (GRAPH, mode_path) if p)


def host_component(profile: Profile, backend: str, kind: str) -> tuple[str, Component] | None:
    """(key, component) of a stage's host overhead: `<backend>/<kind>/host`, else `any/...`."""
    for key in (component_key(backend, kind, HOST), component_key("any", kind, HOST)):
        if key in profile.components:
            return key, profile.components[key]
    return None


@dataclass(frozen=True)
class StageTiming:
    """Where one stage's time comes from in one step mode.

    Attributes:
        kind: "dispatch", "combine" or "experts".
        eager: an eager step (host overhead added) rather than a CUDA-graph replay.
        key: profile key of the time's component, "" for datasheet values.
        mode_path: the mode path to read its parameters with (`Profile.params`).
        device_only: that component was timed device-only (graph); False: eager timing, the
            host's time is inside it.
        host_key: profile key of the host overhead added ("" for none).
        host_us: host overhead added per stage call (median, µs); 0 in a graph step.
        host_p10_us, host_p90_us: its p10 / p90.
    """

    kind: str
    eager: bool
    key: str
    mode_path: str
    device_only: bool
    host_key: str = ""
    host_us: float = 0.0
    host_p10_us: float = 0.0
    host_p90_us: float = 0.0


def stage_timing(profile: Profile, backend: str, kind: str, mode_path: str,
                 eager: bool, device_owner: str | None = None) -> StageTiming:
    """How `backend`'s `kind` stage is timed in a graph (`eager` False) or eager step.

    Graph step: the device-only component (`.../graph[/...]`), falling back to the eager one.
    Eager step: the device-only component plus the fitted host overhead; where either is
    missing, the eager component (device and host timed together), as older profiles hold.
    `device_owner` reads the device time from another owner's components than `backend`'s
    (the experts: the kernel model, `any/experts[/graph]`, for every backend) while the host
    overhead stays the backend's own.
    """
    owner = device_owner or backend
    device = profile.resolve(owner, kind, graph_path(mode_path))
    device_only = device is not None and GRAPH in device[0].split("/")[2:]
    if not eager:
        if device is None:
            return StageTiming(kind, False, "", graph_path(mode_path), False)
        return StageTiming(kind, False, device[0], graph_path(mode_path), device_only)
    host = host_component(profile, backend, kind) if device_only else None
    if host is not None:
        key, comp = host
        median = comp.params.get("base_us", 0.0)
        return StageTiming(kind, True, device[0], graph_path(mode_path), True, key, median,
                           median * comp.spread.get("p10_ratio", 1.0),
                           median * comp.spread.get("p90_ratio", 1.0))
    eager_found = profile.resolve(owner, kind, mode_path)
    if eager_found is None:
        return StageTiming(kind, True, "", mode_path, False)
    eager_key = eager_found[0]
    return StageTiming(kind, True, eager_key, mode_path, GRAPH in eager_key.split("/")[2:])


def band_ratios(component: Component | None) -> tuple[float, float] | None:
    """(p10, p90) of measured / predicted for a component's prediction, or None (datasheet or
    a profile without spreads: no measured band).

    From `spread` (written by calibration, `epsim.calibrate.spread`): `p10_ratio`/`p90_ratio`
    when given, else a log-normal band from `log_bias` and the root sum of squares of the
    pass-to-pass, run-to-run and fit-residual log standard deviations.
    """
    if component is None or not component.spread:
        return None
    s = component.spread
    if "p10_ratio" in s and "p90_ratio" in s:
        return s["p10_ratio"], s["p90_ratio"]
    sd = math.sqrt(sum(s.get(k, 0.0) ** 2 for k in ("pass_log_sd", "run_log_sd", "fit_log_sd")))
    bias = s.get("log_bias", 0.0)
    return math.exp(bias - P10_Z * sd), math.exp(bias + P10_Z * sd)


def stage_band(profile: Profile, timing: StageTiming, device_us: float,
               graph: bool) -> tuple[float, float] | None:
    """(p10, p90) µs of a stage predicted at `device_us` (+ its host overhead when eager), or
    None where the component has no measured spread (datasheet)."""
    comp = profile.components.get(timing.key) if timing.key else None
    band = band_ratios(comp)
    if band is None:
        return None
    if graph or not timing.host_key:
        return device_us * band[0], device_us * band[1]
    return device_us * band[0] + timing.host_p10_us, device_us * band[1] + timing.host_p90_us
